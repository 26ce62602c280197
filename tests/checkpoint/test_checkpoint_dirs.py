"""Checkpoint directories (strategy "fsdp"), in one process without torch.distributed: the Checkpointer
renames a filled temporary directory into place, indexes it, applies retention to directories, and
tidies what a killed writer left; load_checkpoint reads a directory's state.pt."""

from __future__ import annotations

import pytest
import torch

from tuitrain.core.checkpoint import (
    FORMAT,
    INDEX,
    STATE_FILE,
    CheckpointError,
    Checkpointer,
    check_weights_file,
    latest_checkpoint,
    load_checkpoint,
    read_index,
)
from tuitrain.core.events import CheckpointDeleted, CheckpointFailed, CheckpointSaved


def _save_dir(ck: Checkpointer, epoch: int, step: int, loss: float | None = None, fail: bool = False) -> str:
    """What the ranks and then rank 0 do: shards into temp_dir, then save_dir adds state.pt."""
    name = f"epoch-{epoch:04d}-step-{step:08d}"
    tmp = ck.temp_dir(name)
    tmp.mkdir(parents=True)
    (tmp / "__0_0.distcp").write_bytes(b"shard" * step)

    def finish(d):
        if fail:
            raise OSError(28, "No space left on device")
        torch.save({"format": FORMAT, "version": 1, "epoch": epoch, "step": step}, d / STATE_FILE)

    metrics = {} if loss is None else {"valid/loss": loss}
    ck.save_dir(name, finish, epoch=epoch, step=step, metrics=metrics, reason="epoch")
    return name


def test_save_dir_renames_indexes_and_loads(tmp_path):
    folder = tmp_path / "checkpoint"
    ck = Checkpointer(folder)
    ck.prepare()
    name = _save_dir(ck, 1, 4)
    (saved,) = ck.take_events()
    assert isinstance(saved, CheckpointSaved) and saved.file == f"checkpoint/{name}"
    assert sorted(p.name for p in folder.iterdir()) == sorted([INDEX, name])
    (entry,) = read_index(folder)
    assert entry.file == name and entry.bytes == sum(p.stat().st_size for p in (folder / name).iterdir())
    assert latest_checkpoint(folder) == folder / name
    data = load_checkpoint(folder / name)
    assert data["step"] == 4 and data["sharded_dir"] == str(folder / name)


def test_save_dir_replaces_a_directory_of_the_same_name(tmp_path):
    ck = Checkpointer(tmp_path / "checkpoint")
    ck.prepare()
    name = _save_dir(ck, 1, 4)
    (ck.folder / name / "stale").write_text("from the older one")
    _save_dir(ck, 1, 4)
    assert sorted(p.name for p in (ck.folder / name).iterdir()) == ["__0_0.distcp", STATE_FILE]
    assert [e.file for e in read_index(ck.folder)] == [name]


def test_retention_deletes_directories(tmp_path):
    ck = Checkpointer(tmp_path / "checkpoint", keep_last=1, keep_best=1, monitor="valid/loss")
    ck.prepare()
    names = [_save_dir(ck, e, 4 * e, loss) for e, loss in [(1, 0.1), (2, 0.5), (3, 0.9)]]
    assert [e.file for e in read_index(ck.folder)] == [names[0], names[2]]
    assert sorted(p.name for p in ck.folder.iterdir()) == sorted([INDEX, names[0], names[2]])
    deleted = [e.file for e in ck.take_events() if isinstance(e, CheckpointDeleted)]
    assert deleted == [f"checkpoint/{names[1]}"]


def test_a_failed_save_dir_reports_and_leaves_nothing(tmp_path):
    ck = Checkpointer(tmp_path / "checkpoint")
    ck.prepare()
    good = _save_dir(ck, 1, 4)
    ck.take_events()
    _save_dir(ck, 2, 8, fail=True)
    (failed,) = ck.take_events()
    assert isinstance(failed, CheckpointFailed) and "No space left" in failed.error and ck.last_error
    assert sorted(p.name for p in ck.folder.iterdir()) == sorted([INDEX, good])


def test_prepare_removes_temp_and_unindexed_directories(tmp_path):
    ck = Checkpointer(tmp_path / "checkpoint")
    ck.prepare()
    good = _save_dir(ck, 1, 4)
    gone = _save_dir(ck, 2, 8)
    ck.temp_dir("epoch-0003-step-00000012").mkdir()  # ranks killed while writing shards
    (ck.temp_dir("epoch-0003-step-00000012") / "__1_0.distcp").write_bytes(b"torn")
    orphan = ck.folder / "epoch-0002-step-00000010"  # renamed into place, never indexed
    orphan.mkdir()
    (orphan / STATE_FILE).write_bytes(b"x")
    import shutil

    shutil.rmtree(ck.folder / gone)  # listed, but vanished
    removed = sorted(p.name for p in Checkpointer(ck.folder).prepare())
    assert removed == [".tmp-epoch-0003-step-00000012", orphan.name]
    assert sorted(p.name for p in ck.folder.iterdir()) == sorted([INDEX, good])
    assert [e.file for e in read_index(ck.folder)] == [good]


def test_a_directory_is_a_checkpoint_only_with_its_state_file(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="not a sharded checkpoint"):
        load_checkpoint(tmp_path / "empty")
    ck = Checkpointer(tmp_path / "checkpoint")
    ck.prepare()
    name = _save_dir(ck, 1, 4)
    with pytest.raises(CheckpointError, match="model.pt"):  # init_from wants weights
        check_weights_file(ck.folder / name)
