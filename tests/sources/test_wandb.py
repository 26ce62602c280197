"""W&B offline runs read back (tuitrain/sources/wandb.py) from .wandb files wandb itself wrote (in its own
process, WANDB_MODE=offline), values compared with what the script logged (wandb 0.31 has no reader of
its own files); records across 32 KiB blocks; a run followed live; a flipped byte and a torn last record;
no wandb installed; hostile names; `latest-run` not a second run."""

from __future__ import annotations

import json
import importlib.util
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tuitrain.core.events import HistogramLogged, MediaLogged, RunFinished, RunStarted
from tuitrain.sources import wandb as reader
from tuitrain.sources.polled import ForeignBlock, drain, split_name

if importlib.util.find_spec("wandb") is None:  # (imported by the tests that run, not at collection: ~2 s)
    pytest.skip("wandb is not installed (pip install tuitrain[wandb])", allow_module_level=True)

# one process writes the runs NAME:STEPS:SIZE in turn, as a script that trains twice does (wandb's import is most of
# a writer's CPU); each run starts in a later second than the one before, so that their folders
# (offline-run-YYYYMMDD_HHMMSS-ID) sort in the order they were written, as when each had a process of its own
WRITE = """
import json, math, sys, time
import numpy as np
import wandb
pause = float(sys.argv[1])
for i, spec in enumerate(sys.argv[2:]):
    name, steps, big = spec.split(":")
    steps, big = int(steps), big == "big"
    if i:
        time.sleep(1.05 - time.time() % 1)
    config = {"lr": 0.01, "layers": [64, 64], "optimizer": {"name": "adam", "betas": [0.9, 0.99]}}
    if big:
        config["notes"] = "x" * 70000  # a run record longer than two 32 KiB blocks: FIRST, MIDDLE, LAST
    run = wandb.init(project="vision", name=name, config=config)
    logged = []
    for step in range(steps):
        row = {"train/loss": 1.0 / (step + 1), "nested": {"grad_norm": step * 0.5}, "lr": 0.01 * 0.99 ** step}
        if step % 5 == 4:
            row["val/accuracy"] = step / 20
        if step == 3:
            row["nan_metric"] = float("nan")
            row["hostile\\x1b[31m" + "n" * 300] = 7.5
        if step == 2 and not big:
            row["picture"] = wandb.Image(np.full((8, 12, 3), 200, dtype=np.uint8))
            row["weights"] = wandb.Histogram(np.arange(100.0), num_bins=10)
        wandb.log(row)
        logged.append({k: v for k, v in row.items() if isinstance(v, (int, float, dict)) and not isinstance(v, bool)})
        print(json.dumps({"step": step, "time": time.time()}), flush=True)
        time.sleep(pause)
    run.finish()
    print(json.dumps({"name": name, "logged": logged, "dir": run.dir}), flush=True)
"""


