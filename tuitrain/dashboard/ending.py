"""The end of a run on the dashboard: the source's work returning (`on_training_ended`), the
result screen, a watched run whose process is gone, and the dashboard turning read-only.

`EndingMixin` is one part of `DashboardApp` (tuitrain/dashboard/app.py) and works on its
attributes. Like the rest of the dashboard, this module must not import the run layer
(`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`,
`tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations


from tuitrain.dashboard.messages import TrainingEnded
from tuitrain.dashboard.widgets.result_screen import ResultScreen


class EndingMixin:
    """How `DashboardApp` shows the end of a run and stops steering it."""

    def _check_alive(self) -> None:
        """Watching: a run whose process is gone without a final event was killed."""
        from tuitrain.sinks.run_status import live_status as run_status

        run_dir = getattr(self.source, "run_dir", None)
        if run_dir is None or run_status(run_dir) in ("running", "unknown"):
            return
        if self.controller is not None:
            self._read_only("the run's process is gone; keys that steer are off")
        if run_status(run_dir) == "killed":
            self.state.final = "killed"
            self._refresh_progress()

    def _read_only(self, why: str) -> None:
        self.controller = None
        self.steering_changed()
        self.set_notice(why)

    def on_training_ended(self, message: TrainingEnded) -> None:
        self.worker_done = True
        self.exit_code = message.exit_code
        if message.error and self.state.failed is None:
            from tuitrain.core.events import RunFailed

            self.bridge(RunFailed(error=message.error, traceback=message.traceback,
                                  epoch=self.state.epoch, step=self.state.step), None)
        # the last events, the final one included, may still sit there (drain does nothing once shutting down)
        while self.is_running and self.bridge.pending():
            self.drain()
        if not self.watching:
            # a config error found while building the user's parts: no run to show; leave at once, and
            # `tuitrain run` prints the one line, as it does for config errors found before the screen opened
            config_error = getattr(getattr(self.source, "run", None), "config_error", None)
            if self.leave_when_done or config_error is not None:
                self.leave()
                return
            if self.state.ended:
                what = "the error" if self.state.final == "failed" else "the summary"
                self.set_notice(f"training {self.state.final or 'ended'} · r: {what} again · q: leave")
                self._show_result()
            else:  # work returned without a final event (a fake or a crashed core)
                self.set_notice(f"training ended, exit code {self.exit_code}")
                self.state.final = self.state.final or ("completed" if self.exit_code == 0 else "interrupted")
                self._refresh_progress()
                self._show_result()
        self.steering_changed()

    def _show_result(self) -> None:
        if self._result_shown:
            return
        self._result_shown = True
        self._replot()
        if getattr(self.state, "runs", None):  # compared runs: the charts are the point; r shows it
            return
        self.push_screen(ResultScreen(self.state, self.exit_code))
