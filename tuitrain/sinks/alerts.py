"""`AlertSender`: each `AlertRaised` to a webhook (a JSON POST with a Slack-style `text`) and/or a
command (the same JSON on its stdin), from a thread of its own: training never waits for a slow or
dead receiver. Each delivery has a timeout; a failure is said once in the run's log (and again only
after a delivery has worked), never raised. `[alerts]` in a config, `Learner(alerts=...)`,
`Monitor(alerts=...)`; `TUITRAIN_ALERTS_WEBHOOK` / `TUITRAIN_ALERTS_COMMAND` fill what none sets.

Must not import torch or textual.
"""

from __future__ import annotations

import json
import math
import queue
import shlex
import subprocess
import threading
import urllib.error
import urllib.request
from typing import Any, Callable

from tuitrain.core.callbacks import CallbackBase
from tuitrain.core.events import AlertRaised, Event, OutputPrinted, RunStarted
from tuitrain.core.health import Alerts
from tuitrain.core.text import safe_text

TIMEOUT = 5.0  # seconds a webhook or command may take


def payload(event: AlertRaised, run_dir: str, experiment: str) -> dict:
    """The JSON an alert is sent as (SPEC "Health"): `text` reads well in Slack, Discord or a mail."""
    value = event.value
    if isinstance(value, float) and not math.isfinite(value):
        value = str(value)  # JSON has no NaN: the receiver gets "nan" / "inf"
    name = experiment or run_dir or "a run"
    return {"text": f"[tuitrain] {name}: {event.title}. {event.text}", "title": event.title, "level": event.level,
            "rule": event.rule, "action": event.action, "run_dir": run_dir, "experiment": experiment,
            "step": event.step, "value": value}


class AlertSender(CallbackBase):
    """Sends alerts from a daemon thread, started with the first one."""

    step_events = False

    def __init__(self, alerts: Alerts, run_dir: str = "", experiment: str = "",
                 say: Callable[[Event], None] | None = None, timeout: float = TIMEOUT) -> None:
        self.alerts = alerts
        self.run_dir, self.experiment = str(run_dir or ""), experiment
        self.say = say  # where a failure is said (the bus's emit: experiment.log, the screen)
        self.timeout = timeout
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()  # destinations whose failure was said already
        self.sent = 0

    @property
    def active(self) -> bool:
        return bool(self.alerts.webhook or self.alerts.command)

    def __call__(self, event: Event, state: Any) -> None:
        if isinstance(event, RunStarted):
            self.run_dir = self.run_dir or event.run_dir
            self.experiment = self.experiment or event.experiment
        elif isinstance(event, AlertRaised) and self.active:
            self._queue.put(payload(event, self.run_dir, self.experiment))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tuitrain-alerts", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self.alerts.webhook:
                self._deliver("webhook", self.alerts.webhook, lambda: self._post(item))
            if self.alerts.command:
                self._deliver("command", self.alerts.command, lambda: self._command(item))

    def _deliver(self, kind: str, where: str, send: Callable[[], None]) -> None:
        try:
            send()
        except Exception as e:  # never raised: said once
            if kind not in self._failing:
                self._failing.add(kind)
                line = f"alerts: the {kind} {safe_text(where)!r} failed: {type(e).__name__}: {safe_text(str(e))}"
                if self.say is not None:
                    try:
                        self.say(OutputPrinted(text=line + " (said once; alerts go on being tried)",
                                               stream="tuitrain"))
                    except Exception:
                        pass
            return
        self._failing.discard(kind)
        self.sent += 1

    def _post(self, item: dict) -> None:
        data = json.dumps(item).encode()
        request = urllib.request.Request(self.alerts.webhook, data=data, method="POST",
                                         headers={"Content-Type": "application/json", "User-Agent": "tuitrain"})
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if response.status >= 300:
                raise urllib.error.HTTPError(self.alerts.webhook, response.status, "not accepted", response.headers, None)

    def _command(self, item: dict) -> None:
        done = subprocess.run(shlex.split(self.alerts.command), input=json.dumps(item), text=True,
                              capture_output=True, timeout=self.timeout)
        if done.returncode != 0:
            raise RuntimeError(f"exit code {done.returncode}: {(done.stderr or '').strip()[:200]}")

    def close(self) -> None:
        """Send what is queued (each within its timeout), then end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=2 * self.timeout + 1)
            self._thread = None


def alert_sender(alerts: Alerts | dict | None, run_dir: str = "", experiment: str = "",
                 say: Callable[[Event], None] | None = None) -> AlertSender | None:
    """An AlertSender when a webhook or command is set (in `alerts` or the environment), else None."""
    sender = AlertSender(Alerts.of(alerts), run_dir, experiment, say)
    return sender if sender.active else None
