"""A schedule's length across a resume: the scheduler as this run built it says how long the schedule
is (OneCycleLR's total_steps, CosineAnnealingLR's T_max, a window's total_iters); a checkpoint says
only where it stands. torch's `load_state_dict` restores the length too, so a run resumed with more
epochs would keep the old one (OneCycleLR then fails: "Tried to step 301 times"). `keep_lengths`
puts the built lengths back after the load and moves the lr (and OneCycleLR's momentum) to the new
schedule's value at the step it stands at, as if the schedule had been that long from the start.

Must not import textual.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

LENGTHS = ("total_steps", "T_max", "total_iters")
#: what a class computes from its length when it is built, kept with it
DERIVED = {"total_steps": ("_schedule_phases",)}  # OneCycleLR's phase ends


class Stretch(NamedTuple):
    """One length that changed: `scheduler`'s class `kind`, its attribute `attr` from `old` to `new`."""

    scheduler: str
    kind: str
    attr: str
    old: int | float
    new: int | float
    at: int  # where the schedule stands (the scheduler's step or epoch count)


# a scheduler is read by duck typing (getattr with defaults): torch's classes, or any object with their
# attributes; hence `Any` for one


def parts(sched: Any) -> list[Any]:
    """`sched` and, for SequentialLR / ChainedScheduler, its windows (in order)."""
    inner = getattr(sched, "_schedulers", None)
    return [sched] if not inner else [sched, *(p for s in inner for p in parts(s))]


def lengths(sched: Any) -> list[dict[str, Any]]:
    """The length attributes of each of `parts(sched)`, with what is derived from them (copies)."""
    out = []
    for p in parts(sched):
        kept: dict[str, Any] = {}
        for attr in LENGTHS:
            value = getattr(p, attr, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                kept[attr] = value
                kept.update({d: copy.deepcopy(getattr(p, d)) for d in DERIVED.get(attr, ()) if hasattr(p, d)})
        out.append(kept)
    return out


def keep_lengths(name: str, sched: Any, built: list[dict[str, Any]]) -> list[Stretch]:
    """After `sched.load_state_dict(...)`: its lengths back to `built` (`lengths(sched)` before the load)
    where they differ; the lr then follows the new schedule from where it stands. A length shorter
    than the step the schedule stands at is left as loaded (the run ends there anyway)."""
    changed: list[Stretch] = []
    active = _active(sched)
    for p, kept in zip(parts(sched), built):
        moved = False
        for attr in LENGTHS:
            if attr not in kept or getattr(p, attr, None) == kept[attr]:
                continue
            if kept[attr] < getattr(p, "last_epoch", 0):
                continue
            changed.append(
                Stretch(
                    name, type(p).__name__, attr, getattr(p, attr), kept[attr], int(getattr(sched, "last_epoch", 0))
                )
            )
            setattr(p, attr, kept[attr])
            for d in DERIVED.get(attr, ()):
                if d in kept:
                    setattr(p, d, copy.deepcopy(kept[d]))
            moved = True
        if moved and p is active:
            reposition(p)
    return changed


def _active(sched: Any) -> Any:
    """The part whose lr the optimizer has now: a SequentialLR's current window, a plain scheduler
    itself; None for ChainedScheduler (its parts act together: their lr is left to their next step)."""
    if isinstance(sched, torch.optim.lr_scheduler.SequentialLR):
        inner = sched._schedulers
        return _active(inner[bisect.bisect_right(sched._milestones, sched.last_epoch)])
    if getattr(sched, "_schedulers", None):
        return None
    return sched


def reposition(sched: Any) -> None:
    """The optimizer's lr (and OneCycleLR's momentum) to the schedule's value at the step it stands at.
    A class with neither a closed form nor OneCycleLR's computed get_lr keeps its lr (its next step
    goes on from there)."""
    closed = getattr(sched, "_get_closed_form_lr", None)
    if closed is None and not isinstance(sched, torch.optim.lr_scheduler.OneCycleLR):
        return
    sched._get_lr_called_within_step = True  # torch's flag against its "use get_last_lr()" warning
    try:
        values = closed() if closed is not None else sched.get_lr()  # OneCycleLR: sets the momentum too
    finally:
        sched._get_lr_called_within_step = False
    for group, lr in zip(sched.optimizer.param_groups, values):
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
    sched._last_lr = [group["lr"] for group in sched.optimizer.param_groups]


def say(stretches: list[Stretch], interval: Mapping[str, str], why: str = "") -> str:
    """One line for the run's log: what was stretched, and `why` (the runner: "train.epochs changed 3 -> 5")."""
    items = []
    for s in stretches:
        unit = "epoch" if interval.get(s.scheduler) == "epoch" else "step"
        items.append(f"{s.kind}'s {s.attr} {s.old:g} -> {s.new:g} (the schedule is stretched from {unit} {s.at})")
    return f"{why or 'the schedule as built is not as long as the checkpoint says'}: {'; '.join(items)}"
