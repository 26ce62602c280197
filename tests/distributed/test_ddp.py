"""DDP through the CLI, as a user runs it: 2 gloo ranks on CPU, spawned by tuitrain or by torchrun.

Each run takes a few seconds (two ranks import torch). The tiny project: 100 items, so 50 per rank;
batch 16 gives 4 steps per epoch.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.conftest import python_run


def cli_env() -> dict:  # as tests/conftest.py runs the CLI
    import os

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("PYTHONHASHSEED", None)
    return env


DDP = ("--set", "train.strategy=ddp", "--set", "train.devices=2")

CRASH_MODULE = '''
import time

import torch
import torch.distributed as dist
from torch import nn


class Net(nn.Module):
    """Raises on one rank only, at its `fail_at`-th training forward."""

    def __init__(self, fail_rank=1, fail_at=3):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.fail_rank, self.fail_at, self.calls = fail_rank, fail_at, 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if dist.is_initialized() and dist.get_rank() == self.fail_rank and self.calls == self.fail_at:
                with open("crashed_at", "w") as f:  # the test times the run's end from here
                    f.write(repr(time.time()))
                raise RuntimeError(f"rank {self.fail_rank} exploded on purpose")
        return self.lin(x)
'''


STEP_MODULE = '''
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    """Trains through its own train_step, which DDP must see (gradient all-reduce)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x):
        return self.net(x)

    def train_step(self, batch):
        x, y = batch
        out = self(x)
        return {"loss": F.cross_entropy(out, y), "output": out, "target": y}

    valid_step = train_step
