"""The dashboard of a run read from another tool's log (issue 54) says only what such a log tells: the
run's name and whether its writer still writes before the first event, "log ended" (never "completed")
once its reader read it to its end, and panels of what such a log never holds (devices, checkpoints) say
so. A real SummaryWriter log; tuitrain's own runs keep their words (test_truthful_screens.py, the SVG
snapshots)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.dashboard.test_app import shown, sync, until
from tuitrain.core.events import RunFinished
from tuitrain.dashboard.state.foreign import LOG_ENDED, final_of, tool_of_loop
from tuitrain.sources import registry
from tuitrain.sources.tensorboard import TensorBoardSource

STEPS = 400


@pytest.fixture(scope="module")
def tb_run(tmp_path_factory) -> Path:
    """A run SummaryWriter wrote: scalars, a histogram, an image and a text; its writer closed."""
    from torch.utils.tensorboard import SummaryWriter

    folder = tmp_path_factory.mktemp("logs") / "baseline"
    rng = np.random.default_rng(0)
    w = SummaryWriter(str(folder))
    for i in range(1, STEPS + 1):
        w.add_scalar("loss", 1.0 / i, i)
        if i % 100 == 0:
            w.add_histogram("weights", rng.normal(0, 1, 500), i)
            w.add_image("sample", rng.integers(0, 255, (3, 8, 8), dtype=np.uint8), i)
            w.add_text("note", f"step {i}", i)
    w.close()
    # written 10 minutes ago (this test's process, its writer, lives on: a file changed now would be live)
    old = time.time() - 600
    for f in folder.iterdir():
        os.utime(f, (old, old))
    return folder


def _ref(folder: Path):
    (ref,) = registry.find([folder]).runs
    assert ref.tool == "tensorboard"
    return ref


def _text(app, selector: str) -> str:
    return shown(app.screen.query_one(selector))


class HeldSource(TensorBoardSource):
    """A real TensorBoard source whose reading waits for `gate`: the screen before its first event."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def work(self):
        self.gate.wait(30)
        return super().work()


@sync
async def test_a_tensorboard_log_read_to_its_end_says_so(tb_run):
    from tuitrain.dashboard.files_app import FilesApp
    from tuitrain.dashboard.screens.result_screen import ResultScreen

    ref = _ref(tb_run)
    source = HeldSource(ref)
    assert source.live is False  # its writer closed
    app = FilesApp(source, None, watch=True, notice="TensorBoard run, read only")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        title = _text(app, "#title-bar")
        # before the first event: the run named by its path, not live (its writer stopped)
        assert "None" not in title and "baseline" in title and "live" not in title, title
        assert "reading log" in title, title
        assert "not in TensorBoard logs" in _text(app, "#devices")
        assert "not in TensorBoard logs" in _text(app, "#checkpoints")
        source.gate.set()
        await until(pilot, lambda: isinstance(app.screen, ResultScreen), timeout=60)
        result = app.screen
        assert result.title_text == "TensorBoard log read to its end"
        assert result.body_text.startswith(f"step {STEPS:,} · "), result.body_text
        assert "completed" not in result.body_text and "exit code" not in result.body_text
        assert app.state.final == LOG_ENDED and app.state.tool == "tensorboard" and app.state.loop == "tensorboard"
        await pilot.press("escape")
        await pilot.pause()
        title = _text(app, "#title-bar")
        assert "log ended" in title and "completed" not in title and "live" not in title, title
        progress = _text(app, "#progress")
        assert "log ended" in progress and "completed" not in progress, progress
        # its devices and checkpoints never come: said so, not "yet"
        for panel in ("#devices", "#checkpoints"):
            lines = [line.strip("│ ") for line in _text(app, panel).splitlines()[1:-1]]
            assert [line for line in lines if line] == ["not in TensorBoard logs"], lines
        await pilot.press("q")


@sync
async def test_the_panels_line_fits_at_80x24(tb_run):
    from tuitrain.dashboard.files_app import FilesApp
    from tuitrain.dashboard.panels.checkpoint_list import CheckpointList
    from tuitrain.dashboard.panels.devices_panel import DevicesPanel

    ref = _ref(tb_run)
    source = HeldSource(ref)
    app = FilesApp(source, None, watch=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        longest = max(len(f"not in {registry.label(t)} logs") for t in ("tensorboard", "lightning", "mlflow", "wandb"))
        for kind in (DevicesPanel, CheckpointList):
            panel = app.screen.query_one(kind)
            if panel.display and panel.size.width:  # (80x24 may fold a panel away)
                assert panel.size.width >= longest, (kind.__name__, panel.size.width, longest)
        source.gate.set()
        await pilot.press("q")


def test_only_a_foreign_log_s_end_is_not_completed():
    """tuitrain's own loops ("", "monitor", "lightning": the integration) keep "completed"; MLflow and
    W&B record the run's end themselves; TensorBoard's, Lightning CSV's and trackio's logs just end."""
    assert [tool_of_loop(x) for x in ("", "monitor", "lightning", "transformers")] == ["", "", "", ""]
    assert tool_of_loop("lightning_csv") == "lightning" and tool_of_loop("tensorboard") == "tensorboard"
    assert final_of("", "completed") == "completed" and final_of("", "") == "completed"
    assert final_of("tensorboard", "completed") == LOG_ENDED
    assert final_of("lightning", "completed") == LOG_ENDED and final_of("trackio", "") == LOG_ENDED
    assert final_of("mlflow", "completed") == "completed" and final_of("wandb", "completed") == "completed"
    assert final_of("mlflow", "interrupted") == "interrupted"


def test_the_state_folds_a_tensorboard_run_as_foreign(tb_run):
    from tuitrain.dashboard.state.model import DashboardState

    source = TensorBoardSource(_ref(tb_run))
    state = DashboardState()
    state.seed(source)
    assert state.experiment == "baseline" and state.run_dir == str(tb_run) and state.status == "reading log"
    state.apply(
        [
            RunFinished(
                status="completed", exit_code=0, epoch=0, step=STEPS, reason="", duration=1.0, summary={}, best={}
            )
        ]
    )
    assert state.final == LOG_ENDED and state.status == LOG_ENDED and state.step == STEPS
