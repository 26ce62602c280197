"""The numbers of a sweep's parameters view (`P` on a sweep's dashboard): how each searched parameter is
laid out on an axis (`ParamAxis`: log, linear, or its choices evenly spaced) and each trial as a point
(`TrialPoint`: its values, status and best value of the sweep's metric).

How a key is searched is read from the sweep's config file (sweep.json "config"), its `[sweep.params]`
table: `log = true`, `choices`, `low`/`high` (the axis then spans the whole searched range). Where that
file is gone, or says nothing of a key, the trials' values decide: numbers all above zero that span
more than two decades are on a log axis, other numbers on a linear one, anything else is a choice.

Pure: no textual, no plotext. Like the rest of the dashboard, must not import the run layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tuitrain.dashboard.charts.plan import short
from tuitrain.dashboard.state.compare import flatten
from tuitrain.dashboard.state.sweep import column_heads
from tuitrain.sources.sweep_files import searched

#: values spanning more than this ratio (two decades), all above zero, go on a log axis when the config says nothing
LOG_RATIO = 100.0
#: the statuses drawn as finished well, as still going, and as cut short
DONE, GOING = ("completed",), ("running", "paused")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class ParamAxis:
    """One searched key as an axis: "log" (positions are log10 of the values), "linear", or "choice"
    (positions 0, 1, 2 ... in the order of `choices`)."""

    key: str
    kind: str
    choices: tuple = ()
    low: float | None = None  # the searched range, when the config says it
    high: float | None = None

    def position(self, value: Any) -> float | None:
        """Where a trial's value lies on this axis; None when it cannot be placed (missing, not a choice)."""
        if self.kind == "choice":
            for i, choice in enumerate(self.choices):
                if _same(choice, value):
                    return float(i)
            return None
        if not is_number(value) or (self.kind == "log" and value <= 0):
            return None
        return math.log10(value) if self.kind == "log" else float(value)

    def span(self, values: list[Any]) -> tuple[float, float]:
        """(lowest, highest) position the axis shows: the searched range and every value placed."""
        if self.kind == "choice":
            return 0.0, float(max(len(self.choices) - 1, 0))
        ends = [v for v in (self.low, self.high) if v is not None]
        placed = [p for p in (self.position(v) for v in [*ends, *values]) if p is not None]
        if not placed:
            return 0.0, 1.0
        return min(placed), max(placed)

    def labels(self) -> list[str]:
        """The choices as the axis writes them."""
        return [label_of(c) for c in self.choices]


@dataclass(frozen=True)
class TrialPoint:
    """One trial as the parameters view draws it."""

    name: str  # trial-0003
    number: int
    status: str  # running, completed, pruned ... (SweepState.status_of)
    value: float | None  # its best value of the sweep's metric, None before its first validation
    values: dict[str, Any]  # each searched key's value in its config
    best: bool = False


