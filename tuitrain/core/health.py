"""The run watches itself: rules that find trouble in training and the action each one takes.

`Watch` is the `[watch]` table (`Learner(watch={...})`): for a non-finite loss or gradient, a loss
spike, a grad-norm spike, a stall and starved data, what to do: "off", "alert", "skip" (the step's
update not applied), "rollback" (back to the newest sound checkpoint before the trouble), "stop"
(graceful, with a checkpoint), "fail" (non-finite only: exit 1, as before there were rules) and, for a
stall, "abort". `Health` applies them for one Learner; the Learner carries the actions out (it owns
the optimizer, the checkpoints and the loop) and every verdict leaves as an `AlertRaised` event.

Where the values come from, so that no rule adds a host-device sync to a step that logs nothing:
- the loss of every step when it is on the host anyway (a CPU run reads it back for free), else the
  loss of the steps that log (read there before the optimizer step);
- the gradients' total norm on the steps that log (computed there for `grad_norm` already), or every
  step where the norm is computed anyway (clipping on the CPU);
- `data_wait` when the run logs it;
- the stall from a watchdog thread that reads the step counter, never from the training thread.

A spike is a value above mean + `spike_sigmas` x sd of the last `spike_window` finite values judged;
the rule starts once half the window is filled. A value acted on with skip, rollback or stop stays out
of the statistics (the run goes on as if it had not come); an alerted one goes in (the run goes on
with it, and a loss that really moved to a new level stops alerting). Consecutive spikes are one
episode: one alert, until a value falls back under the threshold; and an alert-only rule says nothing
more for half a window after it alerts (a burst of spikes is one alert, not a storm at a webhook).
Rules that act (skip, rollback, stop) act on every spike.

Must not import textual, nor torch (the Learner hands plain floats in).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, fields
from typing import Any, Callable

from .control import parse_duration

RULE_ACTIONS = {
    "nonfinite": ("fail", "skip", "rollback", "stop", "alert"),
    "loss_spike": ("off", "alert", "skip", "rollback", "stop"),
    "grad_spike": ("off", "alert", "skip", "rollback", "stop"),
    "stall_action": ("alert", "abort"),
}


@dataclass
class Watch:
    """The `[watch]` table (SPEC "Health"); `Watch.of(dict)` checks it."""

    nonfinite: str = "fail"
    loss_spike: str = "alert"
    grad_spike: str = "alert"
    spike_sigmas: float = 6.0
    spike_window: int = 128
    stall: float = 600.0  # seconds; 0: off (the table takes "10m", "30s", a number of seconds or "")
    stall_action: str = "alert"
    data_wait: float = 0.5  # a share of step time; 0: off
    rollback_lr_factor: float = 1.0
    max_rollbacks: int = 3

    @classmethod
    def of(cls, value: "Watch | dict | None", where: str = "watch") -> "Watch":
        """A Watch from a dict of the table's keys; ValueError naming `where.key` when one is wrong."""
        if isinstance(value, Watch):
            return value
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a table of rules, not {type(value).__name__}")
        known = {f.name for f in fields(cls)}
        out = cls()
        for key, v in value.items():
            if key not in known:
                raise ValueError(f"{where}.{key}: unknown key (known: {', '.join(sorted(known))})")
            if key in RULE_ACTIONS:
                if v not in RULE_ACTIONS[key]:
                    raise ValueError(f"{where}.{key}: {v!r} is not one of {', '.join(RULE_ACTIONS[key])}")
            elif key == "stall":
                v = _seconds(v, f"{where}.stall")
            elif key in ("spike_window", "max_rollbacks"):
                if isinstance(v, bool) or not isinstance(v, int) or v < (4 if key == "spike_window" else 0):
                    least = 4 if key == "spike_window" else 0
                    raise ValueError(f"{where}.{key}: a whole number of {least} or more, not {v!r}")
            else:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"{where}.{key}: a number of 0 or more, not {v!r}")
                if key == "spike_sigmas" and v <= 0:
                    raise ValueError(f"{where}.spike_sigmas: more than 0, not {v!r}")
                if key == "rollback_lr_factor" and not 0 < v <= 1:
                    raise ValueError(f"{where}.rollback_lr_factor: more than 0 and at most 1, not {v!r}")
                if key == "data_wait" and v > 1:
                    raise ValueError(f"{where}.data_wait: a share of step time between 0 and 1, not {v!r}")
                v = float(v)
            setattr(out, key, v)
        return out

    def acts(self, *actions: str) -> bool:
        """Whether a step rule takes one of these actions."""
        return any(getattr(self, r) in actions for r in ("nonfinite", "loss_spike", "grad_spike"))


def _seconds(v: Any, where: str) -> float:
    if v in ("", None, 0, "0", "off"):
        return 0.0
    if isinstance(v, bool):
        raise ValueError(f"{where}: a duration (\"10m\", \"30s\", seconds) or \"\", not {v!r}")
    if isinstance(v, (int, float)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}: a duration of 0 or more seconds, not {v!r}")
        return float(v)
    try:
        return parse_duration(str(v))
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


