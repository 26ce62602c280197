"""trackio projects read back (tuitrain/sources/trackio.py) from databases trackio itself wrote (in its
own process, under TRACKIO_DIR), values compared with trackio's own reader (`SQLiteStorage.get_logs`); a
run followed live while trackio writes it; a locked and a damaged database; hostile names."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tuitrain.core.events import RunStarted
from tuitrain.sources import trackio as reader
from tuitrain.sources.polled import ForeignBlock, drain, split_name
from tuitrain.sources.refs import RunRef

if importlib.util.find_spec("trackio") is None:  # (trackio runs in the tests' subprocesses: not imported here)
    pytest.skip("trackio is not installed (pip install trackio: the test extra)", allow_module_level=True)

# trackio writes the runs RUN:STEPS of a project in turn, in one process of its own (as a script that trains twice
# does: trackio's import is most of a writer's CPU)
WRITE = """
import math, sys, time, trackio
project, pause, runs = sys.argv[1], float(sys.argv[2]), [spec.split(":") for spec in sys.argv[3:]]
for run, steps in runs:
    trackio.init(project=project, name=run, config={"lr": 0.01, "layers": [64, 64], "optimizer": "adam"})
    for step in range(int(steps)):
        logged = {"train/loss": 1.0 / (step + 1), "nested": {"grad_norm": step * 0.5}}
        if step % 5 == 4:
            logged["val/accuracy"] = step / 20
        if step == 3:
            logged["nan_metric"] = float("nan")
        trackio.log(logged)
        print(step, time.time(), flush=True)
        time.sleep(pause)
    trackio.finish()
"""

# then, in the same process once every run is finished, what trackio's own storage reads of each (its last line)
LOGS = """
import json
from trackio.sqlite_storage import SQLiteStorage
print(json.dumps({run: SQLiteStorage.get_logs(project, run) for run, _ in runs}, default=str), flush=True)
"""


def _env(root: Path) -> dict:
    return {**os.environ, "TRACKIO_DIR": str(root), "TRACKIO_SHOW": "false", "GRADIO_ANALYTICS_ENABLED": "False"}


def _write(root: Path, project: str, *runs: tuple[str, int], pause: float = 0.0, read_back: bool = False, **kw):
    """trackio writing `runs` ((name, steps) each) one after the other in a process of its own; `read_back`: then
    reading them with its own storage, printed as the last line."""
    args = [sys.executable, "-c", WRITE + (LOGS if read_back else ""), project, str(pause)]
    args += [f"{run}:{steps}" for run, steps in runs]
    return subprocess.Popen(args, env=_env(root), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, **kw)


def _series(events) -> dict:
    out: dict = {}
    for e in events:
        if isinstance(e, ForeignBlock):
            for key, (xs, ys) in e.series.items():
                got = out.setdefault(key, ([], []))
                got[0].extend(xs.tolist())
                got[1].extend(ys.tolist())
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    """(the folder of a project of two runs trackio wrote, what trackio's own storage then read of each run)"""
    root = tmp_path_factory.mktemp("trackio")
    writer = _write(root, "vision", ("run-a", 20), ("run-b", 20), read_back=True)
    out, _ = writer.communicate(timeout=120)
    assert writer.returncode == 0
    return root, json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def project(written) -> Path:
    return written[0]


def test_runs_read_as_trackio_reads_them(written):
    project, logs = written
    refs = reader.find_runs(project)
    assert [r.name for r in refs] == ["vision/run-a", "vision/run-b"]
    assert reader.find_runs(project / "vision.db") == refs
    assert sorted(logs) == sorted(ref.key for ref in refs)
    for ref in refs:
        source = reader.open_source(ref, live=False)
        events = drain(source)
        assert source.problems == []
        assert isinstance(events[0], RunStarted)
        assert events[0].config == {"lr": 0.01, "layers": [64, 64], "optimizer": "adam"}
        got = _series(events)
        own = logs[ref.key]
        expected: dict = {}
        for row in own:
            for key, value in reader.flat_numbers({k: v for k, v in row.items() if k not in ("step", "timestamp")}):
                split, name = split_name(key)
                xs, ys = expected.setdefault((split, "step", name), ([], []))
                xs.append(float(row["step"]))
                ys.append(value)
        assert set(got) >= {
            ("train", "step", "loss"),
            ("valid", "step", "accuracy"),
            ("train", "step", "nested/grad_norm"),
        }
        for key, (xs, ys) in expected.items():
            assert got[key][0] == xs, key
            assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(got[key][1], ys)), key
        assert set(got) == set(expected)
        assert len(got[("train", "step", "loss")][0]) == 20


