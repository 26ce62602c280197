"""`tuitrain ls` on other tools' logs (newcomer defects): each run's recorded start (not its files' time, which
a copy changes), the tool's own word on its end where it records one (what `watch` says), its last step
(and a Lightning run's epoch) read from the logs' ends; W&B runs named by their display name, in `ls` and in
the compare view's run list, with their id where two share one."""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import struct
import time
import zlib
from pathlib import Path

import pytest

from tuitrain.run.directories import format_runs, list_runs
from tuitrain.sources import registry
from tuitrain.sources import wandb as wandb_reader
from tuitrain.sources.polled import drain

STEPS = 300  # tests/sources/conftest.py's SummaryWriter run's steps
OLD = 1_600_000_000.0  # a file time long past (a copy's files get the copy's time; here the past's)
START = 1_700_000_000.25  # the start the logs record


def _rows(root: Path) -> dict[str, dict]:
    return {r["name"]: r for r in list_runs(root)}


def _age(folder: Path, when: float = OLD) -> None:
    """Every file and folder under `folder` given the file time `when`."""
    for here, dirs, files in os.walk(folder):
        for name in dirs + files:
            os.utime(Path(here) / name, (when, when))
    os.utime(folder, (when, when))


# W&B: .wandb files of records made with wandb's own classes, framed as wandb frames them (the reader's
# docstring: a header, then 32 KiB blocks of CRC-checked chunks)

needs_wandb = pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")


def _framed(records: list) -> bytes:
    out = bytearray(wandb_reader.HEADER)
    for record in records:
        data, first = record.SerializeToString(), True
        while True:
            left = wandb_reader.BLOCK - len(out) % wandb_reader.BLOCK
            if left < wandb_reader.CHUNK_HEADER:
                out += bytes(left)
                continue
            part, data = data[: left - wandb_reader.CHUNK_HEADER], data[left - wandb_reader.CHUNK_HEADER :]
            kind = (1 if not data else 2) if first else (4 if not data else 3)
            out += struct.pack("<IHB", zlib.crc32(part, zlib.crc32(bytes([kind]))), len(part), kind) + part
            first = False
            if not data:
                break
    return bytes(out)


def _wandb_run(root: Path, run_id: str, name: str, steps: int, exit_code: int | None, stamp: str) -> Path:
    from wandb.proto import wandb_internal_pb2 as pb

    run = pb.RunRecord(run_id=run_id, display_name=name, project="vision")
    run.start_time.seconds, run.start_time.nanos = int(START), 250_000_000
    records = [pb.Record(run=run)]
    for step in range(steps):
        history = pb.HistoryRecord()
        history.step.num = step
        item = history.item.add()
        item.nested_key.extend(["train", "loss"])
        item.value_json = json.dumps(1.0 / (step + 1))
        records.append(pb.Record(history=history))
    if exit_code is not None:
        records.append(pb.Record(exit=pb.RunExitRecord(exit_code=exit_code, runtime=12)))
    folder = root / "wandb" / f"offline-run-{stamp}-{run_id}"
    folder.mkdir(parents=True)
    (folder / f"run-{run_id}.wandb").write_bytes(_framed(records))
    return folder


@needs_wandb
def test_the_wire_fields_read_are_wandbs_own():
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record.DESCRIPTOR.fields_by_name
    assert (record["history"].number, record["run"].number, record["exit"].number) == (
        wandb_reader.RECORD_HISTORY,
        wandb_reader.RECORD_RUN,
        wandb_reader.RECORD_EXIT,
    )
    run = pb.RunRecord.DESCRIPTOR.fields_by_name
    assert (run["run_id"].number, run["display_name"].number, run["start_time"].number) == (1, 8, 17)
    assert pb.RunExitRecord.DESCRIPTOR.fields_by_name["exit_code"].number == wandb_reader.EXIT_CODE
    history = pb.HistoryRecord.DESCRIPTOR.fields_by_name
    assert (history["item"].number, history["step"].number) == (wandb_reader.HISTORY_ITEM, wandb_reader.HISTORY_STEP)
    item = pb.HistoryItem.DESCRIPTOR.fields_by_name
    assert (item["key"].number, item["nested_key"].number, item["value_json"].number) == (1, 2, 16)


