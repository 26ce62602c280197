"""The run watches itself: the `[watch]` table (`Watch`), the rules of one run judging the values the
loop hands in (`Health`), the `[alerts]` table (`Alerts`) and the stall watchdog.

The rules themselves are objects, one class a rule, in tuitrain/core/rules/ (rules/base.py says what a
rule is): a non-finite loss or gradient, a loss spike, a grad-norm spike, a stall, starved data, and
whatever rule is added there. Each rule's action: "off", "alert", "skip" (the step's update not
applied), "rollback" (back to the newest sound checkpoint before the trouble), "stop" (graceful, with a
checkpoint), "fail" (exit 1) or, for a stall, "abort". `Health` applies them for one run; the Learner's
`HealthGuard` (learner_health.py) or a `Monitor` carries the actions out, and every verdict leaves as
an `AlertRaised` event (core/verdicts.py).

Where the values come from, so that no rule adds a host-device sync to a step that logs nothing:
- the loss of every step when it is on the host anyway (a CPU run reads it back for free), else the
  loss of the steps that log (read there before the optimizer step);
- the gradients' total norm on the steps that log (computed there for `grad_norm` already), or every
  step where the norm is computed anyway (clipping on the CPU);
- the values of a logged step (`data_wait`, the loss's mean), after its update;
- the stall from a watchdog thread that reads the step counter, never from the training thread.

Must not import textual, nor torch (the Learner hands plain floats in).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .rules import RULES, Rule
from .rules.base import Key, Spike, Verdict

#: Spike is the spike rules' statistics (rules/base.py), imported from here by tests/core/test_health_rules.py
#: and benchmarks/health_replay.py
__all__ = ["Alerts", "Health", "Spike", "Watch", "Watchdog", "thread_stacks", "watch_keys"]

_isfinite = math.isfinite


def _lr_factor(v: float) -> str | None:
    return None if 0 < v <= 1 else f"expected a factor above 0 and at most 1, got {v!r}"


#: the rollback action's own keys (every rule that rolls back shares them)
ACTION_KEYS = (Key.number("rollback_lr_factor", 1.0, _lr_factor), Key.whole("max_rollbacks", 3))


def watch_keys() -> dict[str, Key]:
    """Every key of the `[watch]` table, in the table's order: each rule's keys in the rules' order (a
    key rules share comes after the last of them), then the actions' own."""
    keys: dict[str, Key] = {}
    for rule in RULES.values():
        for key in rule.keys:
            keys.pop(key.name, None)
            keys[key.name] = key
    keys.update((key.name, key) for key in ACTION_KEYS)
    return keys


class Watch:
    """The `[watch]` table (SPEC "Health"): every rule's keys as attributes (`watch_keys()`);
    `Watch.of(dict)` checks it, `Watch(key=value, ...)` takes the values as they are."""

    def __init__(self, **values: Any) -> None:
        keys = watch_keys()
        for key in keys.values():
            setattr(self, key.name, key.default)
        for name, v in values.items():
            if name not in keys:
                raise TypeError(f"Watch() got an unexpected keyword argument {name!r}")
            setattr(self, name, v)

    def __getattr__(self, name: str) -> Any:  # a rule's keys are known once the rules are
        raise AttributeError(f"Watch has no key {name!r}")

    def __eq__(self, other: object) -> bool:
        return type(other) is Watch and vars(self) == vars(other)

    def __repr__(self) -> str:
        return "Watch(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"

    @classmethod
    def of(cls, value: Watch | dict[str, Any] | None, where: str = "watch") -> Watch:
        """A Watch from a dict of the table's keys; ValueError naming `where.key` when one is wrong."""
        if isinstance(value, Watch):
            return value
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a table of rules, not {type(value).__name__}")
        keys = watch_keys()
        out = cls()
        for name, v in value.items():
            if name not in keys:
                raise ValueError(f"{where}.{name}: unknown key (known: {', '.join(sorted(keys))})")
            try:
                v = keys[name].read(v)
            except ValueError as e:
                raise ValueError(f"{where}.{name}: {e}") from None
            setattr(out, name, v)
        return out


@dataclass
class Alerts:
    """The `[alerts]` table: where alerts go besides the run's events (SPEC "Health")."""

    webhook: str = ""
    command: str = ""
    bell: bool = True

    @classmethod
    def of(
        cls, value: Alerts | dict[str, Any] | None, where: str = "alerts", environ: Mapping[str, str] | None = None
    ) -> Alerts:
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