'''


def _events(run_dir: Path, name: str) -> list[dict]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, filter(None, lines)) if e["event"] == name]


def _params(run_dir: Path) -> dict:
    return torch.load(run_dir / "model.pt", weights_only=True)


def _assert_same_params(a: dict, b: dict, atol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0, msg=lambda m: f"{k}: {m}")


def _index(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "checkpoint" / "index.json").read_text())


def _saved_after_request(run_dir: Path) -> bool:
    """A checkpoint request was received and a checkpoint saved after it (reason "request", or the epoch
    checkpoint of that very state, which the request then reuses)."""
    asked = False
    for e in tiny_events(run_dir):
        if e["event"] == "ControlReceived" and e["command"] == "checkpoint":
            asked = True
        elif asked and e["event"] == "CheckpointSaved":
            return True
    return False


def tiny_events(run_dir: Path) -> list[dict]:
    out = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def _newest_checkpoint(run_dir: Path) -> dict:
    """The stop's checkpoint (reason "stop"), or the epoch one when the stop came at that very step."""
    return max(_index(run_dir), key=lambda e: e["step"])


def test_ddp_run_completes_with_a_full_run_dir(tiny):
    r = tiny.cli("run", tiny.config, *DDP)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = tiny.run_dirs()
    for name in (
        "config.toml",
        "run.json",
        "events.jsonl",
        "experiment.log",
        "model.pt",
        "train/epoch-3/loss.log",
        "checkpoint/index.json",
    ):
        assert (run / name).is_file(), name
    assert not (run / "ranks").exists()  # the ranks wrote nothing below Python
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["step"] == 12
    assert info["env"]["world_size"] == 2 and info["env"]["strategy"] == "ddp"
    (started,) = _events(run, "RunStarted")
    assert started["steps_per_epoch"] == 4 and started["pid"] == info["pid"]
    assert sorted(tiny.step_losses(tiny.read_events(run))) == list(range(1, 13))
    assert [e["epoch"] for e in _index(run)][-1] == 3
    assert "training completed" in r.stdout and r.stdout.count("experiment tiny") == 1


@pytest.mark.parametrize("accum,own_step", [(1, False), (2, True)])
def test_two_ranks_match_one_process_with_the_same_global_batch(tiny, accum, own_step):
    config = tiny.config
    common: tuple = ("--set", f"train.grad_accumulation={accum}")
    if own_step:
        (tiny.root / "stepproj.py").write_text(STEP_MODULE)
        config = tiny.write_config(
            "step.toml",
            tiny.config_text()
            .replace("tinyproj:Net", "stepproj:Net")
            .replace("hidden = 16\n", "")
            .replace("dropout = 0.3\n", ""),
        )
    else:
        common += ("--set", "model.dropout=0.0")
    one = tiny.cli("run", config, *common, "--set", f"data.batch_size={16 // accum}", "--run-dir", tiny.root / "one")
    two = tiny.cli(
        "run", config, *common, *DDP, "--set", f"data.batch_size={8 // accum}", "--run-dir", tiny.root / "two"
    )
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stdout + two.stderr
    _assert_same_params(_params(tiny.root / "one"), _params(tiny.root / "two"), atol=1e-6)
    # metrics reduced over both ranks: the same values as one process sees
    l1, l2 = (tiny.step_losses(tiny.read_events(tiny.root / d)) for d in ("one", "two"))
    assert l1.keys() == l2.keys()
    assert all(abs(l1[s] - l2[s]) < 1e-6 for s in l1)
    e1, e2 = (_events(tiny.root / d, "EpochCompleted")[-1]["metrics"] for d in ("one", "two"))
    assert e1.keys() == e2.keys() and all(abs(e1[k] - e2[k]) < 1e-6 for k in e1)


def test_stop_and_checkpoint_commands_then_resume_latest_is_exact(tiny):
    run = tiny.root / "runs" / "tiny" / "stopped"
    p = tiny.cli_bg("run", tiny.config, *DDP, "--set", "model.sleep=0.03", "--set", "train.epochs=40", "--run-dir", run)
    try:
        tiny.wait_for(lambda: tiny.last_train_step(run) >= 3, what="step 3")
        assert tiny.cli("checkpoint", run).returncode == 0
        tiny.wait_for(lambda: _saved_after_request(run), what="requested checkpoint")
        assert tiny.cli("stop", run).returncode == 0
        assert p.wait(300) == 130
    finally:
        p.kill()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted"
    newest = _newest_checkpoint(run)
    stopped_at = newest["step"]
    assert stopped_at == info["step"]  # the state it stopped in is on disk
    ckpt = torch.load(run / "checkpoint" / newest["file"], weights_only=True)
    assert ckpt["world_size"] == 2 and len(ckpt["rng_ranks"]) == 2
    assert not torch.equal(ckpt["rng_ranks"][0]["torch"], ckpt["rng_ranks"][1]["torch"])

    # resume to a few steps past the stop; dropout draws from each rank's restored RNG
    until = ("--set", "train.epochs=40", "--set", f"train.max_steps={stopped_at + 6}")
    r = tiny.cli("run", tiny.config, *DDP, *until, "--resume", "latest")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((run / "run.json").read_text())["step"] == stopped_at + 6
    full = tiny.cli("run", tiny.config, *DDP, *until, "--run-dir", tiny.root / "full")
    assert full.returncode == 0, full.stderr
    _assert_same_params(_params(run), _params(tiny.root / "full"), atol=0)


def test_pause_then_sigterm_stops_every_rank_with_a_checkpoint(tiny):
    from tuitrain.core.control import FileControl

    run = tiny.root / "runs" / "tiny" / "term"
    p = tiny.cli_bg("run", tiny.config, *DDP, "--set", "model.sleep=0.03", "--set", "train.epochs=40", "--run-dir", run)
    try:
        tiny.wait_for(lambda: tiny.last_train_step(run) >= 2, what="step 2")
        ranks = psutil.Process(p.pid).children(recursive=True)
        FileControl(run).send("pause", "test")
        tiny.wait_for(lambda: _events(run, "RunPaused"), what="RunPaused")
        step = tiny.last_train_step(run)
        time.sleep(0.6)
        assert tiny.last_train_step(run) == step  # every rank waits (rank 0 alone could not step)
        p.send_signal(signal.SIGTERM)  # stops a paused run too
        assert p.wait(300) == 130
    finally:
        p.kill()
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "interrupted" and _newest_checkpoint(run)["step"] == info["step"] >= 2
    gone, alive = psutil.wait_procs(ranks, timeout=60)
    assert not alive


def test_a_crashing_rank_ends_the_run_within_seconds(tiny):
    (tiny.root / "crashproj.py").write_text(CRASH_MODULE)
    cfg = tiny.write_config(
        "crash.toml",
        tiny.config_text()
        .replace("tinyproj:Net", "crashproj:Net")
        .replace("hidden = 16\n", "")
        .replace("dropout = 0.3\n", ""),
    )
    run = tiny.root / "runs" / "tiny" / "crash"
    p = tiny.cli_bg("run", cfg, *DDP, "--run-dir", run)
    seen: set = set()
    crashed = tiny.root / "crashed_at"
    try:
        t0 = time.monotonic()
        while p.poll() is None and time.monotonic() - t0 < 300:
            try:
                seen.update(psutil.Process(p.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.05)
        assert p.wait(5) == 1
        ended = time.time()
    finally:
        p.kill()
    # the other rank does not wait out the process group's timeout (30 minutes): the run ends within
    # seconds of the crash (a minute allowed for a loaded machine)
    assert ended - float(crashed.read_text()) < 60
    assert len(seen) >= 2  # the two ranks were seen, and are gone
    gone, alive = psutil.wait_procs(list(seen), timeout=60)
    assert not alive, alive
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "failed" and info["exit_code"] == 1
    assert "rank 1" in info["error"] and "exploded on purpose" in info["error"]
    (failed,) = _events(run, "RunFailed")
    assert "exploded on purpose" in failed["traceback"]


def test_ranks_end_when_the_launcher_is_killed_while_they_start(tiny):
    """kill -9 of `tuitrain run` while its ranks still import torch: they notice their parent is gone
    once they can, and end, instead of training on as orphans."""
    p = tiny.cli_bg(
        "run",
        tiny.config,
        *DDP,
        "--set",
        "model.sleep=0.03",
        "--set",
        "train.epochs=40",
        "--run-dir",
        tiny.root / "runs" / "tiny" / "orphans",
    )
    try:

        def ranks_started():
            found = [c for c in psutil.Process(p.pid).children() if "--multiprocessing-fork" in c.cmdline()]
            return found if len(found) == 2 else None

        ranks = tiny.wait_for(ranks_started, what="the two ranks")
    finally:
        p.kill()
    p.wait()
    gone, alive = psutil.wait_procs(ranks, timeout=300)  # a loaded machine imports torch in a minute
    assert not alive, alive


def test_torchrun_rank_0_owns_the_run_dir(tiny):
    # the launcher as the CLI's tests start a Python (the fork server's child, torch imported already); its ranks
    # are its own fresh processes, as torchrun starts them
    r = python_run(
        [
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "-m",
            "tuitrain",
            "run",
            str(tiny.config),
            "--set",
            "model.dropout=0.0",
            "--set",
            "data.batch_size=8",
        ],
        tiny.root,
        cli_env(),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = tiny.run_dirs()  # rank 1 made no run directory of its own
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "completed" and info["step"] == 21  # 50 items per rank, batch 8: 7 steps
    assert r.stdout.count("training completed") == 1  # rank 1 is quiet


def test_each_rank_reports_its_own_cpu_throughput_and_memory(tiny, monkeypatch):
    """Spawned ranks sample themselves: the parent's stream carries DevicesSampled of rank 0 and 1,
    each with its process CPU and, from its second sample on, its own steps and samples per second."""
    monkeypatch.setenv("TUITRAIN_DEVICES_INTERVAL", "0.05")
    r = tiny.cli("run", tiny.config, *DDP, "--set", "train.epochs=40")
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = tiny.run_dirs()
    samples = _events(run, "DevicesSampled")
    assert {s["rank"] for s in samples} == {0, 1}
    for rank in (0, 1):
        mine = [s for s in samples if s["rank"] == rank]
        assert all(s["process_cpu"] is not None and s["rss"] > 0 for s in mine)
        rated = [s for s in mine if s["steps_per_s"] is not None]
        assert rated and max(s["steps_per_s"] for s in rated) > 0
        # 16 samples a step on each rank (batch 16 per process, no accumulation)
        assert all(s["items_per_s"] == pytest.approx(16 * s["steps_per_s"]) for s in rated), [
            (s["steps_per_s"], s["items_per_s"]) for s in rated
        ]
