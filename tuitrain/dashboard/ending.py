"""The end of a run on the dashboard: the source's work returning (`training_ended`), the result
screen, a watched run whose process is gone, and the dashboard turning read-only.

`Ending` is the app's (`DashboardApp.ending`, tuitrain/dashboard/app.py) and works on the app's
state, source and controller. Like the rest of the dashboard, this module must not import the run
layer (`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`,
`tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations


from tuitrain.dashboard.messages import TrainingEnded
from tuitrain.dashboard.widgets.result_screen import ResultScreen


class Ending:
    """How `DashboardApp` shows the end of a run and stops steering it."""

    def __init__(self, app) -> None:
        self.app = app
        self.result_shown = False  # the result screen came up once (r shows it again)

    def check_alive(self) -> None:
        """Watching: run.json says the run is no longer running before its final event is shown: it has
        ended (its process may live on: a script after `trainer.fit`), or its process is gone (killed)."""
        from tuitrain.sinks.run_status import KILLED, live_status, process_gone

        app = self.app
        run_dir = getattr(app.source, "run_dir", None)
        status = "unknown" if run_dir is None else live_status(run_dir)
        if status in ("running", "unknown"):
            return
        if app.controller is not None:
            if status == KILLED:
                why = "the run's process is gone"
            elif process_gone(run_dir):
                why = "the run has ended and its process is gone"
            else:
                why = "the run has ended"
            self.read_only(why + "; keys that steer are off")
        if status == KILLED:
            app.state.final = KILLED
            app.pacing.refresh_progress()

    def read_only(self, why: str) -> None:
        app = self.app
        app.controller = None
        app.steering_changed()
        app.set_notice(why)

    def training_ended(self, message: TrainingEnded) -> None:
        """The source's work returned (`DashboardApp.on_training_ended`)."""
        app = self.app
        app.worker_done = True
        app.exit_code = message.exit_code
        if message.error and app.state.failed is None:
            from tuitrain.core.events import RunFailed

            app.bridge(RunFailed(error=message.error, traceback=message.traceback,
                                 epoch=app.state.epoch, step=app.state.step), None)
        # the last events, the final one included, may still sit there (drain does nothing once shutting down)
        while app.is_running and app.bridge.pending():
            app.drain()
        if not app.watching:
            # a config error found while building the user's parts: no run to show; leave at once, and
            # `tuitrain run` prints the one line, as it does for config errors found before the screen opened
            config_error = getattr(getattr(app.source, "run", None), "config_error", None)
            if app.leave_when_done or config_error is not None:
                app.leave()
                return
            if app.state.ended:
                what = "the error" if app.state.final == "failed" else "the summary"
                app.set_notice(f"training {app.state.final or 'ended'} · r: {what} again · q: leave")
                self.show_result()
            else:  # work returned without a final event (a fake or a crashed core)
                app.set_notice(f"training ended, exit code {app.exit_code}")
                app.state.final = app.state.final or ("completed" if app.exit_code == 0 else "interrupted")
                app.pacing.refresh_progress()
                self.show_result()
        app.steering_changed()

    def show_result(self, again: bool = False) -> None:
        """The charts drawn once more and the result screen over them (once; `again`: r asked)."""
        if self.result_shown and not again:
            return
        self.result_shown = True
        app = self.app
        app.pacing.replot()
        if getattr(app.state, "runs", None):  # compared runs: the charts are the point; r shows it
            return
        app.push_screen(ResultScreen(app.state, app.exit_code), self._chart_key)

    def _chart_key(self, key: str | None) -> None:
        """The summary left with a chart key (`i`, `l`, Enter ...): the key acts on the dashboard's
        charts, once the dashboard is back (and has its focus back)."""
        if key:
            grid = self.app.dashboard.grid
            self.app.call_after_refresh(grid.press, key)