@needs_wandb
def test_wandb_runs_named_by_their_display_name_in_ls_and_the_run_list(tmp_path):
    _wandb_run(tmp_path, "znnrsfik", "alpha", 5, 0, "20261129_043802")
    _wandb_run(tmp_path, "1ob1nmxu", "beta", 5, 0, "20261129_043803")
    _wandb_run(tmp_path, "q7w8e9r0", "alpha", 5, 0, "20261129_043804")
    refs = registry.find([tmp_path]).runs
    assert registry.names(refs) == ["alpha (znnrsfik)", "beta", "alpha (q7w8e9r0)"]
    assert sorted(_rows(tmp_path)) == ["alpha (q7w8e9r0) (W&B)", "alpha (znnrsfik) (W&B)", "beta (W&B)"]
    # watching one alone says the same name (the reader's own RunStarted)
    assert drain(registry.open_source(refs[1], live=False))[0].experiment == "beta"


@needs_wandb
def test_wandb_runs_start_end_and_step_as_recorded(tmp_path):
    done = _wandb_run(tmp_path, "aaaaaaaa", "done", 3000, 0, "20261129_043802")  # ~3 blocks of history
    failed = _wandb_run(tmp_path, "bbbbbbbb", "failed", 7, 3, "20261129_043803")
    quiet = _wandb_run(tmp_path, "cccccccc", "quiet", 7, None, "20261129_043804")
    _age(failed)
    _age(quiet)
    rows = _rows(tmp_path)
    # just written, with its exit record: what watch says, never "running"
    assert rows["done (W&B)"]["status"] == "completed"
    assert rows["done (W&B)"]["started"] == pytest.approx(START)
    assert rows["done (W&B)"]["step"] == 2999
    assert (rows["failed (W&B)"]["status"], rows["failed (W&B)"]["step"]) == ("failed", 6)
    assert (rows["quiet (W&B)"]["status"], rows["quiet (W&B)"]["step"]) == ("log ended", 6)
    assert rows["quiet (W&B)"]["started"] == pytest.approx(START)
    events = drain(registry.open_source(registry.find([done]).runs[0], live=False))
    assert events[-1].status == "completed" and events[-1].step == 2999  # what watch says
    assert "done (W&B)" in format_runs(list(rows.values())) and "epoch - step 2999" in format_runs([rows["done (W&B)"]])


# MLflow: a file store's run folders and a SQLite store's tables, in MLflow's layout (tests/sources/test_mlflow.py
# reads stores MLflow's client wrote: the same layout)


def _mlflow_run(store: Path, run_id: str, name: str, status: int, steps: int) -> Path:
    exp = store / "1"
    exp.mkdir(parents=True, exist_ok=True)
    (exp / "meta.yaml").write_text("experiment_id: '1'\nlifecycle_stage: active\nname: vision\n")
    run = exp / run_id
    (run / "metrics" / "val").mkdir(parents=True)
    start_ms = int(START * 1000)
    (run / "meta.yaml").write_text(
        f"end_time: {start_ms + 9000}\nexperiment_id: '1'\nlifecycle_stage: active\nrun_id: {run_id}\n"
        f"run_name: {name}\nstart_time: {start_ms}\nstatus: {status}\nuser_id: me\n"
    )
    lines = "".join(f"{start_ms + s} {1 / (s + 1)} {s}\n" for s in range(steps))
    (run / "metrics" / "train_loss").write_text(lines + f"{start_ms} 0.5 {steps * 10}")  # a cut last line: not read
    (run / "metrics" / "val" / "loss").write_text(f"{start_ms} 0.7 {steps // 2}\n")
    return run


