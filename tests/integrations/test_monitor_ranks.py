"""`Monitor` in a user's own script across real torchrun ranks (2 gloo ranks on CPU), and in one process
without torchrun: one run directory owned by rank 0, `tuitrain checkpoint/stop`, a signal to rank 1
only, pause, an exception that ends the script, and the dashboard in a pseudo-terminal.

The scripts are in monitor_scripts/: loop.py (nanoGPT-shaped: process group, DDP model, Monitor at the
top level) and single.py (the `with` form, the start()/finish() form, an uncaught exception)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env, read_events, read_pty, wait_for

SCRIPTS = Path(__file__).parent / "monitor_scripts"
LOOP = SCRIPTS / "loop.py"
WAIT = 90.0  # seconds any one condition may take on a loaded 2-core machine (two ranks import torch)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(tmp: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(LOOP),
        "--out",
        str(tmp),
        "--root",
        str(tmp / "runs"),
        *args,
    ]


class Ranks:
    """torchrun with loop.py in the background, its output in a file; killed at the test's end."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.tmp = tmp
        self.log = open(tmp / "torchrun.out", "w+")
        self.proc = subprocess.Popen(
            torchrun_cmd(tmp, *args),
            cwd=tmp,
            env=cli_env(),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return (self.tmp / "torchrun.out").read_text()

    def run_dir(self) -> Path:
        runs = wait_for(lambda: run_dirs(self.tmp), timeout=WAIT, what="the run directory")
        return runs[0]

    def step(self, rank: int) -> int:
        try:
            return int((self.tmp / f"step-{rank}").read_text() or 0)
        except (OSError, ValueError):  # not yet written, or being rewritten
            return 0

    def steps(self) -> tuple[int, int]:
        return wait_for(
            lambda: (lambda s: s if 0 not in s else None)((self.step(0), self.step(1))),
            timeout=5,
            interval=0.01,
            what="both step files",
        )

    def final(self, rank: int) -> int:
        return int((self.tmp / f"final-{rank}").read_text())

    def pid(self, rank: int) -> int:
        return int(
            wait_for(
                lambda: (self.tmp / f"pid-{rank}").exists() and (self.tmp / f"pid-{rank}").read_text(),
                timeout=WAIT,
                what=f"rank {rank}'s pid",
            )
        )

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail("the ranks did not end in time:\n" + self.output()[-3000:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # torchrun and its ranks (a session of their own)
            self.proc.wait()
        self.log.close()


@pytest.fixture
def ranks(tmp_path):
    started: list[Ranks] = []

    def start(*args: str) -> Ranks:
        r = Ranks(tmp_path, *args)
        started.append(r)
        return r

    yield start
    for r in started:
        r.kill()


def run_dirs(tmp: Path) -> list[Path]:
    folder = tmp / "runs" / "ranks"
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def run_json(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def logged_steps(run_dir: Path) -> list[dict]:
    return [e for e in read_events(run_dir, torn_ok=True) if e["event"] == "MetricsLogged"]


def assert_ended_together(r: Ranks, run_dir: Path) -> int:
    """Both ranks left the loop at the same step, the run ended interrupted there; rank 0 alone logged."""
    assert r.wait() == 0, r.output()[-3000:]
    assert r.final(0) == r.final(1), "the ranks left the loop at different steps"
    info = run_json(run_dir)
    assert info["status"] == "interrupted" and info["exit_code"] == 130, info
    assert info["step"] == r.final(0)
    metrics = logged_steps(run_dir)
    assert metrics and {e["metrics"]["rank"] for e in metrics} == {0.0}, "rank 1's log must write nothing"
    steps = [e["step"] for e in metrics]
    assert all(a < b for a, b in zip(steps, steps[1:])), "steps strictly increasing, no duplicates"
    assert steps[-1] == r.final(0)
    assert run_dirs(r.tmp) == [run_dir], "rank 1 made no run directory of its own"
    return r.final(0)


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", *map(str, args)], env=cli_env(), capture_output=True, text=True, timeout=120
    )


def test_checkpoint_pause_and_stop_from_outside_reach_both_ranks(ranks):
    """`tuitrain checkpoint`, a pause and a resume, then `tuitrain stop`, in one run (one torchrun start)."""
    from tuitrain.core.control import FileControl

    r = ranks()
    run = r.run_dir()
    wait_for(lambda: min(r.step(0), r.step(1)) >= 5, timeout=WAIT, what="both ranks training")
    assert len(run_dirs(r.tmp)) == 1

    done = cli("checkpoint", run)
    assert done.returncode == 0, done.stderr
    index = run / "checkpoint" / "index.json"
    entries = wait_for(
        lambda: index.exists() and json.loads(index.read_text()),
        timeout=WAIT,
        what="the requested checkpoint in index.json",
    )
    assert len(entries) == 1 and entries[0]["reason"] == "request", entries
    file = run / "checkpoint" / entries[0]["file"]
    assert entries[0]["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert r.proc.poll() is None, "a checkpoint request must not end the run"

    # pause: both ranks hold at the same step, and nothing is logged, until the second toggle
    control = FileControl(run)
    control.toggle_pause()

    def events_after_pause() -> list[str] | None:
        names = [e["event"] for e in read_events(run, torn_ok=True)]
        return names[names.index("RunPaused") :] if "RunPaused" in names else None

    wait_for(events_after_pause, timeout=WAIT, what="RunPaused in events.jsonl")
    held = r.steps()
    assert held[0] == held[1], f"the ranks paused at different steps: {held}"
    for _ in range(2):  # twice over an interval: nothing moves while paused
        time.sleep(0.4)
        assert r.steps() == held
        assert "MetricsLogged" not in events_after_pause()
    assert run_json(run)["paused"] is True
    control.toggle_pause()
    wait_for(lambda: min(r.step(0), r.step(1)) > held[0] + 3, timeout=WAIT, what="both ranks moving again")
    assert "RunResumed" in events_after_pause()

    done = cli("stop", run)
    assert done.returncode == 0, done.stderr
    final = assert_ended_together(r, run)
    assert final > held[0]
    entries = json.loads(index.read_text())
    # the request's and the stop's own, at the step both ranks left at (rank 1 writes none)
    assert [e["step"] for e in entries][1:] == [final] and len(entries) == 2, entries
    commands = [(e["command"], e["source"]) for e in read_events(run) if e["event"] == "ControlReceived"]
    assert commands == [("checkpoint", "cli"), ("pause", "file"), ("resume", "file"), ("stop", "cli")], commands


def test_sigterm_to_rank_1_alone_stops_both_ranks_at_the_same_step(ranks):
    r = ranks("--late-group")  # and the Monitor started before init_process_group
    run = r.run_dir()
    pid1 = r.pid(1)
    wait_for(lambda: min(r.step(0), r.step(1)) >= 5, timeout=WAIT, what="both ranks training")
    os.kill(pid1, signal.SIGTERM)
    assert_ended_together(r, run)
    assert run_json(run)["reason"] == "stopped"


def test_an_exception_in_a_top_level_loop_without_finish_fails_the_run(ranks):
    r = ranks("--fail-at", "30")
    run = r.run_dir()
    assert r.wait() != 0
    info = wait_for(
        lambda: run_json(run).get("status") not in (None, "running") and run_json(run),
        timeout=5,
        what="run.json's final status",
    )
    assert info["status"] == "failed", info
    assert "RuntimeError: the loop exploded on purpose at step 30" in info["error"], info
    names = [e["event"] for e in read_events(run)]
    assert names[-1] == "RunFailed", names[-5:]
    assert not (r.tmp / "final-0").exists() and not (r.tmp / "final-1").exists()


def test_one_process_start_finish_is_the_with_form_and_an_uncaught_exception_fails(tmp_path):
    def launch(form: str) -> tuple[subprocess.Popen, Path]:
        run = tmp_path / form
        cmd = [sys.executable, str(SCRIPTS / "single.py"), "--form", form, "--run-dir", str(run)]
        env = {k: v for k, v in cli_env().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        return subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ), run

    procs = {form: launch(form) for form in ("with", "start", "raise")}  # side by side: each imports torch
    results = {form: (p.communicate(timeout=WAIT), p.returncode, run) for form, (p, run) in procs.items()}

    def shape(run: Path) -> tuple:
        files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
        events = read_events(run)
        names = [e["event"] for e in events if e["event"] not in ("DevicesSampled", "ControlReceived")]
        losses = [(e["step"], e["metrics"]["loss"]) for e in events if e["event"] == "MetricsLogged"]
        info = run_json(run)
        return files, names, losses, {k: info[k] for k in ("status", "exit_code", "step", "error", "experiment")}

    for form in ("with", "start"):
        (out, err), code, run = results[form]
        assert code == 0, err
        assert run_json(run)["status"] == "completed"
    assert shape(results["with"][2]) == shape(results["start"][2])
    assert shape(results["with"][2])[3]["step"] == 20

    (out, err), code, run = results["raise"]
    assert code == 1 and "ValueError: top-level failure on purpose" in err  # the traceback still shows
    info = run_json(run)
    assert info["status"] == "failed" and info["step"] == 5, info
    assert info["error"] == "ValueError: top-level failure on purpose", info
    assert [e["event"] for e in read_events(run)][-1] == "RunFailed"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty")
def test_the_dashboard_of_a_torchrun_script_shows_rank_0_and_q_y_stops_both(tmp_path):
    import pty

    cmd = torchrun_cmd(tmp_path, "--dashboard", "auto", "--marker-every", "50")
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tmp_path)
        os.execvpe(cmd[0], cmd, env)
    screen = b""
    code = None
    try:

        def read() -> bytes:
            nonlocal screen
            screen += read_pty(fd, 0.1)
            return screen

        run = wait_for(lambda: read() and run_dirs(tmp_path), timeout=WAIT, what="the run directory")[0]
        rank1_log = run / "ranks" / "rank-1.log"
        # the dashboard is up (its loss chart), and rank 1 has printed markers meanwhile
        wait_for(
            lambda: b"loss" in read() and rank1_log.exists() and rank1_log.read_text().count("RANK1-MARKER") >= 2,
            timeout=WAIT,
            what="the dashboard's loss chart and rank 1's markers",
        )
        assert b"\x1b[?1049h" in screen  # a full-screen app
        os.write(fd, b"q")
        read_pty(fd, 0.5)
        os.write(fd, b"y")
        deadline = time.time() + WAIT
        while time.time() < deadline and code is None:
            read()
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
        assert code == 0, screen[-3000:].decode(errors="replace")
        assert b"RANK1-MARKER" not in screen, "rank 1's prints reached the dashboard's screen"
        assert "RANK1-MARKER" in rank1_log.read_text()
        assert run_json(run)["status"] == "interrupted"
        assert (tmp_path / "final-0").read_text() == (tmp_path / "final-1").read_text()
        stops = [e["source"] for e in read_events(run) if e["event"] == "ControlReceived" and e["command"] == "stop"]
        assert stops == ["dashboard"], stops
    finally:
        if code is None:
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(fd)
