"""Checkpoints that survive anything: atomic writes, failed writes, leftovers of a killed writer,
and checkpoints that would run code (refused, never executed)."""

from __future__ import annotations

import json
import os
import pickle
import sys

import pytest
import torch

from tuitrain.core import fsutil
from tuitrain.core.checkpoint import (
    FORMAT,
    INDEX,
    CheckpointError,
    Checkpointer,
    latest_checkpoint,
    load_checkpoint,
    read_index,
)
from tuitrain.core.events import CheckpointFailed, CheckpointSaved


def state(v: float = 1.0) -> dict:
    return {"format": FORMAT, "version": 1, "model": {"w": torch.full((3,), v)}, "epoch": 1, "step": 1}


def leftovers(folder) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(fsutil.TMP_PREFIX)]


# --- fsutil.atomic_write ----------------------------------------------------------------------


def test_atomic_write_replaces_the_file(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("old")
    size = fsutil.atomic_write_text(p, "new content")
    assert p.read_text() == "new content"
    assert size == len("new content")
    assert leftovers(tmp_path) == []


def test_atomic_write_with_failing_replace_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    p = tmp_path / "index.json"
    p.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "replace", broken_replace)
    with pytest.raises(OSError):
        fsutil.atomic_write_text(p, "new")
    assert p.read_text() == "old"
    assert leftovers(tmp_path) == []
    assert sorted(x.name for x in tmp_path.iterdir()) == ["index.json"]


def test_atomic_write_with_failing_writer_keeps_the_old_file_and_no_temp(tmp_path):
    p = tmp_path / "model.pt"
    p.write_bytes(b"old bytes")

    def half_then_fail(f):
        f.write(b"half of the n")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        fsutil.atomic_write(p, half_then_fail)
    assert p.read_bytes() == b"old bytes"
    assert leftovers(tmp_path) == []


def test_atomic_write_of_a_new_file_that_fails_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(fsutil.os, "replace", lambda s, d: (_ for _ in ()).throw(OSError("nope")))
    with pytest.raises(OSError):
        fsutil.atomic_write_text(tmp_path / "new.txt", "x")
    assert list(tmp_path.iterdir()) == []


