"""MLflow runs read back (tuitrain/sources/mlflow.py) from stores MLflow's own client wrote: the file
store and a SQLite store, values compared with the client's `get_metric_history`; a running run followed
live and its end said; a cut metrics file, a locked and a half-written database; hostile names."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import sqlite3
import threading
import time

import pytest

from tuitrain.core.events import RunFailed, RunFinished, RunStarted
from tuitrain.sources import mlflow as reader
from tuitrain.sources.polled import ForeignBlock, drain, split_name
from tuitrain.sources.refs import RunRef

if importlib.util.find_spec("mlflow") is None:  # (imported by the tests that run, not at collection: ~2 s)
    pytest.skip("MLflow is not installed (pip install mlflow-skinny: the test extra)", allow_module_level=True)


def _series(events) -> dict:
    out: dict = {}
    for e in events:
        if isinstance(e, ForeignBlock):
            for key, (xs, ys) in e.series.items():
                got = out.setdefault(key, ([], []))
                got[0].extend(xs.tolist())
                got[1].extend(ys.tolist())
    return out


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _write_store(uri: str) -> dict:
    """Runs of two experiments as a user's script logs them: {run name: run id}."""
    client = _client(uri)
    ids = {}
    first = client.create_experiment("vision")
    second = client.create_experiment("text models")
    for exp, name, status in [(first, "baseline", "FINISHED"), (first, "wide", "FAILED"), (second, "gpt", "KILLED")]:
        run = client.create_run(exp, run_name=name)
        rid = run.info.run_id
        ids[name] = rid
        client.log_param(rid, "lr", "0.01")
        client.log_param(rid, "optimizer", "adam")
        for step in range(20):
            client.log_metric(rid, "train/loss", 1.0 / (step + 1), step=step)
            if step % 5 == 4:
                client.log_metric(rid, "val_accuracy", step / 20, step=step)
        for i in range(3):
            client.log_metric(rid, "epoch_time", 10.0 + i)  # no step: MLflow's 0 each time
        client.log_metric(rid, "grad_norm", float("nan"), step=3)
        client.set_terminated(rid, status)
    gone = client.create_run(first, run_name="deleted one")
    client.delete_run(gone.info.run_id)
    return ids


@pytest.fixture(scope="module")
def empty_sqlite(tmp_path_factory):
    """A copier of an empty SQLite store as MLflow's client makes it (its tables by MLflow's migrations, ~2 CPU-s
    each time): `empty_sqlite(path)` puts a copy at `path` and returns its tracking URI."""
    template = tmp_path_factory.mktemp("mlflow-empty") / "mlflow.db"
    _client(f"sqlite:///{template}").search_experiments()

    def copy(path):
        shutil.copy(template, path)
        return f"sqlite:///{path}"

    return copy


@pytest.fixture(scope="module")
def stores(tmp_path_factory, empty_sqlite):
    root = tmp_path_factory.mktemp("mlflow")
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3.17+ writes a file store only when asked
    try:
        file_ids = _write_store((root / "mlruns").as_uri())
        (root / "sql").mkdir()
        sql_ids = _write_store(empty_sqlite(root / "sql" / "mlflow.db"))
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before
    return root, file_ids, sql_ids


