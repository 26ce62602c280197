"""The end of a run on the dashboard: the result screen (`Ending`), and the words the app says when
the run's work returns or a watched run stops (`ended_notice`, `stopped_why`).

`Ending` is given what it works with (the app, for Textual's public `push_screen` and
`call_after_refresh`, and the `Feed` that draws the charts); the decisions at the end (leave, turn
read-only, show the result) are the app's, in its handlers of `TrainingEnded`, `Feed.Settled` and
`Feed.Stopped` (tuitrain/dashboard/app.py). Like the rest of the dashboard, this module must not
import the run layer (`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`,
`tuitrain.runs`, `tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

from textual.app import App

from tuitrain.dashboard.state.feed import Feed
from tuitrain.dashboard.screens.result_screen import ResultScreen


class Ending:
    """The result screen over the charts drawn once more: once (`again`: r asked); left with a chart
    key, the key acts on the dashboard's charts."""

    def __init__(self, host: App, feed: Feed) -> None:
        self.host, self.feed = host, feed
        self.result_shown = False  # the result screen came up once (r shows it again)

    def show_result(self, state, exit_code: int | None, again: bool = False) -> None:
        if self.result_shown and not again:
            return
        self.result_shown = True
        self.feed.replot()
        if state.kind != "run":  # compared runs: the charts are the point; r shows it
            return
        self.host.push_screen(ResultScreen(state, exit_code), self._chart_key)

    def _chart_key(self, key: str | None) -> None:
        """The summary left with a chart key (`i`, `l`, Enter ...): the key acts on the dashboard's
        charts, once the dashboard is back (and has its focus back)."""
        if key:
            # the summary was opened over the dashboard: its screen is there
            self.host.call_after_refresh(self.feed.screen.grid.press, key)  # type: ignore[union-attr]


def ended_notice(state, exit_code: int | None) -> str:
    """The notice once a live run's work returned: how it ended and the keys left."""
    if state.ended:
        what = "the error" if state.final == "failed" else "the summary"
        return f"training {state.final or 'ended'} · r: {what} again · q: leave"
    return f"training ended, exit code {exit_code}"  # work returned without a final event (a fake or a crashed core)


def stopped_why(status: str, run_dir) -> str:
    """Why a watched run that stopped before its final event can no longer be steered: it has ended
    (its process may live on: a script after `trainer.fit`), or its process is gone (killed)."""
    from tuitrain.sinks.run_status import KILLED, process_gone

    if status == KILLED:
        return "the run's process is gone"
    if process_gone(run_dir):
        return "the run has ended and its process is gone"
    return "the run has ended"


__all__ = ["Ending", "ended_notice", "stopped_why"]
