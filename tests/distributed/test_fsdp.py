"""FSDP (FSDP2 `fully_shard`) through the CLI, as a user runs it: 2 gloo ranks on CPU.

Two module-scoped sets of runs, shared by the tests that read them: one process against two FSDP ranks
with the same global batch (accumulation, clipping and a validation set whose batch counts differ
between ranks), and an FSDP run stopped mid-training, then resumed. The tiny project has 100 training
items: 50 per rank.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys

import pytest
import torch

from tuitrain.core.checkpoint import INDEX, STATE_FILE, CheckpointError, load_checkpoint

FSDP = ("--set", "train.strategy=fsdp", "--set", "train.devices=2")
# accumulation and clipping on DTensor gradients; 33 validation items: 17 and 16 per rank, so with batch
# 4 one rank runs 5 validation batches and the other 4
SAME = (
    "--set",
    "model.dropout=0.0",
    "--set",
    "train.grad_accumulation=2",
    "--set",
    "train.clip_grad_norm=0.5",
    "--set",
    "data.valid_n=33",
    "--set",
    "checkpoint.keep_last=1",
    "--set",
    "checkpoint.keep_best=1",
    "--set",
    'metrics.train=["loss", "accuracy", "grad_norm"]',
)


def _events(run_dir, name: str | None = None) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, filter(None, lines)) if name is None or e["event"] == name]


def _index(run_dir) -> list[dict]:
    return json.loads((run_dir / "checkpoint" / INDEX).read_text())


def _params(run_dir) -> dict:
    return torch.load(run_dir / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def same_batch(make_tiny):
    """(project, one process with batch 8, two FSDP ranks with batch 4 each)."""
    tiny = make_tiny("fsdp-same")
    one = tiny.cli("run", tiny.config, *SAME, "--set", "data.batch_size=8", "--run-dir", tiny.root / "one")
    assert one.returncode == 0, one.stdout + one.stderr
    two = tiny.cli("run", tiny.config, *SAME, *FSDP, "--set", "data.batch_size=4", "--run-dir", tiny.root / "two")
    assert two.returncode == 0, two.stdout + two.stderr
    return tiny, tiny.root / "one", tiny.root / "two"


def test_fsdp_run_writes_sharded_checkpoint_directories(same_batch):
    _, _, run = same_batch
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["step"] == 21  # 13 batches per rank, 2 per step: 7 per epoch
    assert info["env"]["strategy"] == "fsdp" and info["env"]["world_size"] == 2
    assert not (run / "ranks").exists()  # the ranks wrote nothing below Python
    listed = [e["file"] for e in _index(run)]
    # keep_last 1 + keep_best 1: 3 saves, at most 2 kept; the deleted directories are gone
    assert 1 <= len(listed) <= 2 and listed[-1] == "epoch-0003-step-00000021"
    deleted = [e["file"] for e in _events(run, "CheckpointDeleted")]
    assert deleted and all(not (run / f).exists() for f in deleted)
    assert sorted(p.name for p in (run / "checkpoint").iterdir()) == sorted(listed + [INDEX])
    for name in listed:
        folder = run / "checkpoint" / name
        assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", STATE_FILE]
        state = torch.load(folder / STATE_FILE, weights_only=True)
        assert state["sharded"] and state["world_size"] == 2 and len(state["rng_ranks"]) == 2
        assert "model" not in state and "optimizers" not in state
    saved = _events(run, "CheckpointSaved")
    assert [e["file"] for e in saved][-1] == "checkpoint/epoch-0003-step-00000021" and saved[-1]["bytes"] > 0
    assert info["best"]["file"].startswith("checkpoint/epoch-")


def test_model_pt_is_a_full_state_dict_of_the_plain_model(same_batch, forget_tinyproj):
    tiny, _, run = same_batch
    sys.path.insert(0, str(tiny.root))
    try:
        import tinyproj
    finally:
        sys.path.remove(str(tiny.root))
    state = _params(run)
    assert all(type(v) is torch.Tensor for v in state.values())  # gathered: no DTensor
    tinyproj.Net(dropout=0.0).load_state_dict(state, strict=True)


def test_two_fsdp_ranks_match_one_process_with_the_same_global_batch(same_batch):
    _, one, two = same_batch
    a, b = _params(one), _params(two)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-6, rtol=0, msg=lambda m: f"{k}: {m}")
    losses = [
        {
            e["step"]: e["metrics"]["loss"]
            for e in _events(d, "MetricsLogged")
            if e["split"] == "train" and e["scope"] == "step"
        }
        for d in (one, two)
    ]
    assert losses[0].keys() == losses[1].keys() and len(losses[0]) == 21
    assert all(abs(losses[0][s] - losses[1][s]) < 1e-6 for s in losses[0])
    # grad_norm: the norm of the whole gradient before clipping, not of one rank's shard of it
    norms = [
        {
            e["step"]: e["metrics"]["grad_norm"]
            for e in _events(d, "MetricsLogged")
            if e["split"] == "train" and e["scope"] == "step"
        }
        for d in (one, two)
    ]
    assert norms[0].keys() == losses[0].keys() and max(norms[0].values()) > 0.5  # before clipping at 0.5
    assert all(abs(norms[0][s] - norms[1][s]) < 1e-5 * norms[0][s] for s in norms[0]), (norms[0], norms[1])
    # validation split exactly (the rank with fewer batches repeats a forward, uncounted)
    e1, e2 = (_events(d, "EpochCompleted")[-1]["metrics"] for d in (one, two))
    assert e1.keys() == e2.keys() and "valid/loss" in e1
    assert all(abs(e1[k] - e2[k]) < 1e-6 for k in e1)


def test_a_sharded_checkpoint_loads_into_one_process(same_batch):
    """Read with no process group (DCP gathers the shards); the end checkpoint holds model.pt's weights."""
    from tuitrain.core.strategies.sharded import load_shards

    _, _, run = same_batch
    data = load_checkpoint(run / "checkpoint" / "epoch-0003-step-00000021")
    assert data["sharded_dir"].endswith("epoch-0003-step-00000021")
    final = _params(run)
    model = torch.nn.Module()
    model.net = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.0), torch.nn.Linear(16, 3)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    load_shards(model, {"model": opt}, data["sharded_dir"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, final[k]), k
    assert int(opt.state_dict()["state"][0]["step"]) == 21


class _Hostile:
    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


def test_a_hostile_dcp_metadata_is_refused_and_runs_nothing(same_batch, tmp_path):
    """DCP unpickles .metadata with pickle.load; tuitrain reads it through an allow-list."""
    from tuitrain.core.strategies.sharded import load_shards

    _, _, run = same_batch
    folder = tmp_path / "ck"
    shutil.copytree(run / "checkpoint" / "epoch-0003-step-00000021", folder)
    marker = tmp_path / "pwned"
    (folder / ".metadata").write_bytes(pickle.dumps(_Hostile(marker)))
    model = torch.nn.Linear(4, 3)
    with pytest.raises(CheckpointError, match="refused"):
        load_shards(model, {"model": torch.optim.SGD(model.parameters(), lr=0.1)}, folder)
    assert not marker.exists()


@pytest.fixture(scope="module")
def stopped(make_tiny):
    """An FSDP run (dropout on, so every rank's RNG matters) stopped by `tuitrain stop` after step 5,
    and a copy of its run directory taken before anything resumes it."""
    tiny = make_tiny("fsdp-stop")
    run = tiny.runs / "tiny" / "stopped"
    p = tiny.cli_bg(
        "run", tiny.config, *FSDP, "--set", "model.sleep=0.03", "--set", "train.epochs=40", "--run-dir", run
    )
    try:
        tiny.wait_for(lambda: tiny.last_train_step(run) >= 5, what="step 5")
        assert tiny.cli("stop", run).returncode == 0
        assert p.wait(300) == 130
    finally:
        p.kill()
    copy = tiny.root / "elsewhere" / "copy"
    shutil.copytree(run, copy)
    return tiny, run, copy


def test_stop_then_resume_latest_continues_exactly(stopped):
    tiny, run, _ = stopped
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted"
    newest = max(_index(run), key=lambda e: e["step"])
    at = newest["step"]
    assert at == info["step"] and (run / "checkpoint" / newest["file"] / ".metadata").is_file()
    until = ("--set", "train.epochs=40", "--set", f"train.max_steps={at + 6}")
    r = tiny.cli("run", tiny.config, *FSDP, *until, "--resume", "latest")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((run / "run.json").read_text())["step"] == at + 6
    full = tiny.root / "full"
    f = tiny.cli("run", tiny.config, *FSDP, *until, "--run-dir", full)
    assert f.returncode == 0, f.stdout + f.stderr
    resumed, straight = (tiny.step_losses(tiny.read_events(d)) for d in (run, full))
    assert len(straight) == at + 6
    assert resumed == straight  # every step's loss, bit for bit, before and after the stop
    a, b = _params(run), _params(full)
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_another_world_size_resumes_from_a_checkpoint_directory(stopped):
    """One process (strategy single) resumes the 2-rank checkpoint by its path: DCP gathers the shards;
    mid-epoch, it continues at the next epoch with a warning, as with DDP."""
    tiny, _, copy = stopped
    newest = max(_index(copy), key=lambda e: e["step"])
    state = load_checkpoint(copy / "checkpoint" / newest["file"])
    r = tiny.cli(
        "run",
        tiny.config,
        "--set",
        "train.epochs=40",
        "--set",
        f"train.max_steps={newest['step'] + 3}",
        "--resume",
        copy / "checkpoint" / newest["file"],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    info = json.loads((copy / "run.json").read_text())
    assert info["status"] == "completed" and info["step"] == newest["step"] + 3
    (started,) = [e for e in _events(copy, "RunStarted") if e["resumed_from"]]
    assert started["start_step"] == newest["step"]
    warned = any("written by 2 process(es)" in e["text"] for e in _events(copy, "OutputPrinted"))
    assert warned == (state["stage"] == "train" and state["batch"] > 0)


def test_fsdp_config_refusals(tiny):
    from tuitrain.config import ConfigError, load_config
    from tuitrain.run.launch import check_config, distributed_wanted

    cfg = load_config(tiny.config, ["train.strategy=fsdp", "train.devices=2", "train.device=mps"])
    with pytest.raises(ConfigError, match="fsdp runs on CPU") as info:
        check_config(cfg)
    assert info.value.key == "train.device"
    one = load_config(tiny.config, ["train.strategy=fsdp", "train.devices=1"])
    check_config(one)  # one device trains as "single"
    assert not distributed_wanted(one) and distributed_wanted(load_config(tiny.config, FSDP[1::2]))


def test_fsdp_units_are_the_children_with_parameters_or_a_lists_elements():
    from torch import nn

    from tuitrain.core.strategies.fsdp import fsdp_units

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2)})
            self.act = nn.ReLU()  # no parameters: stays with the root
            self.head = nn.Linear(4, 10)

    m = Transformer()
    assert fsdp_units(m) == [m.embed, *m.blocks, m.heads["a"], m.head]
    m.head.weight = m.embed.weight  # tied: one unit could not hold what two need
    assert fsdp_units(m) == []
    m.fsdp_units = lambda: list(m.blocks)  # the model's own choice wins
    assert fsdp_units(m) == list(m.blocks)
