"""Checkpoint retention policies: small pure classes that decide which checkpoints to keep.

They never touch files; `Checkpointer` applies their decision. Compose them with `KeepAny`; `Split`
keeps the checkpoints a user asked for (`Entry.requested`) apart from the run's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol
from collections.abc import Sequence


@dataclass(frozen=True)
class Entry:
    """One complete checkpoint as listed in checkpoint/index.json."""

    file: str
    epoch: int
    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    time: float = 0.0
    bytes: int = 0
    best: bool = False
    reason: str = ""
    sha256: str = ""  # of the file as written; "" for a sharded directory or an older checkpoint
    #: who asked for it ("dashboard", "command", "stop", ...); "": one of the run's own (periodic, final)
    requested: str = ""
    #: a library's own checkpoint (a Hugging Face `checkpoint-N` folder): listed, never deleted by tuitrain
    library: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "file": self.file,
            "epoch": self.epoch,
            "step": self.step,
            "metrics": self.metrics,
            "time": self.time,
            "bytes": self.bytes,
            "best": self.best,
            "reason": self.reason,
        }
        if self.sha256:
            d["sha256"] = self.sha256
        if self.requested:
            d["requested"] = True
            d["requested_by"] = self.requested
        if self.library:
            d["library"] = True
        return d


class Policy(Protocol):
    def keep(self, entries: Sequence[Entry]) -> set[str]: ...


def _order(e: Entry) -> tuple[int, int, float]:
    return (e.step, e.epoch, e.time)


@dataclass(frozen=True)
class KeepLast:
    n: int

    def keep(self, entries: Sequence[Entry]) -> set[str]:
        if self.n <= 0:
            return set()
        return {e.file for e in sorted(entries, key=_order)[-self.n :]}


def monitored(e: Entry, monitor: str) -> float | None:
    v = e.metrics.get(monitor)
    if v is None or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


@dataclass(frozen=True)
class KeepBest:
    k: int
    monitor: str
    mode: str = "min"

    def ranked(self, entries: Sequence[Entry]) -> list[Entry]:
        scored = [(value, e) for e in entries if (value := monitored(e, self.monitor)) is not None]
        sign = 1.0 if self.mode == "min" else -1.0
        # ties go to the earlier checkpoint: the first to reach a value is the best
        return [e for _, e in sorted(scored, key=lambda pair: (sign * pair[0], _order(pair[1])))]

    def keep(self, entries: Sequence[Entry]) -> set[str]:
        if self.k <= 0:
            return set()
        return {e.file for e in self.ranked(entries)[: self.k]}


@dataclass(frozen=True)
class KeepAny:
    """Keeps what any of its policies keeps."""

    policies: tuple[Policy, ...]

    def keep(self, entries: Sequence[Entry]) -> set[str]:
        kept: set[str] = set()
        for p in self.policies:
            kept |= p.keep(entries)
        return kept


@dataclass(frozen=True)
class KeepRequested:
    """The checkpoints asked for: the newest `n` of them, all of them with `n` = 0."""

    n: int = 0

    def keep(self, entries: Sequence[Entry]) -> set[str]:
        asked = sorted((e for e in entries if e.requested), key=_order)
        return {e.file for e in (asked[-self.n :] if self.n > 0 else asked)}


@dataclass(frozen=True)
class Split:
    """`own` decides over the run's own checkpoints and `requested` over those asked for: neither
    pushes the other's out (keep_last counts only the run's own)."""

    own: Policy
    requested: Policy = KeepRequested()

    def keep(self, entries: Sequence[Entry]) -> set[str]:
        return self.own.keep([e for e in entries if not e.requested]) | self.requested.keep(
            [e for e in entries if e.requested]
        )


def decide(policy: Policy, entries: Sequence[Entry]) -> tuple[list[Entry], list[Entry]]:
    """(keep, delete). The newest checkpoint is always kept: a resume needs it."""
    kept = policy.keep(entries)
    if entries:
        kept.add(max(entries, key=_order).file)
    keep = [e for e in entries if e.file in kept]
    delete = [e for e in entries if e.file not in kept]
    return keep, delete


def best_entry(entries: Sequence[Entry], monitor: str, mode: str) -> Entry | None:
    ranked = KeepBest(1, monitor, mode).ranked(entries)
    return ranked[0] if ranked else None


def thin(steps: list[int], keep: int) -> list[int]:
    """The steps to drop from the sorted `steps` so that `keep` remain, spread as evenly as they can
    be: the first and the newest always stay; each drop is the step whose neighbours are closest."""
    steps = list(steps)
    dropped = []
    while len(steps) > max(keep, 2):
        best, gap = 1, None
        for i in range(1, len(steps) - 1):
            g = steps[i + 1] - steps[i - 1]
            if gap is None or g < gap:
                best, gap = i, g
        dropped.append(steps.pop(best))
    return dropped
