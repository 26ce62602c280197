"""Number formatting for the panels: the sinks' formatters when present, so the dashboard and the
console show values alike, with local fallbacks. Must not import textual.
"""

from __future__ import annotations

import math
from typing import Any

try:
    from tuitrain.sinks.summary import format_bytes, format_duration, format_summary_table, format_value
except ImportError:  # the sinks package is optional for the dashboard

    def format_value(value: Any) -> str:
        if isinstance(value, bool) or value is None or isinstance(value, int):
            return str(value)
        try:
            value = float(value)
        except (TypeError, ValueError):
            return str(value)
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and not (1e-3 <= abs(value) < 1e5):
            return f"{value:.3e}"
        return f"{value:.4f}"

    def format_duration(seconds: float | None) -> str:
        if seconds is None or not math.isfinite(seconds):
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
        return f"{size:.1f} GB"

    def format_summary_table(summary: dict) -> str:
        lines = []
        for key, entry in (summary or {}).items():
            if isinstance(entry, dict):
                lines.append(f"{key}: min {format_value(entry.get('min'))} (epoch {entry.get('min_epoch')}), "
                             f"max {format_value(entry.get('max'))} (epoch {entry.get('max_epoch')}), "
                             f"last {format_value(entry.get('last'))}")
        return "\n".join(lines)


def format_age(seconds: float) -> str:
    """'12s', '4m', '3h', '2d': how long ago, short enough for a table cell."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


def format_rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


__all__ = ["format_value", "format_duration", "format_bytes", "format_summary_table", "format_age", "format_rate"]