def test_mlflow_file_store_runs_start_end_and_step_as_recorded(tmp_path):
    store = tmp_path / "mlruns"
    _mlflow_run(store, "a" * 32, "finished", 3, 200)
    _mlflow_run(store, "b" * 32, "failed", 4, 20)
    _mlflow_run(store, "c" * 32, "killed", 5, 20)
    _mlflow_run(store, "d" * 32, "quiet", 1, 20)
    _age(store / "1" / ("d" * 32))
    rows = _rows(tmp_path)
    finished = rows["vision/finished (MLflow)"]
    assert (finished["status"], finished["step"], finished["epoch"]) == ("completed", 199, None)
    assert finished["started"] == pytest.approx(START, abs=0.001)  # meta.yaml's, not the files' time
    assert rows["vision/failed (MLflow)"]["status"] == "failed"
    assert rows["vision/killed (MLflow)"]["status"] == "interrupted"
    assert (rows["vision/quiet (MLflow)"]["status"], rows["vision/quiet (MLflow)"]["step"]) == ("log ended", 19)


def test_mlflow_sqlite_store_runs_start_end_and_step_as_recorded(tmp_path):
    db = sqlite3.connect(tmp_path / "mlflow.db")
    db.executescript(
        "CREATE TABLE experiments (experiment_id INTEGER, name TEXT, lifecycle_stage TEXT);"
        "CREATE TABLE runs (run_uuid TEXT, name TEXT, status TEXT, start_time INTEGER, end_time INTEGER,"
        " lifecycle_stage TEXT, experiment_id INTEGER);"
        "CREATE TABLE params (key TEXT, value TEXT, run_uuid TEXT);"
        "CREATE TABLE metrics (key TEXT, value REAL, timestamp INTEGER, step INTEGER, is_nan BOOLEAN, run_uuid TEXT);"
        "CREATE TABLE latest_metrics (key TEXT, value REAL, timestamp INTEGER, step INTEGER, is_nan BOOLEAN,"
        " run_uuid TEXT);"
        "INSERT INTO experiments VALUES (1, 'vision', 'active');"
    )
    start_ms = int(START * 1000)
    for run_id, status in (("r1", "FINISHED"), ("r2", "RUNNING")):
        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, NULL, 'active', 1)", (run_id, run_id, status, start_ms))
        db.executemany(
            "INSERT INTO metrics VALUES ('loss', ?, ?, ?, 0, ?)", [(1.0, start_ms, s, run_id) for s in range(50)]
        )
        db.execute("INSERT INTO latest_metrics VALUES ('loss', 1.0, ?, 49, 0, ?)", (start_ms, run_id))
    db.commit()
    db.close()
    _age(tmp_path)
    rows = _rows(tmp_path)
    assert (rows["vision/r1 (MLflow)"]["status"], rows["vision/r1 (MLflow)"]["step"]) == ("completed", 49)
    assert rows["vision/r1 (MLflow)"]["started"] == pytest.approx(START, abs=0.001)
    assert rows["vision/r2 (MLflow)"]["status"] == "log ended"  # RUNNING, its writer long gone


# Lightning's CSVLogger: metrics.csv as it writes it (tests/sources/conftest.py's lightning_run is Lightning's own)


def test_lightning_csv_runs_epoch_and_step_from_the_last_line(tmp_path):
    run = tmp_path / "lightning_logs" / "version_0"
    run.mkdir(parents=True)
    rows = [f"{s // 100},{s},{1 / (s + 1)},\n" for s in range(1000)] + ["9,999,,0.25\n"]
    (run / "metrics.csv").write_text("epoch,step,train_loss,val_loss\n" + "".join(rows))
    (run / "hparams.yaml").write_text("lr: 0.1\n")
    os.utime(run / "hparams.yaml", (OLD, OLD))
    os.utime(run / "metrics.csv", (OLD + 60, OLD + 60))
    got = _rows(tmp_path)["lightning_logs/version_0 (Lightning CSVLogger)"]
    assert (got["epoch"], got["step"], got["status"]) == (10, 999, "log ended")  # epochs from 1, as watch says
    assert got["started"] == OLD  # no time recorded: the older file's
    assert "epoch 10 step 999" in format_runs([got])


# trackio: a project's database in trackio's schema (tests/sources/test_trackio.py reads trackio's own)


