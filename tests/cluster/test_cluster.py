"""A cluster's life, with real processes: a Slurm preemption (SIGUSR1, a faked `SLURM_JOB_ID` and an
`scontrol` stand-in on PATH that records its arguments), `--resume auto`, torchrun `--max-restarts` after a
rank is killed, and two torchrun "nodes" on this machine (static rendezvous on 127.0.0.1).

Each torchrun launch costs a few seconds (every rank imports torch); the tiny project of conftest.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

JOB = "4242"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    e.pop("PYTHONHASHSEED", None)
    return e


def torchrun(root: Path, *args, torch_args=(), log: str = "torchrun") -> subprocess.Popen:
    """`python -m torch.distributed.run TORCH_ARGS -m tuitrain run ARGS` in the background (output to a file)."""
    out = open(root / f"{log}-{time.time_ns()}.out", "w+")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *map(str, torch_args),
            "-m",
            "tuitrain",
            "run",
            *map(str, args),
        ],
        cwd=root,
        env=env(),
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def run_json(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def newest_checkpoint_step(run: Path) -> int:
    return max(e["step"] for e in json.loads((run / "checkpoint" / "index.json").read_text()))


def workers(launcher: subprocess.Popen) -> list[psutil.Process]:
    """The `tuitrain run` processes a torchrun started."""
    try:
        kids = psutil.Process(launcher.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        try:
            if "tuitrain" in p.cmdline() and "torch.distributed.run" not in p.cmdline():
                out.append(p)
        except psutil.Error:
            pass
    return out


def rank_of(p: psutil.Process) -> int:
    return int(p.environ().get("RANK", "-1"))


@pytest.fixture
def slurm(tiny, monkeypatch) -> Path:
    """A faked Slurm job: SLURM_JOB_ID, and `scontrol` on PATH appending its arguments to a file."""
    bin_dir = tiny.root / "bin"
    bin_dir.mkdir()
    calls = tiny.root / "scontrol.calls"
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", JOB)
    return calls


def test_sigusr1_under_slurm_checkpoints_requeues_and_the_same_command_finishes_exactly(tiny, slurm):
    until = ("--set", "train.epochs=40", "--set", "train.max_steps=30", "--set", "model.sleep=0.02")
    command = ("run", tiny.config, *until, "--resume", "auto")
    p = tiny.cli_bg(*command)  # no run yet: --resume auto starts one
    try:
        tiny.wait_for(lambda: tiny.run_dirs() and tiny.last_train_step(tiny.run_dirs()[0]) >= 3, what="step 3")
        p.send_signal(signal.SIGUSR1)
        assert p.wait(300) == 130
    finally:
        p.kill()
    (run,) = tiny.run_dirs()
    info = run_json(run)
    assert (info["status"], info["reason"], info["requeued"], info["exit_code"]) == (
        "interrupted",
        "preempted",
        True,
        130,
    )
    stopped_at = info["step"]
    assert 3 <= stopped_at < 30 and newest_checkpoint_step(run) == stopped_at  # the state it stopped in
    assert slurm.read_text() == f"requeue {JOB}\n"  # once
    events = tiny.read_events(run)
    assert [e["requeued"] for e in events if e["event"] == "JobRequeued"] == [True]

    again = tiny.cli(*command)  # the requeued job: the same command line
    assert again.returncode == 0, again.stdout + again.stderr
    assert tiny.run_dirs() == [run]
    info = run_json(run)
    assert (info["status"], info["step"], info["resumes"], info["requeued"]) == ("completed", 30, 1, False)
    full = tiny.cli("run", tiny.config, *until, "--run-dir", tiny.root / "full")
    assert full.returncode == 0, full.stderr
    whole = tiny.step_losses(tiny.read_events(tiny.root / "full"))
    assert sorted(whole) == list(range(1, 31))
    assert tiny.step_losses(tiny.read_events(run)) == whole  # bitwise: floats read back exactly


def test_requeue_off_or_refused_is_said_not_done(tiny, slurm, monkeypatch):
    from tuitrain.run.slurm import requeue_job

    assert requeue_job(enabled=False) is None and not slurm.exists()
    (tiny.root / "bin" / "scontrol").write_text('#!/bin/sh\necho "Requeue not allowed" >&2\nexit 1\n')
    ev = requeue_job()
    assert ev.job_id == JOB and ev.requeued is False and "Requeue not allowed" in ev.detail
    monkeypatch.delenv("SLURM_JOB_ID")
    assert requeue_job() is None


def test_resume_auto_continues_only_an_unfinished_newest_run(tiny):
    from tuitrain.run.runner import prepare_run

    first = prepare_run(tiny.config, ["train.epochs=1"], resume="auto")
    assert first.resume_path is None  # nothing to continue: a new run, no error
    assert tiny.cli("run", tiny.config, "--set", "train.epochs=1").returncode == 0
    (run,) = tiny.run_dirs()
    assert prepare_run(tiny.config, ["train.epochs=1"], resume="auto").resume_path is None  # completed
    info = run_json(run)
    (run / "run.json").write_text(json.dumps({**info, "status": "running", "pid": 2**22 + 12345}))  # killed
    again = prepare_run(tiny.config, ["train.epochs=1"], resume="auto")
    assert again.run_dir == run and again.resume_path == run / "checkpoint" / "epoch-0001-step-00000007.pt"


def test_torchrun_restart_after_a_rank_is_killed_ends_equal_to_an_uninterrupted_run(tiny):
    args = (
        tiny.config,
        "--set",
        "model.dropout=0.0",
        "--set",
        "data.batch_size=8",
        "--set",
        "train.epochs=4",
        "--set",
        "checkpoint.every_n_steps=3",
    )

    def launch(*extra, sleep="0.0"):
        return torchrun(
            tiny.root,
            *args,
            "--set",
            f"model.sleep={sleep}",
            *extra,
            torch_args=("--nproc-per-node", "2", "--max-restarts", "1", "--master-port", free_port()),
        )

    p = launch("--resume", "auto", sleep="0.05")
    try:

        def rank_1():
            ranks = [w for w in workers(p) if rank_of(w) == 1]
            runs = tiny.run_dirs()
            return ranks and runs and tiny.last_train_step(runs[0]) >= 8 and ranks[0]

        victim = tiny.wait_for(rank_1, what="step 8 under torchrun")
        victim.kill()  # kill -9: no checkpoint of its own, the others' collective fails
        assert p.wait(300) == 0  # torchrun restarted the ranks once; they finished the run
    finally:
        p.kill()
    (run,) = tiny.run_dirs()
    info = run_json(run)
    assert (info["status"], info["step"], info["resumes"]) == ("completed", 28, 1)
    resumed = [e for e in tiny.read_events(run, torn_ok=True) if e["event"] == "RunStarted"][1]["resumed_from"]
    assert resumed.endswith(".pt")
    full = launch("--run-dir", tiny.root / "full")
    assert full.wait(300) == 0
    whole = tiny.step_losses(tiny.read_events(tiny.root / "full"))
    assert sorted(whole) == list(range(1, 29))
    assert tiny.step_losses(tiny.read_events(run, torn_ok=True)) == whole


def test_two_nodes_share_one_run_dir_and_either_one_stops_both(tiny):
    """Two torchrun commands, one process each: SIGTERM to the second node's rank stops both with a
    checkpoint; `--resume auto` on both continues that run; `tuitrain stop` reaches both."""
    args = (tiny.config, "--set", "train.epochs=200", "--set", "model.sleep=0.03", "--resume", "auto")

    def nodes():
        port = free_port()
        return [
            torchrun(
                tiny.root,
                *args,
                log=f"node{n}",
                torch_args=(
                    "--nnodes",
                    "2",
                    "--node-rank",
                    n,
                    "--nproc-per-node",
                    "1",
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    port,
                ),
            )
            for n in (0, 1)
        ]

    def run_dir() -> Path | None:
        runs = tiny.run_dirs()
        return runs[0] if runs else None

    launchers = nodes()
    try:
        tiny.wait_for(
            lambda: run_dir() and tiny.last_train_step(run_dir()) >= 2 and workers(launchers[1]),
            what="two nodes training",
        )
        (second,) = workers(launchers[1])
        assert rank_of(second) == 1
        second.send_signal(signal.SIGTERM)  # the signal reaches one rank of one node, not its launcher
        for p in launchers:
            p.wait(300)
    finally:
        for p in launchers:
            p.kill()
    (run,) = tiny.run_dirs()  # global rank 0 owns the one run directory
    info = run_json(run)
    assert (info["status"], info["exit_code"]) == ("interrupted", 130)
    assert newest_checkpoint_step(run) == info["step"] >= 2
    stops = [e for e in tiny.read_events(run) if e["event"] == "ControlReceived" and e["command"] == "stop"]
    assert stops and stops[0]["source"] == "rank 1"
    first_stop = info["step"]

    launchers = nodes()  # both nodes again, the same command line: they continue the run
    try:
        tiny.wait_for(lambda: tiny.last_train_step(run) >= first_stop + 2, what="the continued run's steps")
        assert tiny.cli("stop", run).returncode == 0
        for p in launchers:
            p.wait(300)
        assert not any(workers(p) for p in launchers)
    finally:
        for p in launchers:
            p.kill()
    assert tiny.run_dirs() == [run]
    info = run_json(run)
    assert (info["status"], info["exit_code"], info["resumes"]) == ("interrupted", 130, 1)
    assert newest_checkpoint_step(run) == info["step"] > first_stop + 1
