"""Number formatting for the panels: the sinks' formatters, so the dashboard and the console show
values alike, plus what only the panels need (ages, rates). Must not import textual.
"""

from __future__ import annotations

from tuitrain.sinks.summary import format_bytes, format_duration, format_summary_table, format_value, summary_columns


def format_summary_text(summary: dict) -> str:
    """The end-of-run table as aligned plain text (a screen shows no Markdown): the columns of
    `format_summary_table` without its pipes and rule; '' when there is no metric.

    Split  Metric    Min.  Epoch    Max.  Epoch
    train  loss    0.1234     10  2.3026      1
    """
    columns = summary_columns(summary)
    if columns is None:
        return ""
    headers, rows, widths = columns

    def line(cells: tuple[str, ...]) -> str:  # text left-aligned, numbers right-aligned (decimals line up)
        return "  ".join(
            cell.ljust(w) if c < 2 else cell.rjust(w) for c, (cell, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in rows])


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


def format_size(n: int | float) -> str:
    """'512M', '3.0G', '23.5G', '1.2T': bytes in few cells, as top and htop write them (the panels' narrow
    columns); whole numbers from 100 up."""
    size = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if abs(size) < 1024 or unit == "T":
            return f"{size:.0f}{unit}" if unit == "B" or abs(size) >= 100 else f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}T"  # unreachable; keeps type checkers calm


def format_rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e4:
        return f"{value / 1e3:.1f}k"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


__all__ = [
    "format_value",
    "format_duration",
    "format_bytes",
    "format_size",
    "format_summary_table",
    "format_summary_text",
    "format_age",
    "format_rate",
]
