"""`FilterScreen`: `/` asks for a regular expression; the charts whose metric names match stay.
The run list's `/` asks with it too, for a filter of the compared runs (its own title and hint).

Enter applies it (empty: every chart), Esc keeps the current filter. A bad expression is named under
the field and the screen stays, so that it can be corrected; the app checks it with `check`.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from tuitrain.dashboard.screens.modal import Modal


class FilterScreen(Modal[str | None]):
    """Dismissed with the accepted text, or None (Esc)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    #: the field takes the keys once the screen is up (Textual focuses it; an `on_mount` that looked it up
    #: failed when keys queued behind `/` dismissed the screen before it was mounted)
    AUTO_FOCUS = "#filter-input"

    DEFAULT_CSS = """
    FilterScreen { align: center bottom; }
    #filter-box { width: 70; max-width: 95%; height: auto; padding: 0 1; margin-bottom: 2; }
    #filter-error { height: auto; color: $error; }
    """

    def __init__(
        self,
        current: str,
        check: Callable[[str], str],
        *,
        title: str = "Show the charts whose metric names match (a regular expression; empty: all)",
        placeholder: str = "e.g. loss|acc",
    ) -> None:
        super().__init__()
        self.current = current
        self.check = check
        self.title, self.placeholder = title, placeholder
        self.error = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="filter-box"):
            yield Static(self.title, id="filter-title", markup=False)
            yield Input(self.current, placeholder=self.placeholder, id="filter-input")
            yield Static("", id="filter-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.error = self.check(event.value)
        if self.error:
            self.query_one("#filter-error", Static).update(self.error)
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
