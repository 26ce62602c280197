"""`ChartNote`: what the chart area does not show, said in it. Before the first metric, the whole
area: "waiting for the first metrics… (step N, phase)", so the screen is never empty; with charts
out of view, one line under them: "+2 more charts below: Tab / PgDn"; otherwise nothing."""

from __future__ import annotations

from textual.widgets import Static

from tuitrain.core.text import safe_name, safe_text


def _charts(n: int) -> str:
    return f"{n} more chart{'s' if n != 1 else ''}"


def note_text(state, shown: int, above: int, below: int, filter_text: str = "") -> str:
    """The note for `shown` charts with `above` and `below` of them out of view ("" : none)."""
    if not shown:
        names = getattr(state, "metric_names", None) or []
        if filter_text and any(not n.startswith("device/") for n in names):
            return safe_text(f"no chart matches /{filter_text}/: / changes the filter", lines=False)
        if state is not None and state.ended:
            return "no metrics were logged"
        where = []
        if state is not None and state.step:
            where.append(f"step {state.step:,}")
        if state is not None and state.phase:
            where.append(safe_name(state.phase, 32))
        return "waiting for the first metrics…" + (f" ({', '.join(where)})" if where else "")
    if above and below:
        return f"+{above} above, +{below} below: Tab / PgUp / PgDn"
    if below:
        return f"+{_charts(below)} below: Tab / PgDn"
    if above:
        return f"+{_charts(above)} above: Shift+Tab / PgUp"
    return ""


class ChartNote(Static):
    """One line under the charts, or the whole chart area while there is no chart (`-alone`)."""

    DEFAULT_CSS = """
    ChartNote { height: 1; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes, markup=False)
        self.text = ""

    def show(self, state, shown: int, above: int, below: int, filter_text: str = "") -> None:
        text = note_text(state, shown, above, below, filter_text)
        self.set_class(not shown, "-alone")
        self.display = bool(text)
        if text != self.text:
            self.text = text
            self.update(text)


__all__ = ["ChartNote", "note_text"]
