"""`FilesApp`: the dashboard of runs read from files that may be another tool's (`tuitrain watch` of a
TensorBoard folder, runs of several tools compared, a sweep's trials). What their readers skipped as
damaged (a source's `problems`, tuitrain/sources/refs.py: "events.out.tfevents.1.host: a torn last record
at byte 10,240 skipped") is said in the notice line, before the notice's own words, once a second at most.
`e` exports into a tuitrain run's folder, as ever; where the run shown is another tool's, into the current
folder's exports/ (tuitrain never writes into another tool's folder).

Imports textual (through `DashboardApp`): imported only when such a dashboard opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuitrain.dashboard.app import DashboardApp
from tuitrain.dashboard.charts.chart_grid import ChartGrid
from tuitrain.sources.own_runs import is_run_dir
from tuitrain.sources.run_files import problems_notice

#: seconds between looks at the readers' problems
EVERY = 1.0


class FilesApp(DashboardApp):
    """`DashboardApp` whose notice line also says what the source's readers skipped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._words = self.notice  # the notice's own words, without the problems
        self._problems = ""

    async def on_mount(self) -> None:  # (DashboardApp's own on_mount runs too: Textual calls both)
        self.set_interval(EVERY, self.say_problems)

    def say_problems(self) -> None:
        line = problems_notice(self.source)
        if line != self._problems and self.dashboard is not None:
            self._problems = line
            super().set_notice(self._joined())

    def set_notice(self, text: str) -> None:
        self._words = text
        super().set_notice(self._joined())

    def on_chart_grid_export_requested(self, message: ChartGrid.ExportRequested) -> None:
        """e: DashboardApp's export, into the current folder where the folder it would take is no run of
        tuitrain's (the run shown is another tool's)."""
        target = self.state.run_dir or str(getattr(self.source, "run_dir", "") or "")
        if not target or is_run_dir(target):
            return  # DashboardApp's own handler exports (or says there is nowhere to)
        message.prevent_default()
        kept = self.state.run_dir
        self.state.run_dir = str(Path.cwd())
        try:
            super().on_chart_grid_export_requested(message)
        finally:
            self.state.run_dir = kept

    def _joined(self) -> str:
        return " · ".join(part for part in (self._problems, self._words) if part)


__all__ = ["FilesApp"]
