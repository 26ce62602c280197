"""`AlertSender`: each `AlertRaised` to a webhook (a JSON POST with a Slack-style `text`) and/or a
command (the same JSON on its stdin), from a thread of its own: training never waits for a slow or
dead receiver. Each delivery has a timeout; a failure is said once in the run's log (and again only
after a delivery has worked), never raised. `[alerts]` in a config, `Learner(alerts=...)`,
`Monitor(alerts=...)`; `TUITRAIN_ALERTS_WEBHOOK` / `TUITRAIN_ALERTS_COMMAND` fill what none sets.

A receiver never gets a storm: a rule (`AlertRaised.rule`) is sent at most once a minute. An alert
of a rule sent less than a minute ago is held; once the minute is up, one digest carries the newest
alert held and says how many there were (`held_back`); `close()` sends what is still held.

Must not import torch or textual.
"""

from __future__ import annotations

import json
import math
import queue
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from collections.abc import Callable

from tuitrain.core.callbacks import CallbackBase
from tuitrain.core.events import AlertRaised, Event, OutputPrinted, RunStarted
from tuitrain.core.health import Alerts
from tuitrain.core.text import safe_text

TIMEOUT = 5.0  # seconds a webhook or command may take
EVERY = 60.0  # seconds between two sendings of one rule's alerts
WAKE = 0.5  # seconds the sender's thread waits at most while it holds alerts (a clock of tests' may jump)

Payload = dict[str, Any]  # an alert as it is sent: JSON's object


def payload(event: AlertRaised, run_dir: str, experiment: str) -> Payload:
    """The JSON an alert is sent as (SPEC "Health"): `text` reads well in Slack, Discord or a mail."""
    value = event.value
    if isinstance(value, float) and not math.isfinite(value):
        value = str(value)  # JSON has no NaN: the receiver gets "nan" / "inf"
    name = experiment or run_dir or "a run"
    return {
        "text": f"[tuitrain] {name}: {event.title}. {event.text}",
        "title": event.title,
        "level": event.level,
        "rule": event.rule,
        "action": event.action,
        "run_dir": run_dir,
        "experiment": experiment,
        "step": event.step,
        "value": value,
    }


def digest(item: Payload, held: int) -> Payload:
    """The newest of `held` alerts of one rule held back since the rule was last sent, saying so."""
    alerts = "alert" if held == 1 else "alerts"
    return {
        **item,
        "text": f"{item['text']} ({held} more {item['rule']} {alerts} since the previous one sent; this is the newest)",
        "held_back": held,
    }


class AlertSender(CallbackBase):
    """Sends alerts from a daemon thread, started with the first one; a rule at most once every
    `every` seconds of `clock` (the rest held, then sent as one digest)."""

    step_events = False

    def __init__(
        self,
        alerts: Alerts,
        run_dir: str = "",
        experiment: str = "",
        say: Callable[[Event], None] | None = None,
        timeout: float = TIMEOUT,
        *,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.alerts = alerts
        self.run_dir, self.experiment = str(run_dir or ""), experiment
        self.say = say  # where a failure is said (the bus's emit: experiment.log, the screen)
        self.timeout = timeout
        self.every, self.clock = every, clock
        self._queue: queue.Queue[tuple[float, Payload] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()  # destinations whose failure was said already
        # the thread's own: by rule, when it was last sent, and (how many, the newest) held since
        self._last: dict[str, float] = {}
        self._held: dict[str, tuple[int, Payload]] = {}
        self.sent = 0

    @property
    def active(self) -> bool:
        return bool(self.alerts.webhook or self.alerts.command)

    def __call__(self, event: Event, state: Any) -> None:
        if isinstance(event, RunStarted):
            self.run_dir = self.run_dir or event.run_dir
            self.experiment = self.experiment or event.experiment
        elif isinstance(event, AlertRaised) and self.active:
            # the time it came, not the time the thread gets to it: a slow receiver shifts no minute
            self._queue.put((self.clock(), payload(event, self.run_dir, self.experiment)))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tuitrain-alerts", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            got: tuple[float, Payload] | tuple[()] | None
            try:
                got = self._queue.get(timeout=WAKE if self._held else None)
            except queue.Empty:
                got = ()
            if got is None:  # close(): what is held goes now, one digest a rule
                for rule in list(self._held):
                    self._send(self._release(rule))
                return
            if got:
                self._take(*got)
            now = self.clock()
            for rule in [r for r in self._held if now - self._last[r] >= self.every]:
                self._send(self._release(rule, now))

    def _take(self, t: float, item: Payload) -> None:
        """An alert that came at `t`: sent, or held while its rule was sent less than `every` ago."""
        rule = item["rule"]
        last = self._last.get(rule)
        if last is not None and t - last < self.every:
            count, _ = self._held.get(rule, (0, item))
            self._held[rule] = (count + 1, item)
            return
        if rule in self._held:  # the minute is up and this one is the newest: the digest carries it
            count, _ = self._held.pop(rule)
            item = digest(item, count + 1)
        self._last[rule] = t
        self._send(item)

    def _release(self, rule: str, now: float | None = None) -> Payload:
        count, item = self._held.pop(rule)
        if now is not None:
            self._last[rule] = now
        return digest(item, count)

    def _send(self, item: Payload) -> None:
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
                        self.say(OutputPrinted(text=line + " (said once; alerts go on being tried)", stream="tuitrain"))
                    except Exception:
                        pass
            return
        self._failing.discard(kind)
        self.sent += 1

    def _post(self, item: Payload) -> None:
        data = json.dumps(item).encode()
        request = urllib.request.Request(
            self.alerts.webhook,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "tuitrain"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            if response.status >= 300:
                raise urllib.error.HTTPError(
                    self.alerts.webhook, response.status, "not accepted", response.headers, None
                )

    def _command(self, item: Payload) -> None:
        done = subprocess.run(
            shlex.split(self.alerts.command),
            input=json.dumps(item),
            text=True,
            capture_output=True,
            timeout=self.timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"exit code {done.returncode}: {(done.stderr or '').strip()[:200]}")

    def close(self) -> None:
        """Send what is queued and what is held (each within its timeout), then end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=2 * self.timeout + 1)
            self._thread = None


def alert_sender(
    alerts: Alerts | dict[str, Any] | None,
    run_dir: str = "",
    experiment: str = "",
    say: Callable[[Event], None] | None = None,
) -> AlertSender | None:
    """An AlertSender when a webhook or command is set (in `alerts` or the environment), else None."""
    sender = AlertSender(Alerts.of(alerts), run_dir, experiment, say)
    return sender if sender.active else None