def test_a_run_followed_live_within_two_seconds_of_its_flush(tmp_path):
    writer = _write(tmp_path, "live", ("running", 8), pause=0.6)
    try:
        t0 = time.monotonic()
        while not reader.find_runs(tmp_path) and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        (ref,) = reader.find_runs(tmp_path)
        assert reader.is_live(ref)
        source = reader.open_source(ref)
        arrived: dict[float, float] = {}

        def emit(event, state=None):
            for x in _series([event]).get(("train", "step", "loss"), ([], []))[0]:
                arrived.setdefault(x, time.monotonic())

        source.open(emit)
        thread = threading.Thread(target=source.work, daemon=True)
        thread.start()
        flushed: dict[float, float] = {}  # when each step's row was in the database, seen from here
        conn = sqlite3.connect((tmp_path / "live.db").as_uri() + "?mode=ro", uri=True)
        while writer.poll() is None or len(flushed) < 8:
            try:
                for (step,) in conn.execute("SELECT step FROM metrics WHERE run_name = 'running'"):
                    flushed.setdefault(float(step), time.monotonic())
            except sqlite3.OperationalError:
                pass
            time.sleep(0.02)
            if time.monotonic() - t0 > 90:
                break
        conn.close()
        t1 = time.monotonic()
        while len(arrived) < 8 and time.monotonic() - t1 < 5:
            time.sleep(0.05)
        source.close()
        thread.join(timeout=5)
    finally:
        writer.kill()
        writer.wait()
    assert sorted(arrived) == [float(s) for s in range(8)]
    late = {s: round(arrived[s] - flushed[s], 2) for s in flushed if arrived[s] - flushed[s] > 2.0}
    assert not late, late
    assert source.problems == []


def test_a_locked_a_damaged_database_and_hostile_names(project, tmp_path):
    db = tmp_path / "vision.db"
    shutil.copy(project / "vision.db", db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")  # a rollback journal: a writer's transaction keeps readers out
    hostile = "\x1b[31mred\x1b]0;title\x07" + "n" * 300
    conn.execute(
        "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) SELECT run_id, timestamp, run_name, 99, ? "
        "FROM metrics WHERE run_name = 'run-a' LIMIT 1",
        (json.dumps({hostile: 7.5, "val_" + hostile: 8.5}),),
    )
    conn.execute(
        "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) SELECT run_id, timestamp, run_name, 100, "
        "'{not json' FROM metrics WHERE run_name = 'run-a' LIMIT 1"
    )
    conn.commit()
    conn.close()
    (ref, _) = reader.find_runs(db)
    source = reader.open_source(ref, live=False)
    got = _series(drain(source))
    assert got[("train", "step", hostile)] == ([99.0], [7.5]) and got[("valid", "step", hostile)] == ([99.0], [8.5])
    assert len(source.problems) == 1 and "1 damaged row of run 'run-a' skipped" in source.problems[0]

    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        source = reader.open_source(ref, live=True)
        drain(source, timeout=5)
        assert len(source.problems) == 1 and "locked by its writer" in source.problems[0], source.problems
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    raw = db.read_bytes()
    for keep in (len(raw) // 2, 3000):
        cut = tmp_path / f"cut{keep}.db"
        cut.write_bytes(raw[:keep])
        runs = reader.find_runs(cut)
        for r in runs or [RunRef("trackio", cut, "?", "run-a")]:
            source = reader.open_source(r, live=False)
            drain(source)  # never raises
            assert len(source.problems) <= 1
    assert [r.name for r in reader.find_runs(project)] == ["vision/run-a", "vision/run-b"]