class Health:
    """The rules of one run (`rules`, by name: every registered rule), judging the values the loop hands
    in. `loss(v, step)` and `grads(norm, step)` return a Verdict when a rule finds something (None:
    all well), `logged(values, step, each_step)` the verdicts on a logged step's values; the caller
    carries the action out and emits the alert (core/verdicts.py). A non-finite value goes to the rules
    that read "nonfinite" alone: the others see finite values. `clock`: seconds, for the once-a-minute
    limit of alert-only rules."""

    def __init__(self, watch: Watch, clock: Callable[[], float] = time.monotonic) -> None:
        self.watch = watch
        self.clock = clock
        self.rules: dict[str, Rule] = {name: rule(watch, clock) for name, rule in RULES.items()}
        on = [r for r in self.rules.values() if r.on]
        self._loss = tuple(r.judge_loss for r in on if "loss" in r.reads)
        self._grads = tuple(r.judge_grad_norm for r in on if "grad_norm" in r.reads)
        self._nonfinite = tuple(r.judge_nonfinite for r in on if "nonfinite" in r.reads)
        self._logged = tuple(r.judge_logged for r in on if "logged" in r.reads)
        self._on = on
        #: a rule wants the gradients' norm, or the loss of the steps that log where it is not on the host
        self.judges_grads = any(r.needs("grad_norm") for r in on)
        self.judges_logged_loss = any(r.needs("loss") for r in on)
        self.rollbacks = 0

    def __getattr__(self, name: str) -> Any:
        """A rule by its name (`health.loss_spike`)."""
        rules = self.__dict__.get("rules")
        if rules is not None and name in rules:
            return rules[name]
        raise AttributeError(f"Health has no rule {name!r}")

    def reading(self, channel: str) -> list[Rule]:
        """The rules on in this run that read `channel` (rules/base.py `CHANNELS`)."""
        return [r for r in self._on if channel in r.reads]

    @property
    def spikes(self) -> dict[str, int]:
        """Values found wrong, by rule (alerted, held back or acted on): what a corpus counts."""
        return {name: r.found for name, r in self.rules.items()}

    def loss(self, v: float, step: int) -> Verdict | None:
        if not _isfinite(v):
            return self.nonfinite("loss", v, step)
        for judge in self._loss:
            verdict = judge(v, step)
            if verdict is not None:
                return verdict
        return None

    def grads(self, norm: float, step: int) -> Verdict | None:
        if not _isfinite(norm):
            return self.nonfinite("gradients", norm, step)
        for judge in self._grads:
            verdict = judge(norm, step)
            if verdict is not None:
                return verdict
        return None

    def nonfinite(self, what: str, v: float, step: int) -> Verdict | None:
        for judge in self._nonfinite:
            verdict = judge(what, v, step)
            if verdict is not None:
                return verdict
        return None

    def logged(self, values: dict[str, Any], step: int, each_step: bool) -> list[Verdict]:
        """The verdicts on a logged step's `values` (after its update); `each_step`: every step's loss
        was judged as it came (`loss`)."""
        found = [judge(values, step, each_step) for judge in self._logged]
        return [v for v in found if v is not None]

    def values(self, metrics: dict[str, Any], step: int) -> list[Verdict]:
        """Every rule on what a loop of one's own logs at `step` (`Monitor`): its "loss" and "grad_norm"
        judged as they come, then the logged values."""
        found = []
        if "loss" in metrics:
            found.append(self.loss(metrics["loss"], step))
        if "grad_norm" in metrics:
            found.append(self.grads(metrics["grad_norm"], step))
        return [v for v in found if v is not None] + self.logged(metrics, step, True)

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {r.state_key: r.state_dict() for r in self.rules.values() if r.state_key}
        return {**out, "rollbacks": self.rollbacks}

    def load_state_dict(self, d: dict[str, Any] | None) -> None:
        if not d:
            return
        for r in self.rules.values():
            if r.state_key and d.get(r.state_key):
                r.load_state_dict(d[r.state_key])
        self.rollbacks = int(d.get("rollbacks", 0))


def thread_stacks() -> str:
    """Every thread's stack, as `traceback` prints them, the main thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    frames = sys._current_frames()
    out = []
    for ident in sorted(frames, key=lambda i: (i != threading.main_thread().ident, names.get(i, ""))):
        out.append(f"Thread {names.get(ident, ident)!s} ({ident}):\n" + "".join(traceback.format_stack(frames[ident])))
    return "\n".join(out)


class Watchdog:
    """A thread that calls `on_stall(seconds)` once when `progress()` has not changed for `stall`
    seconds (and not again until it changes). `progress` is read from this thread: a cheap value the
    training thread updates anyway (the step counter, the batch index); `idle()` True (paused,
    finishing) holds the clock."""

    def __init__(
        self,
        stall: float,
        progress: Callable[[], Any],
        on_stall: Callable[[float], None],
        idle: Callable[[], bool] = lambda: False,
    ) -> None:
        self.stall = stall
        self.progress, self.on_stall, self.idle = progress, on_stall, idle
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tuitrain-watchdog", daemon=True)

    def start(self) -> Watchdog:
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
