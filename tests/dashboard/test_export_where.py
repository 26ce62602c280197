"""`e` writes into the run directory being shown: the folder watched as typed (started elsewhere, moved,
copied), never the run_dir its events recorded, which is relative to where the run was started."""

from __future__ import annotations

import csv

from tuitrain.dashboard.app import DashboardApp
from tuitrain.sources.run_files import FileSource

from .fixtures import T0, write_jsonl
from .test_app import shown, sync, until
from .test_chart_keys import four_metrics, grid

RECORDED = "runs/exp2/20261129-043555"  # where the run was started from, relative to that directory


@sync
async def test_e_exports_into_the_folder_watched_not_the_recorded_run_dir(tmp_path, monkeypatch):
    moved = tmp_path / "moved"
    write_jsonl(moved / "events.jsonl", four_metrics(run_dir=RECORDED))
    elsewhere = tmp_path / "api"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # `cd api && tuitrain watch ../moved`
    app = DashboardApp(FileSource(tmp_path / "api" / ".." / "moved", poll=0.02), None, watch=True, clock=lambda: T0)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(grid(app).charts) == 4)
        assert "moved" in shown(app.query_one("#title-bar"))  # the folder watched, not the one recorded
        assert RECORDED not in shown(app.query_one("#title-bar"))
        await pilot.press("e")
        await until(pilot, lambda: app.last_export is not None)
        folder = app.last_export
        assert folder.resolve().parent == (moved / "exports").resolve()
        assert str(folder).startswith(str(tmp_path / "api" / ".." / "moved"))  # as typed: the user can open it
        assert app.notice == f"exported to {folder}"  # the path shown is the one written
        assert not (elsewhere / "runs").exists()  # no tree made under the working directory
        with open(folder / "train-step-loss.csv", newline="") as f:
            assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(1, 41))
