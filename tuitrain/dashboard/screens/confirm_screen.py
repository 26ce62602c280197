"""`ConfirmScreen`: "stop training and leave?"; `y` confirms, any other key cancels.

Dismissed with "stop" (y), "leave" (l, only when offered: watching a run in another process) or
"cancel" (anything else; typed with the `q`, before the question showed, too, except `y` and `l`, which
must be typed once it shows). `stop_says` words what `y` does to the loop that runs: only what it does.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from tuitrain.dashboard.screens.modal import Modal, is_typed_ahead


def stop_says(loop: str, run_dir: bool = True) -> tuple[str, str]:
    """What a stop does to a run, by its loop (`RunStarted.loop`): the dialog's `y` line, and the notice
    once it is asked for. Only tuitrain's own loop saves a checkpoint at a stop whatever the code does."""
    if loop == "":
        if not run_dir:  # a Learner without a run directory has nowhere to save one
            return "y: stop gracefully and leave", "stopping, then leaving"
        return "y: stop gracefully (checkpoint saved) and leave", "stopping: saving a checkpoint, then leaving"
    if loop == "monitor":
        return (
            "y: ask the loop to stop (it saves a checkpoint if it checks checkpoint_requested) and leave",
            "stop asked: leaving when the loop ends",
        )
    if loop == "lightning":
        return (
            "y: stop after this step (trainer.should_stop; a checkpoint first, unless save_on_stop=False) and leave",
            "stopping after this step, then leaving",
        )
    if loop == "transformers":
        return (
            'y: stop after this step (should_training_stop; a checkpoint unless save_strategy is "no") and leave',
            "stopping after this step, then leaving",
        )
    return "y: ask the run to stop and leave", "stop asked: leaving when the run ends"


class ConfirmScreen(Modal[str]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    #confirm-box { width: auto; max-width: 90%; height: auto; padding: 1 2; }
    #confirm-box Static { width: auto; max-width: 100%; }
    """

    def __init__(
        self, question: str = "Stop training and leave?", offer_leave: bool = False, stop: str = stop_says("")[0]
    ) -> None:
        super().__init__()
        self.question = question
        self.offer_leave = offer_leave
        self.stop = stop  # the `y` line: what a stop does to this run

    def compose(self) -> ComposeResult:
        keys = self.stop
        if self.offer_leave:
            keys += "\nl: leave, the run goes on"
        keys += "\nany other key: cancel"
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question")
            yield Static(keys, id="confirm-keys")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        if event.key in ("y", "l") and is_typed_ahead(event):
            return  # typed with the q, before the question showed: it must be read first (any other key cancels)
        if event.key == "y":
            self.dismiss("stop")
        elif event.key == "l" and self.offer_leave:
            self.dismiss("leave")
        else:
            self.dismiss("cancel")

    def on_click(self, event: events.Click) -> None:
        if event.widget is self:  # a click outside the box cancels, as any key does
            self.dismiss("cancel")