def _check_against_client(ref, uri: str, run_id: str) -> None:
    source = reader.open_source(ref, live=False)
    events = drain(source)
    assert source.problems == []
    assert isinstance(events[0], RunStarted)
    assert events[0].config == {"lr": 0.01, "optimizer": "adam"}
    got = _series(events)
    client = _client(uri)
    for key in ("train/loss", "val_accuracy", "epoch_time", "grad_norm"):
        history = client.get_metric_history(run_id, key)
        split, name = split_name(key)
        xs, ys = got[(split, "step", name)]
        values = [m.value for m in sorted(history, key=lambda m: (m.step, m.timestamp))]
        assert len(ys) == len(values) and all(
            (math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(ys, values)
        ), key
        if key == "epoch_time":
            assert xs == [0.0, 1.0, 2.0]  # logged with no step: placed in order
        else:
            assert xs == [float(m.step) for m in sorted(history, key=lambda m: (m.step, m.timestamp))]
    assert ("train", "step", "loss") in got and ("valid", "step", "accuracy") in got
    return events


@pytest.mark.parametrize("store", ["file", "sqlite"])
def test_runs_read_as_mlflow_reads_them(stores, store):
    root, file_ids, sql_ids = stores
    where = root / "mlruns" if store == "file" else root / "sql" / "mlflow.db"
    uri = where.as_uri() if store == "file" else f"sqlite:///{where}"
    ids = file_ids if store == "file" else sql_ids
    mine = reader.find_runs(where if store == "file" else where.parent)
    assert sorted(r.name for r in mine) == ["text models/gpt", "vision/baseline", "vision/wide"]  # not the deleted
    assert all((r.key != "") == (store == "sqlite") for r in mine)
    assert reader.find_runs(where) == mine
    both = reader.find_runs(root)  # the two stores under one folder: six runs, told apart by their ids
    assert len(both) == 6 and len({r.name for r in both}) == 6
    for ref in mine:
        run_name = ref.name.split("/")[1]
        events = _check_against_client(ref, uri, ids[run_name])
        end = events[-1]
        if run_name == "wide":
            assert isinstance(end, RunFailed)
        else:
            assert isinstance(end, RunFinished)
            assert end.status == ("interrupted" if run_name == "gpt" else "completed")
            assert end.step == 19
        assert not reader.is_live(ref)
    if store == "file":  # a run folder on its own, and its meta.yaml
        run_dir = next(r.path for r in mine if r.name == "vision/baseline")
        assert [r.name for r in reader.find_runs(run_dir)] == ["vision/baseline"]
        assert [r.path for r in reader.find_runs(run_dir / "meta.yaml")] == [run_dir]


@pytest.mark.parametrize("store", ["file", "sqlite"])
def test_a_running_run_followed_live_then_ended(tmp_path, store, monkeypatch, empty_sqlite):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri() if store == "file" else empty_sqlite(tmp_path / "mlflow.db")
    client = _client(uri)
    run = client.create_run(client.create_experiment("live"), run_name="running")
    rid = run.info.run_id
    client.log_metric(rid, "loss", 1.0, step=0)
    (ref,) = reader.find_runs(tmp_path)
    assert reader.is_live(ref)
    source = reader.open_source(ref)
    assert source.live
    seen: list = []
    source.open(lambda e, s=None: seen.append(e))
    thread = threading.Thread(target=source.work, daemon=True)
    thread.start()

    def wait(test) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            if test():
                return time.monotonic() - t0
            time.sleep(0.02)
        raise AssertionError(f"never came: {seen}")

    try:
        wait(lambda: 0.0 in _series(list(seen)).get(("train", "step", "loss"), ([], []))[0])
        for step in (1, 2):
            client.log_metric(rid, "loss", 1.0 / (step + 1), step=step)
            at = float(step)
            assert wait(lambda at=at: at in _series(list(seen)).get(("train", "step", "loss"), ([], []))[0]) < 2.0
        client.set_terminated(rid, "FINISHED")
        wait(lambda: any(isinstance(e, RunFinished) for e in seen))
    finally:
        source.close()
        thread.join(timeout=5)
    assert _series(seen)[("train", "step", "loss")] == ([0.0, 1.0, 2.0], [1.0, 0.5, 1 / 3])
    assert not source.live and not reader.is_live(ref)
    assert source.problems == []


def test_a_cut_metrics_file_and_hostile_names(stores, tmp_path):
    root, _, _ = stores
    (ref,) = [r for r in reader.find_runs(root / "mlruns") if r.name == "vision/baseline"]
    run = tmp_path / "exp" / ref.path.name
    shutil.copytree(ref.path.parent, tmp_path / "exp", dirs_exist_ok=True)
    loss = run / "metrics" / "train" / "loss"
    raw = loss.read_bytes()
    loss.write_bytes(raw[: len(raw) - 6])  # the last line cut in its middle
    hostile = "\x1b[31mred\x1b]0;title\x07" + "n" * 200 + "/" + "m" * 200  # a file name has 255 bytes at most
    (run / "metrics" / hostile).parent.mkdir()
    (run / "metrics" / hostile).write_text("1795868054652 2.5 7\nnot a line\n")
    (ref2,) = reader.find_runs(run)
    source = reader.open_source(ref2, live=False)
    got = _series(drain(source))
    assert len(got[("train", "step", "loss")][0]) == 19  # 20 logged, the cut one skipped
    assert got[("train", "step", hostile)] == ([7.0], [2.5])
    assert len(source.problems) == 2, source.problems
    assert any("a cut last line" in p and "loss" in p for p in source.problems)
    assert any("1 damaged line skipped" in p for p in source.problems)


def test_a_locked_and_a_half_written_database(stores, tmp_path):
    root, _, sql_ids = stores
    db = tmp_path / "mlflow.db"
    shutil.copy(root / "sql" / "mlflow.db", db)
    refs = {r.name: r for r in reader.find_runs(db)}
    ref = refs["vision/baseline"]
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # a writer in the middle of a transaction
    try:
        source = reader.open_source(ref, live=True)
        seen: list = []
        source.open(lambda e, s=None: seen.append(e))
        thread = threading.Thread(target=source.work, daemon=True)
        thread.start()
        t0 = time.monotonic()
        while not source.problems and time.monotonic() - t0 < 5:
            time.sleep(0.02)
        assert len(source.problems) == 1 and "locked by its writer" in source.problems[0]
        assert not any(isinstance(e, ForeignBlock) for e in seen)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    try:
        t0 = time.monotonic()
        while ("train", "step", "loss") not in _series(list(seen)) and time.monotonic() - t0 < 5:
            time.sleep(0.02)
        assert len(_series(list(seen))[("train", "step", "loss")][0]) == 20  # read once the writer let go
        assert source.problems == []  # the lock went away: so does its line
    finally:
        source.close()
        thread.join(timeout=5)

    raw = db.read_bytes()
    for keep in (len(raw) // 2, 100, 5000):
        half = tmp_path / f"half{keep}.db"
        half.write_bytes(raw[:keep])
        refs = reader.find_runs(half)  # a database cut short may still list its runs, or none
        for ref in refs or [RunRef("mlflow", half, "?", sql_ids["baseline"])]:
            source = reader.open_source(ref, live=False)
            drain(source)  # never raises
            assert len(source.problems) == 1 or (refs and not source.problems), source.problems
    assert {"vision/baseline", "vision/wide", "text models/gpt"} <= {r.name for r in reader.find_runs(tmp_path)}

    conn = sqlite3.connect(db)
    hostile = "\x1b[2J" + "k" * 300
    conn.execute(
        "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) VALUES (?, 3.5, 1, ?, 4, 0)",
        (hostile, sql_ids["baseline"]),
    )
    conn.commit()
    conn.close()
    (ref,) = [r for r in reader.find_runs(db) if r.name == "vision/baseline"]
    source = reader.open_source(ref, live=False)
    assert _series(drain(source))[("train", "step", hostile)] == ([4.0], [3.5])
