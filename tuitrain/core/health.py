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

A spike is a value far above the recent values in two ways at once (`Spike`): in their spread and in
proportion to their level; the defaults were chosen on a corpus of healthy runs and injected faults
(benchmarks/bench_health_corpus.py), and the rule starts once half the window is filled. A value acted
on with skip, rollback or stop stays out of the statistics (the run goes on as if it had not come); an
alerted one goes in (the run goes on with it, and a loss that really moved to a new level stops
alerting). Consecutive findings are one episode (`Speaker`): one alert, until a value falls back under
the limit; an alert-only rule says at most one alert a minute, and its next alert counts the episodes
held back in between (a burst is one alert, not a storm at a webhook). Rules that act (skip, rollback,
stop) act on every spike, each alert carrying its episode's number.

Must not import textual, nor torch (the Learner hands plain floats in).
"""

from __future__ import annotations

import bisect
import math
import os
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, fields
from typing import Any
from collections.abc import Callable

from .control import parse_duration

_insort, _bisect_left = bisect.insort, bisect.bisect_left

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
    spike_ratio: float = 5.0  # and above this many times the largest of the window (for a positive level)
    spike_window: int = 128
    stall: float = 600.0  # seconds; 0: off (the table takes "10m", "30s", a number of seconds or "")
    stall_action: str = "alert"
    data_wait: float = 0.5  # a share of step time; 0: off
    rollback_lr_factor: float = 1.0
    max_rollbacks: int = 3

    @classmethod
    def of(cls, value: Watch | dict | None, where: str = "watch") -> Watch:
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
                if key == "spike_ratio" and v < 1:
                    raise ValueError(f"{where}.spike_ratio: 1 or more (1: above the largest recent value), not {v!r}")
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
        raise ValueError(f'{where}: a duration ("10m", "30s", seconds) or "", not {v!r}')
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
    def of(cls, value: Alerts | dict | None, where: str = "alerts", environ: dict | None = None) -> Alerts:
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
    """A value far above the recent values, in two ways at once (SPEC "Health"): above their median +
    `sigmas` x their spread, and above `ratio` times the largest of them (for a positive level; in
    general the largest + (`ratio` - 1) x its size), over the last `window` values.

    Why this rule (benchmarks/bench_health_corpus.py, RESULTS.md): minibatch losses are heavy-tailed. A
    healthy classifier near convergence has batches at 800 times the median loss (one misclassified
    item in a batch of 16), so no rule on the median or a spread alone tells them from a fault; but no
    healthy value of the corpus came to 3.4 times the largest of the 128 before it, while every injected
    fault came to 5.8 times it or more (the gradients' norm) and 50 times or more (the loss). The spread
    is read from the window's upper side, (90th percentile - median) / 1.2816 (a normal's sd from that
    quantile), robust to the tail it judges. The window is also kept sorted (bisect: a push moves at most
    `window` pointers twice), so the limit is three lookups.

    `limit` is the threshold as of the last push: judging a value is one comparison."""

    __slots__ = ("window", "sigmas", "ratio", "values", "ordered", "limit", "least", "speaker")

    def __init__(self, window: int, sigmas: float, ratio: float = 5.0) -> None:
        self.window, self.sigmas, self.ratio = window, sigmas, ratio
        self.values: deque[float] = deque()  # in arrival order
        self.ordered: list[float] = []  # the same, sorted
        self.limit: float | None = None  # the next value's threshold (None while warming up)
        self.least = max(2, window // 2)  # values before the rule starts
        self.speaker = Speaker()

    def judge(self, v: float) -> bool:
        """Whether `v` is a spike (not pushed: call `push` when the run keeps it)."""
        limit = self.limit
        return limit is not None and v > limit

    def push(self, v: float) -> None:
        values, ordered = self.values, self.ordered
        values.append(v)
        _insort(ordered, v)
        n = len(values)
        if n > self.window:
            del ordered[_bisect_left(ordered, values.popleft())]
            n -= 1
        if n < self.least:
            self.limit = None
            return
        half = n >> 1
        med = ordered[half] if n & 1 else 0.5 * (ordered[half - 1] + ordered[half])
        spread = med + (ordered[(n * 9) // 10] - med) * (self.sigmas / 1.2816)
        top = ordered[-1]
        level = top + (self.ratio - 1.0) * (top if top > 0.0 else -top) + 1e-12
        self.limit = spread if spread > level else level

    def median(self) -> float:
        """The window's median, for the alert's text (NaN while empty)."""
        o, n = self.ordered, len(self.ordered)
        if not n:
            return math.nan
        return o[n // 2] if n % 2 else 0.5 * (o[n // 2 - 1] + o[n // 2])

    def state_dict(self) -> dict:
        return {"values": list(self.values), **self.speaker.state_dict()}

    def load_state_dict(self, d: dict) -> None:
        self.values.clear()
        self.ordered.clear()
        self.limit = None
        for v in d.get("values", []):
            self.push(float(v))
        self.speaker.load_state_dict(d)


class Speaker:
    """When a rule speaks: consecutive findings are one episode; an alert-only rule raises at most one
    alert a minute (`every` seconds), and its next alert counts the episodes held back in between."""

    __slots__ = ("in_episode", "episode", "held", "last")

    every = 60.0

    def __init__(self) -> None:
        self.in_episode = False
        self.episode = 0  # episodes so far (the alert's `episode`)
        self.held = 0  # episodes not alerted since the last alert
        self.last: float | None = None  # the clock at the last alert (not kept across processes)

    def finding(self, alert_only: bool, now: float) -> bool:
        """A finding (a spike, a non-finite value): whether to say it (an acting rule always does)."""
        new = not self.in_episode
        self.in_episode = True
        if new:
            self.episode += 1
        if not alert_only:
            return True
        if not new:
            return False
        if self.last is not None and now - self.last < self.every:
            self.held += 1
            return False
        self.last = now
        return True

    def said(self) -> int:
        """The episodes held back since the previous alert (reset: the alert says them)."""
        held, self.held = self.held, 0
        return held

    def state_dict(self) -> dict:
        return {"in_episode": self.in_episode, "episode": self.episode, "held": self.held}

    def load_state_dict(self, d: dict) -> None:
        self.in_episode = bool(d.get("in_episode", False))
        self.episode = int(d.get("episode", 0))
        self.held = int(d.get("held", 0))
        self.last = None


_isfinite = math.isfinite


@dataclass(frozen=True)
class Verdict:
    """What a rule found and what the run does about it."""

    rule: str
    action: str  # "alert", "skip", "rollback", "stop", "fail"
    value: float
    title: str
    text: str
    level: str = "warning"
    episode: int = 0  # the rule's episode (consecutive findings are one); 0: not counted by episode
    held: int = 0  # episodes of this rule not alerted since its previous alert


def _fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else str(v)


class Health:
    """The rules of one run, judging the values the loop hands in. `loss(v, step)` and `grads(norm,
    step)` return a Verdict when a rule acts (None: all well); the caller carries the action out and
    emits the alert (`alert_event`). `clock`: seconds, for the once-a-minute limit of alert-only rules."""

    def __init__(self, watch: Watch, clock: Callable[[], float] = time.monotonic) -> None:
        self.watch = w = watch
        self.clock = clock
        self.loss_spike = Spike(w.spike_window, w.spike_sigmas, w.spike_ratio) if w.loss_spike != "off" else None
        self.grad_spike = Spike(w.spike_window, w.spike_sigmas, w.spike_ratio) if w.grad_spike != "off" else None
        self.judges_grads = self.grad_spike is not None or w.nonfinite != "alert"
        self.rollbacks = 0
        self.nonfinite_speaker = Speaker()
        self.data_wait_speaker = Speaker()
        #: values found above their limit, by rule (alerted, held back or acted on): what a corpus counts
        self.spikes = {"loss_spike": 0, "grad_spike": 0}

    def loss(self, v: float, step: int) -> Verdict | None:
        if not _isfinite(v):
            return self._nonfinite("loss", v, step)
        self.nonfinite_speaker.in_episode = False
        rule = self.loss_spike
        if rule is None:
            return None
        limit = rule.limit
        if limit is None or not v > limit:  # all well (every step but a spike's): `_spike`'s first branch
            rule.speaker.in_episode = False
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
            rule.speaker.in_episode = False
            rule.push(norm)
            return None
        return self._spike(
            rule, "grad_spike", self.watch.grad_spike, norm, step, "grad-norm spike", "grad_norm", "logged steps"
        )

    def _spike(
        self, rule: Spike, name: str, action: str, v: float, step: int, title: str, what: str, over: str
    ) -> Verdict | None:
        """A spike rule's verdict on finite `v` above its limit (`loss` and `grads` keep the other values
        themselves); see the module docstring: episodes, once a minute."""
        self.spikes[name] += 1
        limit = rule.limit
        med = rule.median()
        top, n = rule.ordered[-1], len(rule.values)  # as judged: before an alerted value goes in
        alert_only = action == "alert"
        if alert_only:
            rule.push(v)  # an alerted value stays: the run goes on with it
        speaker = rule.speaker
        if not speaker.finding(alert_only, self.clock()):
            return None
        held = speaker.said() if alert_only else 0
        times = f"{_fmt(v / top)} times" if top > 0 else "far above"
        text = (
            f"{what} {_fmt(v)} at step {step} is {times} the largest of the last {n} {over} "
            f"({_fmt(top)}; their median {_fmt(med)}, limit {_fmt(limit)})"
        )
        if held:
            text += f"; {held} more spike(s) since the previous alert"
        return Verdict(
            name, action, v, f"{title} at step {step}", text + doing(action), episode=speaker.episode, held=held
        )

    def _nonfinite(self, what: str, v: float, step: int) -> Verdict | None:
        action = self.watch.nonfinite
        speaker = self.nonfinite_speaker
        if not speaker.finding(action == "alert", self.clock()):
            return None
        held = speaker.said() if action == "alert" else 0
        text = (
            f"the {what} {'is' if what == 'loss' else 'have a norm of'} {v} at step {step}"
            + (f"; {held} more since the previous alert" if held else "")
            + doing(action)
        )
        return Verdict(
            "nonfinite",
            action,
            v,
            f"non-finite {what} at step {step}",
            text,
            level="error" if action in ("fail", "stop") else "warning",
            episode=speaker.episode,
            held=held,
        )

    def data_wait(self, share: float, step: int) -> Verdict | None:
        """`data_wait` as logged: an alert when more than the rule's share of step time waits for data
        (once an episode, until it falls back under the share; at most once a minute)."""
        limit = self.watch.data_wait
        if not limit or not math.isfinite(share):
            return None
        speaker = self.data_wait_speaker
        if share <= limit:
            speaker.in_episode = False
            return None
        if not speaker.finding(True, self.clock()):
            return None
        speaker.said()
        return Verdict(
            "data_wait",
            "alert",
            share,
            f"training waits for data at step {step}",
            f"{share:.0%} of step time waits for the next batch (more than {limit:.0%}): the data "
            "loader is too slow (more num_workers, faster decoding, data nearer the machine)",
            episode=speaker.episode,
        )

    def state_dict(self) -> dict:
        return {
            "loss": self.loss_spike.state_dict() if self.loss_spike else None,
            "grads": self.grad_spike.state_dict() if self.grad_spike else None,
            "rollbacks": self.rollbacks,
        }

    def load_state_dict(self, d: dict | None) -> None:
        if not d:
            return
        if self.loss_spike is not None and d.get("loss"):
            self.loss_spike.load_state_dict(d["loss"])
        if self.grad_spike is not None and d.get("grads"):
            self.grad_spike.load_state_dict(d["grads"])
        self.rollbacks = int(d.get("rollbacks", 0))


def doing(action: str) -> str:
    """What the run does about a finding, as the alert's text ends."""
    return {
        "alert": "",
        "skip": "; the step is skipped (its update not applied)",
        "rollback": "; rolling back to the checkpoint before it",
        "stop": "; training stops here",
        "fail": "; training stops as failed",
    }.get(action, "")


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
