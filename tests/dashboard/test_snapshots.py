"""SVG snapshots of the dashboard (pytest-textual-snapshot): the main screen at 80x24, 120x40 and
200x60 in the dark theme and at 120x40 in the others, a chart with log scale and smoothing, a
chart alone (Enter), and the end-of-run screens. Times are frozen so the pictures are stable.

After a deliberate change of the look: `pytest tests/dashboard/test_snapshots.py --snapshot-update`,
then look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuitrain.dashboard.app import DashboardApp
from tuitrain.sources.run_files import ReplaySource

from .fixtures import last_time, recorded_run
from .test_app import RecordingController

THEMES = Path(__file__).resolve().parents[2] / "themes"


def dashboard(end: str = "running", theme: str = "dark", epochs: int = 3) -> DashboardApp:
    events = recorded_run(epochs=epochs, total_epochs=5, end=end)
    frozen = last_time(events) + 30
    source = ReplaySource(events, exit_code={"running": 0, "completed": 0, "failed": 1}[end], wait=end == "running")
    return DashboardApp(source, RecordingController(), THEMES / f"{theme}.tcss", clock=lambda: frozen)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)], ids=["80x24", "120x40", "200x60"])
def test_main_screen(snap_compare, size):
    assert snap_compare(dashboard(), terminal_size=size)


@pytest.mark.parametrize("theme", ["light", "high-contrast"])
def test_main_screen_themes(snap_compare, theme):
    assert snap_compare(dashboard(theme=theme), terminal_size=(120, 40))


def test_log_scale_and_smoothing(snap_compare):
    assert snap_compare(dashboard(), press=["l", "s", "s"], terminal_size=(120, 40))


def test_one_chart_alone(snap_compare):
    assert snap_compare(dashboard(), press=["tab", "enter"], terminal_size=(120, 40))


def test_summary_screen(snap_compare):
    assert snap_compare(dashboard(end="completed"), terminal_size=(120, 40))


def test_error_screen(snap_compare):
    assert snap_compare(dashboard(end="failed", epochs=1), terminal_size=(80, 24))


def test_help_screen(snap_compare):
    assert snap_compare(dashboard(), press=["question_mark"], terminal_size=(120, 40))
