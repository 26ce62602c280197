"""What a `[watch]` rule is made of: `Rule` (one class a rule: its name, its keys, its actions, what it
reads and how it judges), `Key` (one key of the table: its default and its check), `Verdict` (what a
rule found and the action it asks for), and the statistics rules share: `Spike` (a value far above the
recent ones) and `Speaker` (when a rule speaks).

A subclass of `Rule` that sets `name` is registered in `RULES` as its class is made; the package
imports every module of tuitrain/core/rules/, so a new rule is one file there (and its test). Rules
are pure decisions: values in, a `Verdict` out; the Learner's `HealthGuard` (learner_health.py) and a
`Monitor` carry the actions out. Must not import torch or textual.
"""

from __future__ import annotations

import bisect
import difflib
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..control import parse_duration

_insort, _bisect_left = bisect.insort, bisect.bisect_left

#: every rule, by name, in the order they judge a value (`Rule.order`), filled as their classes are made
RULES: dict[str, type[Rule]] = {}

#: the values a rule may read (`Rule.reads`): "loss" (a step's loss, finite), "grad_norm" (the
#: gradients' total norm, finite), "nonfinite" (a non-finite loss or norm), "logged" (the values of a
#: logged step, after its update), "stall" (the seconds no step completed, from a watchdog thread)
CHANNELS = ("loss", "grad_norm", "nonfinite", "logged", "stall")


@dataclass(frozen=True)
class Key:
    """One key of the `[watch]` table. `read(value)` is the value as the rules read it, or ValueError
    with what is wrong; `kind` and `written` are how a config file writes it (`stall = "10m"`)."""

    name: str
    default: Any
    read: Callable[[Any], Any]
    kind: type = float
    written: Any = None  # the config file's default, when it is written otherwise than `default`

    @classmethod
    def choice(cls, name: str, default: str, choices: tuple[str, ...]) -> Key:
        def read(v: Any) -> str:
            if v not in choices:
                close = difflib.get_close_matches(str(v), choices, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"expected one of {', '.join(map(repr, choices))}, got {v!r}{hint}")
            return str(v)  # one of `choices`

        return cls(name, default, read, str)

    @classmethod
    def whole(cls, name: str, default: int, least: int = 0) -> Key:
        def read(v: Any) -> int:
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"expected a whole number of {least} or more, got {v!r}")
            return v

        return cls(name, default, read, int)

    @classmethod
    def number(cls, name: str, default: float, check: Callable[[float], str | None] = lambda v: None) -> Key:
        """A finite number of 0 or more; `check(v)`: what else is wrong with it (None: nothing)."""

        def read(v: Any) -> float:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"expected a number of 0 or more, got {v!r}")
            wrong = check(v)
            if wrong:
                raise ValueError(wrong)
            return float(v)

        return cls(name, default, read, float)

    @classmethod
    def duration(cls, name: str, default: float) -> Key:
        """Seconds: the table takes "10m", "30s", a number of seconds, or "" (0: off)."""
        return cls(name, default, seconds, str, f"{default / 60:g}m")


def seconds(v: Any) -> float:
    if v in ("", None, 0, "0", "off"):
        return 0.0
    if isinstance(v, bool):
        raise ValueError(f'expected a duration ("10m", "30s", seconds) or "", got {v!r}')
    if isinstance(v, (int, float)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"expected a duration of 0 or more seconds, got {v!r}")
        return float(v)
    return parse_duration(str(v))


@dataclass(frozen=True)
class Verdict:
    """What a rule found and what the run does about it."""

    rule: str
    action: str  # "alert", "skip", "rollback", "stop", "fail", "abort"
    value: float
    title: str
    text: str
    level: str = "warning"
    episode: int = 0  # the rule's episode (consecutive findings are one); 0: not counted by episode
    held: int = 0  # episodes of this rule not alerted since its previous alert


def doing(action: str) -> str:
    """What the run does about a finding, as the alert's text ends."""
    return {
        "alert": "",
        "skip": "; the step is skipped (its update not applied)",
        "rollback": "; rolling back to the checkpoint before it",
        "stop": "; training stops here",
        "fail": "; training stops as failed",
    }.get(action, "")


def fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else str(v)


class Rule:
    """One `[watch]` rule. A subclass sets `name` (the `AlertRaised.rule`, and its key in `RULES`),
    `keys` (its keys of the table; `action_key` names the one that holds its action, "" for a rule
    that only alerts), `reads` (the channels it judges, `CHANNELS`) and the `judge_<channel>` methods
    for them; `order` places it among the rules that read the same values (the first verdict wins).
    Keys several rules share (the spike rules' window) are declared by each, alike."""

    name: ClassVar[str] = ""
    keys: ClassVar[tuple[Key, ...]] = ()
    action_key: ClassVar[str] = ""
    reads: ClassVar[tuple[str, ...]] = ()
    order: ClassVar[int] = 100
    #: its statistics' key in a checkpoint's "health" ("": it keeps none across a resume)
    state_key: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and cls.name:
            RULES[cls.name] = cls
            ordered = sorted(RULES.values(), key=lambda r: (r.order, r.name))
            RULES.clear()
            RULES.update((r.name, r) for r in ordered)

    def __init__(self, watch: Any, clock: Callable[[], float]) -> None:
        self.watch, self.clock = watch, clock
        self.action: str = getattr(watch, self.action_key) if self.action_key else "alert"
        self.speaker = Speaker()
        self.found = 0  # values found wrong (alerted, held back or acted on): what a corpus counts

    @property
    def on(self) -> bool:
        """Whether the rule judges anything in this run."""
        return self.action != "off"

    @property
    def patience(self) -> float:
        """A rule that reads "stall": the seconds without a completed step before it judges."""
        return 0.0

    def needs(self, channel: str) -> bool:
        """Whether the loop should read `channel`'s values for this rule where that costs something (a
        loss or a norm read back from an accelerator)."""
        return self.on and channel in self.reads

    def state_dict(self) -> Any:
        return None

    def load_state_dict(self, d: Any) -> None:
        pass

    # the channels (`reads`): a Verdict, or None when all is well or the rule holds its tongue
    def judge_loss(self, v: float, step: int) -> Verdict | None:
        return None

    def judge_grad_norm(self, v: float, step: int) -> Verdict | None:
        return None

    def judge_nonfinite(self, what: str, v: float, step: int) -> Verdict | None:
        return None

    def judge_logged(self, values: dict[str, Any], step: int, each_step: bool) -> Verdict | None:
        """`values`: the logged step's; `each_step`: every step's loss was judged as it came."""
        return None

    def judge_stall(self, seconds: float, where: str) -> Verdict | None:
        return None


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

    def state_dict(self) -> dict[str, Any]:
        return {"in_episode": self.in_episode, "episode": self.episode, "held": self.held}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.in_episode = bool(d.get("in_episode", False))
        self.episode = int(d.get("episode", 0))
        self.held = int(d.get("held", 0))
        self.last = None


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

    def state_dict(self) -> dict[str, Any]:
        return {"values": list(self.values), **self.speaker.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.values.clear()
        self.ordered.clear()
        self.limit = None
        for v in d.get("values", []):
            self.push(float(v))
        self.speaker.load_state_dict(d)
