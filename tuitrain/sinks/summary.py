"""Number, duration and summary-table formatting shared by the console, the experiment log and
the dashboard, so that all three show a run's values the same way.

Pure string functions: must not import torch or textual.
"""

from __future__ import annotations

import math
from typing import Any

HEADERS = ("Split", "Metric", "Min.", "Epoch", "Max.", "Epoch")
_SPLIT_ORDER = {"train": 0, "valid": 1}


def format_metric(name: str, value: Any) -> str:
    """`format_value`, except for byte counts (`max_memory`): 327.5 MB, not 3.275e+08."""
    if (
        name.endswith("max_memory")
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
    ):
        return format_bytes(int(value))
    if (
        name.rpartition("/")[2] == "throughput"
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) < 1e9
    ):
        return f"{value:.1f}"  # items a second: 289.8, not 289.8052
    return format_value(value)


def format_value(value: Any) -> str:
    """A metric value for people: 4 decimals in the usual range (1 from 1000 up: a throughput of
    27996.7, not 27996.7359), scientific outside it."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, float):
        try:
            value = float(value)
        except (TypeError, ValueError):
            return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and not (1e-3 <= abs(value) < 1e5):
        return f"{value:.3e}"
    return f"{value:.1f}" if abs(value) >= 1000 else f"{value:.4f}"


def format_duration(seconds: float | None) -> str:
    """H:MM:SS, hours unbounded; '-' when unknown."""
    if seconds is None or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "-"
    total = int(round(max(seconds, 0.0)))
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def format_bytes(n: int | float) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"  # unreachable; keeps type checkers calm


def split_key(key: str) -> tuple[str, str]:
    """'train/loss' -> ('train', 'loss'); a key without a split has split ''."""
    split, sep, metric = key.partition("/")
    return (split, metric) if sep else ("", key)


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """Table rows, train first then valid then other splits; metric order as logged."""
    keyed = []
    for i, (key, entry) in enumerate(summary.items()):
        split, metric = split_key(str(key))
        entry = entry if isinstance(entry, dict) else {}
        keyed.append(
            (
                (_SPLIT_ORDER.get(split, 2), split if split not in _SPLIT_ORDER else "", i),
                (
                    split or "-",
                    metric,
                    _cell(entry.get("min"), metric),
                    _cell(entry.get("min_epoch")),
                    _cell(entry.get("max"), metric),
                    _cell(entry.get("max_epoch")),
                ),
            )
        )
    keyed.sort(key=lambda kv: kv[0])
    return [row for _, row in keyed]


def _cell(value: Any, metric: str = "") -> str:
    return "-" if value is None else format_metric(metric, value)


def summary_columns(summary: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]], list[int]] | None:
    """The end-of-run table's (headers, rows of cells, column widths), for the Markdown table here and the
    screen's plain one (dashboard/fmt.py); None when there is no metric. A loop without epochs (Monitor) has
    no Epoch columns."""
    rows: list[tuple[str, ...]] = list(summary_rows(summary or {}))
    if not rows:
        return None
    headers: tuple[str, ...] = tuple(HEADERS)
    if all(r[3] == r[5] == "-" for r in rows):
        headers, rows = headers[:3] + headers[4:5], [r[:3] + r[4:5] for r in rows]
    widths = [max(len(headers[c]), *(len(r[c]) for r in rows)) for c in range(len(headers))]
    return headers, rows, widths


def format_summary_table(summary: dict[str, Any]) -> str:
    """burn-train's end-of-run table from RunFinished.summary; '' when there is no metric.

    | Split | Metric | Min.   | Epoch | Max.   | Epoch |
    |-------|--------|--------|-------|--------|-------|
    | train | loss   | 0.1234 |    10 | 2.3026 |     1 |
    """
    columns = summary_columns(summary)
    if columns is None:
        return ""
    headers, rows, widths = columns

    def line(cells: tuple[str, ...], header: bool = False) -> str:
        out = []
        for c, (cell, w) in enumerate(zip(cells, widths)):
            # numbers right-aligned so that decimals line up; text and headers left-aligned
            out.append(cell.ljust(w) if header or c < 2 else cell.rjust(w))
        return "| " + " | ".join(out) + " |"

    lines = [line(headers, header=True), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += [line(r) for r in rows]
    return "\n".join(lines)
