"""Alerts on the dashboard (SPEC "Dashboard", "Health"): the header's colour and count, a mark on the
charts at the alert's step, the alert in the output panel."""

from __future__ import annotations

from tests.dashboard.fixtures import recorded_run
from tests.dashboard.test_app import make_app, sync, until
from tuitrain.core.events import AlertRaised
from tuitrain.dashboard.charts.chart_grid import ChartGrid


@sync
async def test_an_alert_colours_the_header_marks_the_charts_and_is_listed():
    events = recorded_run(epochs=3, total_epochs=5, end="running")
    events.append(
        AlertRaised(
            rule="loss_spike",
            level="warning",
            title="loss spike at step 30",
            text="loss 9.1 at step 30 is above 2.0",
            step=30,
            value=9.1,
            action="skip",
        )
    )
    app = make_app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(ChartGrid)
        await until(pilot, lambda: app.state.alerts and grid.charts["loss"].alert_marks)
        await pilot.pause()
        bar = app.query_one("#title-bar")
        assert bar.has_class("-alerting")
        assert "1 alert: loss spike at step 30" in str(bar.render())
        assert grid.charts["loss"].alert_marks == [30]
        top = grid.charts["loss"].drawn.lines[grid.charts["loss"].drawn.top].text
        assert "▼" in top
        log = app.query_one("#log")
        await until(pilot, lambda: "loss spike at step 30" in "\n".join(str(x) for x in getattr(log, "lines", [])))


def test_a_stall_abort_under_the_dashboard_gives_the_terminal_back_and_says_why(tmp_path):
    """The loop is stuck, so the process ends itself: the dashboard leaves first (cooked mode back, the
    alternate screen left), then one line says why, and the exit code is 1."""
    import json
    import os
    import pty
    import shutil
    import sys
    import termios
    import time
    from pathlib import Path

    from tests.conftest import cli_env, end_pty, wait_exit
    from tests.health.healthproj import CONFIG

    here = Path(__file__).parent
    shutil.copy(here / "healthproj.py", tmp_path / "healthproj.py")
    config = tmp_path / "health.toml"
    config.write_text(CONFIG.format(runs=tmp_path / "runs"))
    cmd = [
        sys.executable,
        "-m",
        "tuitrain",
        "run",
        str(config),
        "--run-dir",
        str(tmp_path / "run"),
        "--set",
        "data.sleep_item=1600",
        "--set",
        "data.sleep=60",
        "--set",
        'watch.stall="2s"',
        "--set",
        "watch.stall_action=abort",
    ]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="100", LINES="30", PYTHONPATH=str(tmp_path))
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tmp_path)
        os.execvpe(cmd[0], cmd, env)
    before = termios.tcgetattr(fd)
    try:
        t0 = time.monotonic()
        code, screen = wait_exit(pid, fd, 60)
        assert code == 1, screen[-2000:]
        assert time.monotonic() - t0 < 40
        after = termios.tcgetattr(fd)
        assert after[3] == before[3]  # cooked mode is back
        tail = screen[screen.rfind(b"\x1b[?1049l") :]  # after the alternate screen was left
        assert b"the run is aborted (exit 1)" in tail, screen[-1500:]
        info = json.loads((tmp_path / "run" / "run.json").read_text())
        assert info["status"] == "failed" and info["reason"] == "stalled"
    finally:
        end_pty(pid, fd)