def test_trackio_runs_found_by_their_ids_and_summed_up_in_two_queries(tmp_path):
    db = sqlite3.connect(tmp_path / "proj.db")
    db.executescript(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, timestamp TEXT NOT NULL,"
        " run_name TEXT NOT NULL, step INTEGER NOT NULL, metrics TEXT NOT NULL, log_id TEXT, space_id TEXT);"
        "CREATE INDEX idx_metrics_run_step ON metrics(run_id, step);"
        "CREATE TABLE configs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, run_name TEXT NOT NULL,"
        " config TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE(run_id));"
    )
    created = "2023-11-14T22:13:20.250000"  # START, in UTC as trackio writes it
    for run_id, name in (("id1", "first"), ("id2", "second")):
        config = json.dumps({"lr": 0.1, "_Created": created})
        db.execute("INSERT INTO configs VALUES (NULL, ?, ?, ?, ?)", (run_id, name, config, created))
        db.executemany(
            "INSERT INTO metrics VALUES (NULL, ?, ?, ?, ?, ?, NULL, NULL)",
            [(run_id, created, name, s, json.dumps({"loss": 1.0})) for s in range(30 if name == "first" else 70)],
        )
    db.execute(  # a run with rows and no config row: listed too, after those with one
        "INSERT INTO metrics VALUES (NULL, 'id0', ?, 'rows only', 4, '{}', NULL, NULL)", (created,)
    )
    db.commit()
    db.close()
    refs = registry.find([tmp_path]).runs
    assert [r.name for r in refs] == ["proj/first", "proj/second", "proj/rows only"]
    rows = _rows(tmp_path)
    assert (rows["proj/first (trackio)"]["step"], rows["proj/second (trackio)"]["step"]) == (29, 69)
    assert rows["proj/rows only (trackio)"]["step"] == 4
    assert rows["proj/first (trackio)"]["started"] == pytest.approx(START)
    assert rows["proj/first (trackio)"]["status"] == "log ended"


# TensorBoard: the suite's SummaryWriter run (tests/sources/conftest.py), copied (a copy's files are new)


def test_tensorboard_runs_start_and_last_step(summarywriter_run, tmp_path):
    import shutil

    run = tmp_path / "torch_run"
    shutil.copytree(summarywriter_run, run)
    _age(run)
    (first,) = [p for p in run.iterdir() if p.name.startswith("events.out.tfevents.")]
    stamp = int(first.name.split(".")[3])  # SummaryWriter names its file by its start
    got = _rows(tmp_path)["torch_run (TensorBoard)"]
    assert stamp - 1 <= got["started"] <= stamp + 60  # the first event's wall_time, not the copy's time
    assert (got["step"], got["status"]) == (STEPS, "log ended")  # its last record is a stray step 1: the largest
    raw = first.read_bytes()
    first.write_bytes(raw[:-3])  # a torn last record: no step rather than a wrong one
    assert _rows(tmp_path)["torch_run (TensorBoard)"]["step"] in (None, STEPS)


def test_a_big_log_is_read_only_at_its_ends(tmp_path, monkeypatch):
    """ls reads a Lightning metrics.csv of 200,000 rows in a few reads of its ends, not its rows."""
    run = tmp_path / "version_0"
    run.mkdir()
    (run / "metrics.csv").write_text("epoch,step,loss\n" + "".join(f"0,{s},1.0\n" for s in range(200_000)))
    read: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def read(self, n=-1):
            data = self.f.read(n)
            read.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

    def counting_open(path, mode="r", *a, **kw):
        f = real_open(path, mode, *a, **kw)
        return Counting(f) if str(path).endswith("metrics.csv") and "b" in mode else f

    from tuitrain.sources import lightning_csv, peek

    monkeypatch.setattr(peek, "open", counting_open, raising=False)
    t0 = time.perf_counter()
    got = lightning_csv.summary(registry.find([run]).runs[0])
    assert got["step"] == 199_999 and sum(read) < 200_000, read
    assert time.perf_counter() - t0 < 1.0
