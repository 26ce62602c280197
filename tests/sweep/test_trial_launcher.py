"""The sweep's trial launcher (tuitrain/run/trial_launcher.py): a trial forked from it is what a fresh
`python -m MODULE ARGS` started by the sweep is (argv, folder, environment, streams, exit status, process group,
signal dispositions), and it dies with the sweep. The launcher preloads nothing here (the sweep's preloads torch):
what is tested is the process, not the import."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuitrain.run.trial_launcher import Launcher

pytestmark = pytest.mark.skipif(not Launcher.available(), reason="the launcher is for Linux")

ROOT = Path(__file__).resolve().parents[2]
PROBE = """import json, os, signal, sys, time
print(json.dumps({
    "argv": sys.argv, "name": __name__, "cwd": os.getcwd(), "path0": sys.path[0], "env": os.environ.get("PROBE"),
    "pgid": os.getpgid(0), "ppid": os.getppid(),
    "signals": {s.name: str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)},
    "torch": "torch" in sys.modules,
}))
print("on stderr", file=sys.stderr)
if sys.argv[1] == "wait":  # until SIGTERM, which it writes down
    signal.signal(signal.SIGTERM, lambda *_: (open("term", "w").write("SIGTERM"), sys.exit(0)))
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def env() -> dict[str, str]:
    return {**os.environ, "PROBE": "yes", "PYTHONPATH": str(ROOT)}


@pytest.fixture
def ctrl_c_as_a_terminal_gives_it():
    """Ctrl+C's default disposition in this process while the test runs, so in the processes it starts: a
    suite started in the background of a script inherits SIGINT ignored (as such a shell starts its jobs)
    and passes that on, or has a handler a test before this one left (the CLI's own, for its process)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_forked_trial_is_a_process_of_its_own_as_a_fresh_one_is(tmp_path, monkeypatch, ctrl_c_as_a_terminal_gives_it):
    (tmp_path / "probe.py").write_text(PROBE)
    monkeypatch.chdir(tmp_path)
    fresh = subprocess.run([sys.executable, "-m", "probe", "3", "a b"], env=env(), capture_output=True, text=True)
    launcher = Launcher(sys.executable, env(), preload=())
    try:
        with open("trial.out", "ab") as out:
            trial = launcher.start(["-m", "probe", "3", "a b"], env(), out.fileno())
        assert trial is not None
        assert trial.wait(60) == 3 == fresh.returncode and trial.poll() == 3
        lines = (tmp_path / "trial.out").read_text().splitlines()
        assert lines[1] == "on stderr" and fresh.stderr == "on stderr\n"
        got, want = json.loads(lines[0]), json.loads(fresh.stdout)
        assert got["ppid"] == launcher.proc.pid and got["pgid"] == os.getpgid(0)  # the sweep's process group
        for d in (got, want):
            del d["ppid"]
        assert got == want
        assert want["argv"] == [str(tmp_path / "probe.py"), "3", "a b"] and want["name"] == "__main__"
        assert want["signals"]["SIGINT"].endswith("default_int_handler>")  # not the launcher's SIG_IGN
        # another environment: not the launcher's to start (the caller starts a fresh process)
        with open("trial.out", "ab") as out:
            assert launcher.start(["-m", "probe", "0"], {**env(), "OMP_NUM_THREADS": "7"}, out.fileno()) is None
    finally:
        launcher.close()
    assert launcher.proc.returncode == 0
    with open("trial.out", "ab") as out:  # a launcher that has ended starts nothing
        assert launcher.start(["-m", "probe", "0"], env(), out.fileno()) is None


SWEEP = """import os, sys, time
from tuitrain.run.trial_launcher import Launcher
env = {**os.environ}
launcher = Launcher(sys.executable, env, preload=())
with open("trial.out", "ab") as out:
    trial = launcher.start(["-m", "probe", "wait"], env, out.fileno())
print(launcher.proc.pid, trial.pid, flush=True)
time.sleep(60)
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "Z"  # (a zombie: ended, its parent not yet told)


def test_kill_9_of_the_sweep_ends_the_launcher_and_each_trial_is_sent_sigterm(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    sweep = subprocess.Popen([sys.executable, "-c", SWEEP], cwd=tmp_path, env=env(), stdout=subprocess.PIPE, text=True)
    assert sweep.stdout is not None
    launcher, trial = map(int, sweep.stdout.readline().split())
    deadline = time.monotonic() + 30
    while "on stderr" not in (tmp_path / "trial.out").read_text():  # the trial has set its SIGTERM handler
        assert time.monotonic() < deadline
        time.sleep(0.05)
    sweep.kill()
    sweep.wait()
    deadline = time.monotonic() + 30
    while not (gone(launcher) and gone(trial)):
        assert time.monotonic() < deadline, "an orphan is left"
        time.sleep(0.05)
    assert (tmp_path / "term").read_text() == "SIGTERM"  # a graceful stop, as a trial of a dead sweep gets


def test_a_trial_whose_launcher_is_killed_is_sent_sigterm_and_seen_to_end(tmp_path, monkeypatch):
    """The launcher gone first (kill -9, the OOM killer): its trials stop gracefully, and the sweep sees each
    end when it ends (its exit status unknown: said as the SIGTERM it was sent), not before."""
    (tmp_path / "probe.py").write_text(PROBE)
    monkeypatch.chdir(tmp_path)
    launcher = Launcher(sys.executable, env(), preload=())
    try:
        with open("trial.out", "ab") as out:
            trial = launcher.start(["-m", "probe", "wait"], env(), out.fileno())
        assert trial is not None
        deadline = time.monotonic() + 30
        while "on stderr" not in (tmp_path / "trial.out").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert trial.poll() is None
        launcher.proc.kill()
        assert trial.wait(30) == -15
        assert (tmp_path / "term").read_text() == "SIGTERM"  # written as it ended, before the pipe's end
        deadline = time.monotonic() + 10
        while not gone(trial.pid):  # (the kernel closes its files, then the process is gone)
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        launcher.close()