@dataclass
class Alerts:
    """The `[alerts]` table: where alerts go besides the run's events (SPEC "Health")."""

    webhook: str = ""
    command: str = ""
    bell: bool = True

    @classmethod
    def of(cls, value: "Alerts | dict | None", where: str = "alerts", environ: dict | None = None) -> "Alerts":
        """From a dict; `TUITRAIN_ALERTS_WEBHOOK` / `..._COMMAND` fill a webhook / command left unset."""
        env = os.environ if environ is None else environ
        if isinstance(value, Alerts):
            out = value
        else:
            out = cls()
            if value is not None and not isinstance(value, dict):
                raise ValueError(f"{where} must be a table, not {type(value).__name__}")
            for key, v in (value or {}).items():
                if key not in ("webhook", "command", "bell"):
                    raise ValueError(f"{where}.{key}: unknown key (known: bell, command, webhook)")
                if key == "bell":
                    if not isinstance(v, bool):
                        raise ValueError(f"{where}.bell: true or false, not {v!r}")
                elif not isinstance(v, str):
                    raise ValueError(f"{where}.{key}: a string, not {v!r}")
                elif key == "webhook" and v and not v.startswith(("http://", "https://")):
                    raise ValueError(f"{where}.webhook: an http:// or https:// URL, not {v!r}")
                setattr(out, key, v)
        if not out.webhook:
            out.webhook = env.get("TUITRAIN_ALERTS_WEBHOOK", "")
        if not out.command:
            out.command = env.get("TUITRAIN_ALERTS_COMMAND", "")
        return out