def _write(root: Path, *runs: tuple[str, int, bool], pause: float = 0.0, out=subprocess.PIPE):
    """wandb writing `runs` ((name, steps, big) each) in one process of its own, one after the other."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(root), "WANDB_SILENT": "true"}
    specs = [f"{name}:{steps}:{'big' if big else 'small'}" for name, steps, big in runs]
    args = [sys.executable, "-c", WRITE, str(pause), *specs]
    return subprocess.Popen(args, env=env, cwd=root, stdout=out, stderr=subprocess.DEVNULL, text=True)


def _series(events) -> dict:
    out: dict = {}
    for e in events:
        if isinstance(e, ForeignBlock):
            for key, (xs, ys) in e.series.items():
                got = out.setdefault(key, ([], []))
                got[0].extend(xs.tolist())
                got[1].extend(ys.tolist())
    return out


def _expected(logged: list[dict]) -> dict:
    out: dict = {}

    def add(step, name, value):
        if isinstance(value, dict):
            for k, v in value.items():
                add(step, f"{name}/{k}", v)
            return
        split, short = split_name(name)
        xs, ys = out.setdefault((split, "step", short), ([], []))
        xs.append(float(step))
        ys.append(float(value))

    for step, row in enumerate(logged):
        for name, value in row.items():
            add(step, name, value)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb")
    # the big run: 600 steps, a .wandb file of ~12 blocks (the damage tests cut it in its 6th and 7th)
    writer = _write(root, ("small", 40, False), ("big", 600, True))
    out, _ = writer.communicate(timeout=300)
    assert writer.returncode == 0
    ended = [json.loads(line) for line in out.splitlines() if line.startswith('{"name"')]
    logged = {run["name"]: run["logged"] for run in ended}
    assert sorted(logged) == ["big", "small"]
    return root, logged


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b))


def test_runs_read_as_they_were_logged(runs):
    root, logged = runs
    refs = reader.find_runs(root)
    assert len(refs) == 2 and all(r.name.startswith("wandb/offline-run-") for r in refs)  # latest-run: no third
    latest = reader.find_runs(root / "wandb" / "latest-run")
    assert [r.path for r in latest] == [refs[-1].path]
    for ref in refs:
        source = reader.open_source(ref, live=False)
        events = drain(source)
        assert source.problems == [], source.problems
        started = events[0]
        assert isinstance(started, RunStarted)
        name = started.experiment
        assert started.config["lr"] == 0.01 and started.config["optimizer"] == {"name": "adam", "betas": [0.9, 0.99]}
        assert started.env["project"] == "vision"
        got, expected = _series(events), _expected(logged[name])
        assert set(got) == set(expected)
        for key, (xs, ys) in expected.items():
            assert got[key][0] == xs and _equal(got[key][1], ys), key
        assert isinstance(events[-1], RunFinished) and events[-1].step == len(logged[name]) - 1
        if name == "big":
            assert len(started.config["notes"]) == 70000  # one record over three blocks
            assert (ref.path / ref.info["file"]).stat().st_size > 4 * reader.BLOCK
        else:
            (picture,) = [e for e in events if isinstance(e, MediaLogged)]
            assert picture.key == "picture" and picture.step == 2 and (picture.width, picture.height) == (12, 8)
            assert Path(picture.path).is_file() and Path(picture.path).read_bytes()[:4] == b"\x89PNG"
            (hist,) = [e for e in events if isinstance(e, HistogramLogged)]
            assert hist.key == "weights" and sum(hist.counts) == 100 and (hist.low, hist.high) == (0.0, 99.0)


def test_a_flipped_byte_and_a_torn_last_record(runs, tmp_path):
    root, logged = runs
    big = next(r for r in reader.find_runs(root) if "notes" in drain(reader.open_source(r, live=False))[0].config)
    raw = (big.path / big.info["file"]).read_bytes()
    whole = _series(drain(reader.open_source(big, live=False)))[("train", "step", "loss")][0]
    run = tmp_path / "wandb" / "offline-run-20261128_000000-flipped"
    run.mkdir(parents=True)
    flipped = bytearray(raw)
    at = 6 * reader.BLOCK + 1000  # inside a history record of the 7th block
    flipped[at] ^= 0x40
    (run / big.info["file"]).write_bytes(bytes(flipped))
    source = reader.open_source(reader.find_runs(run)[0], live=False)
    got = _series(drain(source))[("train", "step", "loss")][0]
    assert len(source.problems) == 1 and "1 damaged record skipped" in source.problems[0], source.problems
    assert f"byte {6 * reader.BLOCK:,}" in source.problems[0] or "byte 19" in source.problems[0]
    missing = sorted(set(whole) - set(got))
    per_block = len(whole) * reader.BLOCK / len(raw)  # steps a block holds, about
    assert 0 < len(missing) < 2 * per_block  # the rest of one block: the steps after it are read
    assert missing == [float(s) for s in range(int(missing[0]), int(missing[-1]) + 1)]
    assert max(got) == max(whole)

    torn = tmp_path / "torn" / "offline-run-20261128_000000-torn"
    torn.mkdir(parents=True)
    (torn / big.info["file"]).write_bytes(raw[: 5 * reader.BLOCK + 500])
    source = reader.open_source(reader.find_runs(torn)[0], live=False)
    events = drain(source)
    assert len(source.problems) == 1 and "a torn last record at byte" in source.problems[0], source.problems
    assert 0 < len(_series(events)[("train", "step", "loss")][0]) < len(whole)
    assert not any(isinstance(e, RunFinished) for e in events)

    (torn / big.info["file"]).write_bytes(b"PK\x03\x04 not a wandb file at all")
    source = reader.open_source(reader.find_runs(torn)[0], live=False)
    assert [type(e) for e in drain(source)] == [RunStarted]
    assert source.problems == [f"{torn / big.info['file']}: not a W&B run file (its first bytes are not :W&B)"]


def test_without_wandb_one_line_names_the_extra(runs, monkeypatch):
    root, _ = runs
    monkeypatch.setattr(reader, "record_class", lambda: None)
    source = reader.open_source(reader.find_runs(root)[0], live=False)
    events = drain(source)
    assert [type(e) for e in events] == [RunStarted]
    assert source.problems == ["W&B runs are read with wandb's record classes: pip install tuitrain[wandb]"]


def _steps_in(path: Path) -> set[float]:
    """The steps of the history rows a .wandb file holds now (decoded on their own, for the timing)."""
    chunks, record = reader.Chunks(path.name), reader.record_class()
    steps = set()
    for _, raw in chunks.feed(path.read_bytes()):
        rec = record.FromString(raw)
        if rec.WhichOneof("record_type") == "history":
            steps.add(float(rec.history.step.num))
    return steps


def test_a_run_followed_live_within_two_seconds_of_its_flush(tmp_path):
    """wandb 0.31 writes its .wandb file a 32 KiB block at a time: each new block's values are handed on
    within 2 s of the block reaching the file, while the writer is still logging."""
    writer = _write(tmp_path, ("live", 900, False), pause=0.01, out=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while not reader.find_runs(tmp_path) and time.monotonic() - t0 < 60:
            time.sleep(0.05)
        (ref,) = reader.find_runs(tmp_path)
        path = ref.path / ref.info["file"]
        assert reader.is_live(ref)
        source = reader.open_source(ref)
        arrived: dict[float, float] = {}

        def emit(event, state=None):
            for x in _series([event]).get(("train", "step", "loss"), ([], []))[0]:
                arrived.setdefault(x, time.monotonic())

        source.open(emit)
        thread = threading.Thread(target=source.work, daemon=True)
        thread.start()
        on_disk: dict[float, float] = {}  # when each step's row was in the file, seen from here
        size = 0
        while writer.poll() is None and time.monotonic() - t0 < 120:
            if path.stat().st_size != size:
                size = path.stat().st_size
                now = time.monotonic()
                for step in _steps_in(path):
                    on_disk.setdefault(step, now)
            time.sleep(0.02)
        ended = time.monotonic()
        while not source._ended and time.monotonic() - ended < 5:
            time.sleep(0.05)
        source.close()
        thread.join(timeout=5)
    finally:
        writer.kill()
        writer.wait()
    assert sorted(arrived) == [float(s) for s in range(900)]
    assert sum(1 for t in arrived.values() if t < ended) > 100  # followed while written, not read at the end
    late = {s: round(arrived[s] - t, 2) for s, t in on_disk.items() if arrived[s] - t > 2.0}
    assert not late, late
    assert not source.live and source.problems == []
