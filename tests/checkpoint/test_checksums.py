"""Checkpoint checksums: every file's sha256 in index.json, written off the training thread; a damaged
file is refused by name (`--resume PATH`: exit 2) or passed over, with a word, for the newest sound one
(`--resume latest`); a checkpoint indexed before hashes still loads."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from tuitrain.core.checkpoint import (
    FORMAT,
    INDEX,
    CheckpointError,
    Checkpointer,
    damaged,
    latest_checkpoint,
    load_checkpoint,
)


def state(v: float) -> dict:
    return {"format": FORMAT, "version": 1, "model": {"w": torch.full((64,), v)}, "epoch": 1, "step": int(v)}


def flip(path, at: int = 400, n: int = 64) -> None:
    """Damage a file the way a bad disk or a careless copy does: bytes changed in place, size kept."""
    data = bytearray(path.read_bytes())
    for i in range(at, min(at + n, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def written(tmp_path, steps=(1, 2, 3)):
    folder = tmp_path / "checkpoint"
    c = Checkpointer(folder, keep_last=5, keep_best=0)
    c.prepare()
    for s in steps:
        c.save(state(float(s)), epoch=1, step=s, metrics={}, reason="step")
        c.wait()
    return folder


def test_every_indexed_file_carries_its_sha256(tmp_path):
    folder = written(tmp_path)
    index = json.loads((folder / INDEX).read_text())
    assert len(index) == 3
    for e in index:
        assert e["sha256"] == hashlib.sha256((folder / e["file"]).read_bytes()).hexdigest()
        assert damaged(folder / e["file"]) == ""


def test_a_damaged_file_is_refused_by_name_and_latest_passes_over_it(tmp_path):
    folder = written(tmp_path)
    newest = latest_checkpoint(folder)
    assert newest is not None and load_checkpoint(newest)["step"] == 3
    flip(newest)
    with pytest.raises(CheckpointError, match=r"epoch-0001-step-00000003\.pt: damaged: its sha256 differs"):
        load_checkpoint(newest)
    passed: list = []
    sound = latest_checkpoint(folder, passed)
    assert sound is not None and load_checkpoint(sound)["step"] == 2
    assert [(p.name, "sha256" in why) for p, why in passed] == [(newest.name, True)]


def test_a_checkpoint_indexed_before_hashes_still_loads(tmp_path):
    folder = written(tmp_path, steps=(1,))
    index = json.loads((folder / INDEX).read_text())
    for e in index:
        del e["sha256"]
    (folder / INDEX).write_text(json.dumps(index))
    path = latest_checkpoint(folder)
    assert path is not None and damaged(path) == "" and load_checkpoint(path)["step"] == 1


def test_resume_refuses_a_damaged_path_and_latest_resumes_from_the_newest_sound_one(tiny):
    run = tiny.root / "runs" / "tiny" / "first"
    r = tiny.cli(
        "run",
        tiny.config,
        "--set",
        "train.epochs=3",
        "--set",
        "checkpoint.keep_last=3",
        "--set",
        "checkpoint.keep_best=0",
        "--run-dir",
        run,
    )
    assert r.returncode == 0, r.stderr
    index = json.loads((run / "checkpoint" / INDEX).read_text())
    assert len(index) == 3 and all(len(e["sha256"]) == 64 for e in index)
    newest = run / "checkpoint" / index[-1]["file"]
    flip(newest)
    r = tiny.cli("run", tiny.config, "--set", "train.epochs=4", "--resume", newest)
    assert r.returncode == 2 and "damaged" in r.stderr and newest.name in r.stderr
    assert "Traceback" not in r.stderr
    r = tiny.cli("run", tiny.config, "--set", "train.epochs=4", "--resume", "latest")
    assert r.returncode == 0, r.stderr
    assert f"passed over {newest}" in r.stderr and "sha256" in r.stderr
    started = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines() if '"RunStarted"' in line]
    assert started[-1]["resumed_from"].endswith(index[-2]["file"])  # the newest sound one