class Spike:
    """mean + k sd over the last `window` values, from running sums (O(1) per value).

    `limit` is the threshold as of the last change (a push, a load), mean + k * max(sd, a floor): the
    loop judges every step's value, and judging one is then a comparison."""

    __slots__ = ("window", "sigmas", "values", "total", "squares", "pushes", "in_episode", "quiet_until",
                 "limit", "least", "recount")

    def __init__(self, window: int, sigmas: float) -> None:
        self.window, self.sigmas = window, sigmas
        self.values: deque[float] = deque()
        self.total = self.squares = 0.0
        self.pushes = 0
        self.in_episode = False
        self.quiet_until = 0  # an alert-only rule says nothing more until this step (no alert storms)
        self.limit: float | None = None  # the next value's threshold (None while warming up)
        self.least = max(2, window // 2)  # values before the rule starts
        self.recount = window * 8  # pushes between recounts of the running sums

    def judge(self, v: float) -> bool:
        """Whether `v` is a spike (not pushed: call `push` when the run keeps it)."""
        limit = self.limit
        return limit is not None and v > limit

    def push(self, v: float) -> None:
        values = self.values
        values.append(v)
        total = self.total + v
        squares = self.squares + v * v
        n = len(values)
        if n > self.window:
            old = values.popleft()
            total -= old
            squares -= old * old
            n -= 1
        pushes = self.pushes = self.pushes + 1
        if pushes % self.recount == 0:  # running sums drift: recount now and then
            total = math.fsum(values)
            squares = math.fsum(x * x for x in values)
        self.total, self.squares = total, squares
        if n < self.least:
            self.limit = None
            return
        # the threshold (this runs every step: max(a, b) written as `b if b > a else a`, its own rule)
        mean = total / n
        var = squares / n - mean * mean
        sd = _sqrt(0.0 if 0.0 > var else var)
        floor = _abs(mean)
        floor = 1e-6 * (1e-12 if 1e-12 > floor else floor)
        self.limit = mean + self.sigmas * (floor if floor > sd else sd)

    def state_dict(self) -> dict:
        return {"values": list(self.values), "in_episode": self.in_episode, "quiet_until": self.quiet_until}

    def load_state_dict(self, d: dict) -> None:
        self.values.clear()
        self.total = self.squares = 0.0
        self.limit = None
        for v in d.get("values", []):
            self.push(float(v))
        self.in_episode = bool(d.get("in_episode", False))
        self.quiet_until = int(d.get("quiet_until", 0))


_sqrt, _abs, _isfinite = math.sqrt, abs, math.isfinite


@dataclass(frozen=True)
class Verdict:
    """What a rule found and what the run does about it."""

    rule: str
    action: str  # "alert", "skip", "rollback", "stop", "fail"
    value: float
    title: str
    text: str
    level: str = "warning"


def _fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else str(v)


class Health:
    """The rules of one run, judging the values the loop hands in. `loss(v, step)` and `grads(norm,
    step)` return a Verdict when a rule acts (None: all well); the caller carries the action out and
    emits the alert (`alert_event`)."""

    def __init__(self, watch: Watch) -> None:
        self.watch = w = watch
        self.loss_spike = Spike(w.spike_window, w.spike_sigmas) if w.loss_spike != "off" else None
        self.grad_spike = Spike(w.spike_window, w.spike_sigmas) if w.grad_spike != "off" else None
        self.judges_grads = self.grad_spike is not None or w.nonfinite != "alert"
        self.rollbacks = 0
        self._starved = False  # data_wait above the share at the last logged step (one alert per episode)

    def loss(self, v: float, step: int) -> Verdict | None:
        if not _isfinite(v):
            return self._nonfinite("loss", v, step)
        rule = self.loss_spike
        if rule is None:
            return None
        limit = rule.limit
        if limit is None or not v > limit:  # all well (every step but a spike's): `_spike`'s first branch
            rule.in_episode = False
            rule.push(v)
            return None
        return self._spike(rule, "loss_spike", self.watch.loss_spike, v, step, "loss spike", "loss", "steps")

    def grads(self, norm: float, step: int) -> Verdict | None:
        if not _isfinite(norm):
            return self._nonfinite("gradients", norm, step)
        rule = self.grad_spike
        if rule is None:
            return None
        limit = rule.limit
        if limit is None or not norm > limit:
            rule.in_episode = False
            rule.push(norm)
            return None
        return self._spike(rule, "grad_spike", self.watch.grad_spike, norm, step,
                           "grad-norm spike", "grad_norm", "logged steps")

    def _spike(self, rule: Spike, name: str, action: str, v: float, step: int, title: str, what: str,
               over: str) -> Verdict | None:
        """A spike rule's verdict on finite `v` above its limit (`loss` and `grads` keep the other values
        themselves); see the module docstring: episodes, the quiet half window."""
        limit = rule.limit
        if action == "alert":
            rule.push(v)
            if rule.in_episode or step < rule.quiet_until:
                return None
            rule.quiet_until = step + rule.window // 2
        rule.in_episode = True
        return Verdict(name, action, v, f"{title} at step {step}",
                       f"{what} {_fmt(v)} at step {step} is above {_fmt(limit)} (mean + "
                       f"{self.watch.spike_sigmas:g} sd of the last {len(rule.values)} {over})" + _doing(action))

    def _nonfinite(self, what: str, v: float, step: int) -> Verdict:
        action = self.watch.nonfinite
        return Verdict("nonfinite", action, v, f"non-finite {what} at step {step}",
                       f"the {what} {'is' if what == 'loss' else 'have a norm of'} {v} at step {step}"
                       + _doing(action), level="error" if action in ("fail", "stop") else "warning")

    def data_wait(self, share: float, step: int) -> Verdict | None:
        """`data_wait` as logged: an alert when more than the rule's share of step time waits for data
        (once, until it falls back under the share)."""
        limit = self.watch.data_wait
        if not limit or not math.isfinite(share):
            return None
        if share <= limit:
            self._starved = False
            return None
        if self._starved:
            return None
        self._starved = True
        return Verdict("data_wait", "alert", share, f"training waits for data at step {step}",
                       f"{share:.0%} of step time waits for the next batch (more than {limit:.0%}): the data "
                       "loader is too slow (more num_workers, faster decoding, data nearer the machine)")

    def state_dict(self) -> dict:
        return {"loss": self.loss_spike.state_dict() if self.loss_spike else None,
                "grads": self.grad_spike.state_dict() if self.grad_spike else None,
                "rollbacks": self.rollbacks}

    def load_state_dict(self, d: dict | None) -> None:
        if not d:
            return
        if self.loss_spike is not None and d.get("loss"):
            self.loss_spike.load_state_dict(d["loss"])
        if self.grad_spike is not None and d.get("grads"):
            self.grad_spike.load_state_dict(d["grads"])
        self.rollbacks = int(d.get("rollbacks", 0))


def _doing(action: str) -> str:
    return {"alert": "", "skip": "; the step is skipped (its update not applied)",
            "rollback": "; rolling back to the checkpoint before it", "stop": "; training stops here",
            "fail": "; training stops as failed"}.get(action, "")


def thread_stacks() -> str:
    """Every thread's stack, as `traceback` prints them, the main thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    out = []
    for ident in sorted(frames, key=lambda i: (i != threading.main_thread().ident, names.get(i, ""))):
        out.append(f"Thread {names.get(ident, ident)!s} ({ident}):\n"
                   + "".join(traceback.format_stack(frames[ident])))
    return "\n".join(out)


class Watchdog:
    """A thread that calls `on_stall(seconds)` once when `progress()` has not changed for `stall`
    seconds (and not again until it changes). `progress` is read from this thread: a cheap value the
    training thread updates anyway (the step counter, the batch index); `idle()` True (paused,
    finishing) holds the clock."""

    def __init__(self, stall: float, progress: Callable[[], Any], on_stall: Callable[[float], None],
                 idle: Callable[[], bool] = lambda: False) -> None:
        self.stall = stall
        self.progress, self.on_stall, self.idle = progress, on_stall, idle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tuitrain-watchdog", daemon=True)

    def start(self) -> "Watchdog":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        seen = self.progress()
        since = time.monotonic()
        fired = False
        poll = min(30.0, max(self.stall / 8, 0.05))  # a stall is seen within stall + stall/8
        while not self._stop.wait(poll):
            now = time.monotonic()
            current = self.progress()
            if current != seen or self.idle():
                seen, since, fired = current, now, False
                continue
            if not fired and now - since >= self.stall:
                fired = True
                try:
                    self.on_stall(now - since)
                except Exception:  # the watchdog never dies of its own report
                    traceback.print_exc()