def test_remove_leftovers_removes_only_temporary_files(tmp_path):
    (tmp_path / ".tmp-a.pt.123").write_bytes(b"x")
    (tmp_path / "keep.pt").write_bytes(b"x")
    removed = fsutil.remove_leftovers(tmp_path)
    assert [p.name for p in removed] == [".tmp-a.pt.123"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pt"]


# --- Checkpointer -----------------------------------------------------------------------------


def test_checkpointer_saves_lists_and_reports(tmp_path):
    ck = Checkpointer(tmp_path / "checkpoint", keep_last=2, keep_best=0, background=True)
    ck.prepare()
    ck.save(state(1.0), epoch=1, step=5, metrics={"train/loss": 0.5}, reason="step")
    ck.wait()
    events = ck.take_events()
    assert [type(e) for e in events] == [CheckpointSaved]
    saved = events[0]
    assert saved.file == "checkpoint/epoch-0001-step-00000005.pt" and saved.reason == "step"
    index = json.loads((tmp_path / "checkpoint" / INDEX).read_text())
    assert [r["file"] for r in index] == ["epoch-0001-step-00000005.pt"]
    assert index[0]["bytes"] == (tmp_path / "checkpoint" / index[0]["file"]).stat().st_size
    assert ck.take_events() == []


def test_checkpointer_retention_deletes_files_and_index_rows(tmp_path):
    folder = tmp_path / "checkpoint"
    ck = Checkpointer(folder, keep_last=2, keep_best=1, monitor="valid/loss", mode="min", background=False)
    ck.prepare()
    for step, loss in [(1, 0.1), (2, 0.9), (3, 0.8), (4, 0.7)]:
        ck.save(state(step), epoch=step, step=step, metrics={"valid/loss": loss}, reason="epoch")
    listed = [e.file for e in read_index(folder)]
    on_disk = sorted(p.name for p in folder.glob("*.pt"))
    assert listed == ["epoch-0001-step-00000001.pt", "epoch-0003-step-00000003.pt", "epoch-0004-step-00000004.pt"]
    assert on_disk == sorted(listed)
    best = [e.file for e in read_index(folder) if e.best]
    assert best == ["epoch-0001-step-00000001.pt"]


def test_failing_save_reports_checkpoint_failed_and_leaves_the_index_alone(tmp_path):
    folder = tmp_path / "checkpoint"
    ck = Checkpointer(folder, keep_last=2, background=True)
    ck.prepare()
    ck.save(state(1.0), epoch=1, step=1, metrics={}, reason="epoch")
    ck.wait()
    ck.take_events()
    index_before = (folder / INDEX).read_bytes()
    files_before = sorted(p.name for p in folder.iterdir())

    def disk_full(obj, f):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    ck.save_fn = disk_full
    ck.save(state(2.0), epoch=2, step=2, metrics={}, reason="request")
    ck.wait()
    events = ck.take_events()
    assert len(events) == 1 and isinstance(events[0], CheckpointFailed)
    failed = events[0]
    assert failed.step == 2 and failed.reason == "request"
    assert "No space left" in failed.error
    assert (folder / INDEX).read_bytes() == index_before
    assert sorted(p.name for p in folder.iterdir()) == files_before
    assert ck.last_error
    # the next good save works and clears the error
    ck.save_fn = torch.save
    ck.save(state(3.0), epoch=3, step=3, metrics={}, reason="epoch")
    ck.wait()
    assert [type(e) for e in ck.take_events()][0] is CheckpointSaved
    assert ck.last_error == ""
    assert latest_checkpoint(folder).name == "epoch-0003-step-00000003.pt"


def test_prepare_removes_tmp_leftovers_and_unindexed_files(tmp_path):
    folder = tmp_path / "checkpoint"
    ck = Checkpointer(folder, keep_last=5, background=False)
    ck.prepare()
    ck.save(state(1.0), epoch=1, step=1, metrics={}, reason="epoch")
    good = folder / "epoch-0001-step-00000001.pt"
    # what a writer killed at various moments leaves behind
    (folder / ".tmp-epoch-0001-step-00000002.pt.abc123").write_bytes(b"torn")
    (folder / ".tmp-index.json.xyz").write_bytes(b"[{")
    orphan = folder / "epoch-0001-step-00000002.pt"
    torch.save(state(2.0), orphan)  # complete but never indexed: the process died in between

    fresh = Checkpointer(folder, keep_last=5, background=False)
    removed = sorted(p.name for p in fresh.prepare())
    assert removed == sorted(
        [".tmp-epoch-0001-step-00000002.pt.abc123", ".tmp-index.json.xyz", "epoch-0001-step-00000002.pt"]
    )
    assert sorted(p.name for p in folder.iterdir()) == sorted([INDEX, good.name])
    assert latest_checkpoint(folder) == good


def test_prepare_drops_index_rows_whose_file_vanished(tmp_path):
    folder = tmp_path / "checkpoint"
    ck = Checkpointer(folder, keep_last=5, background=False)
    ck.prepare()
    for step in (1, 2):
        ck.save(state(step), epoch=1, step=step, metrics={}, reason="step")
    (folder / "epoch-0001-step-00000002.pt").unlink()
    Checkpointer(folder, keep_last=5, background=False).prepare()
    assert [e.file for e in read_index(folder)] == ["epoch-0001-step-00000001.pt"]
    assert latest_checkpoint(folder).name == "epoch-0001-step-00000001.pt"


def test_index_lists_only_complete_files_while_a_write_is_running(tmp_path):
    """While the writer is inside torch.save the index must not list the file being written."""
    import threading

    folder = tmp_path / "checkpoint"
    ck = Checkpointer(folder, keep_last=5, background=True)
    ck.prepare()
    ck.save(state(1.0), epoch=1, step=1, metrics={}, reason="epoch")
    ck.wait()
    inside, release = threading.Event(), threading.Event()

    def slow_save(obj, f):
        inside.set()
        assert release.wait(60)
        torch.save(obj, f)

    ck.save_fn = slow_save
    ck.save(state(2.0), epoch=1, step=2, metrics={}, reason="step")
    assert inside.wait(60)
    try:
        listed = [e.file for e in read_index(folder)]
        assert listed == ["epoch-0001-step-00000001.pt"]
        assert not (folder / "epoch-0001-step-00000002.pt").exists()
        assert latest_checkpoint(folder).name == "epoch-0001-step-00000001.pt"
    finally:
        release.set()
        ck.wait()
    listed = [e.file for e in read_index(folder)]
    assert listed == ["epoch-0001-step-00000001.pt", "epoch-0001-step-00000002.pt"]
    for name in listed:
        assert load_checkpoint(folder / name)["format"] == FORMAT


def test_latest_checkpoint_ignores_unlisted_and_missing(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    assert latest_checkpoint(folder) is None
    torch.save(state(), folder / "epoch-0009-step-00000099.pt")  # not listed
    (folder / INDEX).write_text(
        json.dumps(
            [
                {"file": "epoch-0001-step-00000003.pt", "epoch": 1, "step": 3},
                {"file": "gone.pt", "epoch": 2, "step": 10},
            ]
        )
    )
    assert latest_checkpoint(folder) is None
    torch.save(state(), folder / "epoch-0001-step-00000003.pt")
    assert latest_checkpoint(folder).name == "epoch-0001-step-00000003.pt"


def test_torn_index_reads_as_empty(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / INDEX).write_text('[{"file": "a.pt", "ep')
    assert read_index(folder) == []
    assert latest_checkpoint(folder) is None


# --- loading: weights only, never code ---------------------------------------------------------


class Hostile:
    """Unpickling this runs a shell command that creates `marker`."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def write_hostile(path, marker) -> None:
    torch.save({"format": FORMAT, "model": {}, "payload": Hostile(marker)}, path)


def test_hostile_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "hostile.pt"
    write_hostile(bad, marker)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(bad)
    assert "weights_only" in str(info.value) or "refused" in str(info.value)
    assert not marker.exists()


def test_the_hostile_file_really_is_hostile(tmp_path):
    """The fixture is meaningful: an unsafe load does run its code (so the test above can fail)."""
    marker = tmp_path / "pwned"
    bad = tmp_path / "hostile.pt"
    write_hostile(bad, marker)
    torch.load(bad, weights_only=False)
    assert marker.exists()


def test_load_checkpoint_refuses_foreign_and_torn_files(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "bare.pt")
    with pytest.raises(CheckpointError, match="not a tuitrain checkpoint"):
        load_checkpoint(tmp_path / "bare.pt")
    torch.save(state(), tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    (tmp_path / "torn.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "torn.pt")
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "missing.pt")
    assert load_checkpoint(tmp_path / "good.pt")["step"] == 1


def test_cli_resume_from_hostile_checkpoint_exits_2_without_running_it(tiny):
    marker = tiny.root / "pwned"
    bad = tiny.root / "hostile.pt"
    write_hostile(bad, marker)
    r = tiny.cli("run", tiny.config, "--headless", "--resume", bad)
    assert r.returncode == 2, r.stderr
    assert "hostile.pt" in r.stderr
    assert "weights_only" in r.stderr or "refused" in r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert not marker.exists()
    assert tiny.run_dirs() == []
    assert sorted(p.name for p in tiny.root.iterdir()) == sorted(
        ["empty.tcss", "tinyproj.py", "tiny.toml", "hostile.pt"]
        + (["__pycache__"] if (tiny.root / "__pycache__").exists() else [])
    )


@pytest.fixture(scope="module")
def hostile_init_from(make_tiny):
    """A run whose config names a hostile file as `checkpoint.init_from`."""
    tiny = make_tiny("initfrom")
    marker = tiny.root / "pwned"
    bad = tiny.root / "hostile.pt"
    write_hostile(bad, marker)
    r = tiny.cli("run", tiny.config, "--headless", "--set", f"checkpoint.init_from={bad.as_posix()}")
    return tiny, r, marker


def test_cli_init_from_hostile_file_runs_no_code(hostile_init_from):
    tiny, r, marker = hostile_init_from
    assert r.returncode in (1, 2), r.stdout + r.stderr
    assert "hostile.pt" in r.stderr
    assert "Traceback" not in r.stderr
    assert not marker.exists()


def test_cli_init_from_hostile_file_is_a_config_error(hostile_init_from):
    tiny, r, _ = hostile_init_from
    assert r.returncode == 2
    assert tiny.run_dirs() == []


def test_fit_resume_from_an_unlisted_file_in_the_checkpoint_folder(tmp_path):
    import shutil

    from torch import nn
    from torch.utils.data import TensorDataset

    from tuitrain.core.learner import CoreLearner

    folder = tmp_path / "checkpoint"
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=g), torch.randint(0, 3, (64,), generator=g))

    def learner():
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        return CoreLearner(
            model,
            torch.optim.SGD(model.parameters(), lr=0.1),
            loss_fn=nn.CrossEntropyLoss(),
            epochs=2,
            device="cpu",
            batch_size=16,
            checkpoint=Checkpointer(folder),
        )

    assert learner().fit(data).status == "completed"
    mine = folder / "my-copy.pt"
    shutil.copy(latest_checkpoint(folder), mine)
    result = learner().fit(data, resume=mine)
    assert mine.exists(), "a resume must never delete the file it resumes from"
    assert result.status == "completed", result.error


def test_snapshot_copies_into_the_last_snapshot_and_each_file_holds_its_own_step(tmp_path):
    """The loop's copy reuses the previous checkpoint's CPU tensors (no fresh, page-faulting memory),
    yet every file written in the background holds the state of its own step."""
    from collections import OrderedDict

    import torch

    from tuitrain.core.checkpoint import snapshot

    live = {
        "model": OrderedDict(w=torch.ones(3, 4)),
        "optimizers": [{"m": torch.zeros(2)}],
        "step": 1,
        "rng": (torch.arange(3, dtype=torch.uint8),),
    }
    first = snapshot(live)
    assert first["model"]["w"].data_ptr() != live["model"]["w"].data_ptr()  # a copy, not a view
    live["model"]["w"].add_(1)
    live["optimizers"][0]["m"] = torch.zeros(5)  # a new shape cannot reuse: allocated
    second = snapshot(live, first)
    assert second["model"]["w"].data_ptr() == first["model"]["w"].data_ptr()
    assert second["rng"][0].data_ptr() == first["rng"][0].data_ptr() and isinstance(second["rng"], tuple)
    assert torch.equal(second["model"]["w"], torch.full((3, 4), 2.0))
    assert second["optimizers"][0]["m"].shape == (5,)

    # through the learner: checkpoints every step, each file with its own weights
    import torch.nn as nn
    from torch.utils.data import TensorDataset

    from tuitrain.core.checkpoint import Checkpointer
    from tuitrain.core.learner import CoreLearner

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    g = torch.Generator().manual_seed(1)
    ds = TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 1, generator=g))
    weights = {}

    def record(event, state):
        if type(event).__name__ == "StepCompleted":
            weights[event.step] = model.weight.detach().clone()

    ckpt = Checkpointer(tmp_path / "checkpoint", every_n_steps=1, every_n_epochs=0, keep_last=10, keep_best=0)
    learner = CoreLearner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.5),
        loss_fn=nn.MSELoss(),
        callbacks=[record],
        device="cpu",
        batch_size=4,
        epochs=1,
        shuffle=False,
        checkpoint=ckpt,
    )
    assert learner.fit(ds).exit_code == 0
    files = sorted((tmp_path / "checkpoint").glob("epoch-*-step-*.pt"))
    assert len(files) == 6
    for f in files:
        data = torch.load(f, weights_only=True)
        step = int(f.stem.split("-")[-1])
        assert torch.equal(data["model"]["weight"], weights[step]), f.name