def label_of(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return short(value, 3)
    return str(value)


def _same(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
        return a == b or math.isclose(a, b, rel_tol=1e-9)
    return type(a) is type(b) and a == b


def param_axes(keys: list[str], points: list[TrialPoint], declared: dict[str, dict] | None = None) -> list[ParamAxis]:
    """An axis for each searched key: as `declared` ([sweep.params]) says, else as the values suggest."""
    declared = declared or {}
    axes = []
    for key in keys:
        values = [p.values[key] for p in points if key in p.values]
        spec = declared.get(key, {})
        choices = spec.get("choices")
        if isinstance(choices, list) and choices:
            extra = [v for v in values if not any(_same(c, v) for c in choices)]  # a value the config no longer lists
            axes.append(ParamAxis(key, "choice", tuple(choices) + tuple(_unique(extra))))
            continue
        low, high = spec.get("low"), spec.get("high")
        low, high = (low if is_number(low) else None), (high if is_number(high) else None)
        numbers = [v for v in values if is_number(v)]
        if (numbers and len(numbers) == len(values)) or (low is not None and not values):
            if "log" in spec:
                log = spec["log"] is True
            else:
                ends = numbers + [v for v in (low, high) if v is not None]
                log = bool(ends) and min(ends) > 0 and max(ends) / min(ends) > LOG_RATIO
            axes.append(ParamAxis(key, "log" if log else "linear", low=low, high=high))
        else:
            axes.append(ParamAxis(key, "choice", tuple(_unique(sorted(values, key=str)))))
    return axes


def _unique(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if not any(_same(o, v) for o in out):
            out.append(v)
    return out


def trial_points(state: Any) -> list[TrialPoint]:
    """Every trial of a `SweepState`, by number: its searched values, status and best value."""
    best = state.best_trial() if state.sweep.metric else None
    out = []
    for name in sorted(state.runs, key=lambda n: state.number[n]):
        flat = flatten(state.config_of(name))
        value = state.best_value(name)
        out.append(
            TrialPoint(
                name,
                state.number[name],
                state.status_of(name),
                value if value is not None and math.isfinite(value) else None,
                {k: flat[k] for k in state.sweep.params if k in flat},
                name == best,
            )
        )
    return out


def ticks_of(axis: ParamAxis | None, lo: float, hi: float) -> list[tuple[float, str]]:
    """(position 0..1 on the axis, label) of the ticks an axis from `lo` to `hi` writes: each choice;
    the ends, and the whole decades between on a log axis (the middle on a linear one) that keep clear of them."""
    norm = lambda p: 0.5 if hi == lo else (p - lo) / (hi - lo)  # noqa: E731
    if axis is not None and axis.kind == "choice":
        k = len(axis.choices)
        return [(i / (k - 1) if k > 1 else 0.5, label) for i, label in enumerate(axis.labels())]
    log = axis is not None and axis.kind == "log"
    value = (lambda p: label_of(10.0**p)) if log else (lambda p: label_of(float(p)))  # noqa: E731
    ticks = [(norm(lo), value(lo))] + ([(norm(hi), value(hi))] if hi != lo else [])
    inner = [float(e) for e in range(math.ceil(lo), math.floor(hi) + 1)] if log else [(lo + hi) / 2]
    for p in inner:
        if all(abs(norm(p) - t) >= 0.15 for t, _ in ticks):
            ticks.append((norm(p), value(p)))
    return sorted(ticks)


def parallel(axes: list[ParamAxis], points: list[TrialPoint], metric: str) -> tuple[list, dict[str, list[float]]]:
    """The parallel coordinates of the trials with a value: [(axis name, ticks)] (each parameter, then
    the metric), and each trial's positions on them, 0 (the axis's low end) to 1; a trial with a value
    one axis cannot place is left out."""
    with_value = [p for p in points if p.value is not None]
    spans = [a.span([p.values.get(a.key) for p in with_value]) for a in axes]
    values = [p.value for p in with_value]
    m_lo, m_hi = (min(values), max(values)) if values else (0.0, 1.0)
    heads = column_heads([a.key for a in axes])
    columns = [(head, ticks_of(a, lo, hi)) for head, a, (lo, hi) in zip(heads, axes, spans)]
    columns.append((metric.rpartition("/")[2] or "value", ticks_of(None, m_lo, m_hi)))
    lines = {}
    for p in with_value:
        where = [a.position(p.values.get(a.key)) for a in axes]
        if any(w is None for w in where):
            continue
        ys = [0.5 if hi == lo else (w - lo) / (hi - lo) for w, (lo, hi) in zip(where, spans)]
        ys.append(0.5 if m_hi == m_lo else (p.value - m_lo) / (m_hi - m_lo))
        lines[p.name] = ys
    return columns, lines


__all__ = [
    "DONE",
    "GOING",
    "LOG_RATIO",
    "ParamAxis",
    "TrialPoint",
    "is_number",
    "label_of",
    "param_axes",
    "parallel",
    "searched",
    "ticks_of",
    "trial_points",
]
