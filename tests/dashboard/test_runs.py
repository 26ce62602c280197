"""`tuitrain ls` helpers: finding run directories and one line per run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tuitrain.run.directories import format_runs, list_runs


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def make_run(root, experiment, stamp, **info):
    d = root / experiment / stamp
    d.mkdir(parents=True)
    data = {
        "status": "completed",
        "exit_code": 0,
        "started": None,
        "ended": None,
        "epoch": 3,
        "step": 21,
        "best": {},
        "env": {},
        "experiment": experiment,
        "pid": os.getpid(),
    }
    data.update(info)
    (d / "run.json").write_text(json.dumps(data))
    return d


def test_list_runs_newest_first_with_killed_runs(tmp_path):
    make_run(
        tmp_path,
        "spirals",
        "20240101-000000",
        started="2024-01-01T00:00:00+00:00",
        best={"file": "checkpoint/epoch-2.pt", "monitor": "valid/loss", "value": 0.123456},
    )
    make_run(
        tmp_path,
        "spirals",
        "20240301-000000",
        started="2024-03-01T00:00:00+00:00",
        status="running",
        exit_code=None,
        pid=dead_pid(),
        epoch=1,
        step=4,
    )
    make_run(
        tmp_path,
        "mnist",
        "20240201-000000",
        started="2024-02-01T00:00:00+00:00",
        status="running",
        exit_code=None,
        pid=os.getpid(),
    )
    (tmp_path / "not-a-run").mkdir()
    rows = list_runs(tmp_path)
    assert [r["name"] for r in rows] == ["spirals/20240301-000000", "mnist/20240201-000000", "spirals/20240101-000000"]
    assert [r["status"] for r in rows] == ["killed", "running", "completed"]
    lines = format_runs(rows).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("spirals/20240301-000000") and "killed" in lines[0] and "epoch 1 step 4" in lines[0]
    assert "2024-01-01" in lines[2] or "2023-12-31" in lines[2]  # local time of the start
    assert lines[2].endswith("valid/loss=0.1235")
    assert lines[0].endswith("-")  # no best yet
    # the columns line up
    assert len({line.index("epoch") for line in lines}) == 1


def test_list_runs_of_a_missing_or_empty_folder(tmp_path):
    assert list_runs(tmp_path / "nope") == []
    assert list_runs(tmp_path) == []
    assert format_runs([]) == "no runs found"


def test_a_broken_run_json_still_lists(tmp_path):
    d = tmp_path / "x" / "20240101-000000"
    d.mkdir(parents=True)
    (d / "run.json").write_text("{half")
    rows = list_runs(tmp_path)
    assert len(rows) == 1 and rows[0]["status"] == "unknown"
    assert "x/20240101-000000" in format_runs(rows)
