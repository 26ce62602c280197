"""`tuitrain sweep` as a user runs it: real `tuitrain run` trials (the spirals demo, small), a real Optuna
study in a journal file or on a real PostgreSQL server, pruning, a second worker, kill -9 of a worker
and its trial taken up again, `tuitrain stop SWEEP_DIR`, and a bad [sweep] refused before anything
trains."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import cli_env, python_in_pty, python_popen, tuitrain
from tests.sweep.postgres import postgres_url  # noqa: F401  (the fixture)

optuna = pytest.importorskip("optuna")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """[experiment]
name = "spirals"
dir = "runs"
seed = 3
[model]
target = "spirals:SpiralNet"
hidden = 16
depth = 2
classes = 2
[data]
target = "spirals:datasets"
batch_size = 64
n = {n}
classes = 2
turns = 1.0
noise = 0.05
seed = 0
valid_fraction = 0.2
[loss]
target = "torch.nn:CrossEntropyLoss"
[optimizer]
name = "AdamW"
lr = 1e-2
[train]
epochs = {epochs}
device = "cpu"
[metrics]
train = ["loss"]
valid = ["loss", "accuracy"]
[log]
every_n_steps = 1
[checkpoint]
every_n_epochs = 1
monitor = "valid/loss"
mode = "min"
[sweep]
trials = {trials}
parallel = {parallel}
sampler = "{sampler}"
pruner = "{pruner}"
seed = {seed}
storage = "{storage}"
[sweep.params]
{params}
"""
LR = '"optimizer.lr" = { choices = [0.03, 0.00001, 0.02, 0.00002] }'


SLOW_NET = """import time
from spirals import SpiralNet


class SlowNet(SpiralNet):  # the spirals demo's model, `pause` seconds a forward pass: a trial lasts
    def __init__(self, pause=0.0, **kw):
        super().__init__(**kw)
        self.pause = pause

    def forward(self, x):
        time.sleep(self.pause)
        return super().forward(x)
"""


def project(
    tmp_path: Path,
    *,
    epochs=3,
    trials=4,
    parallel=2,
    sampler="grid",
    pruner="median",
    storage="",
    params=LR,
    n=640,
    pause=0.0,
    seed=0,
) -> Path:
    shutil.copy(ROOT / "demo" / "spirals.py", tmp_path / "spirals.py")
    (tmp_path / "slownet.py").write_text(SLOW_NET)
    config = tmp_path / "sweep.toml"
    text = CONFIG.format(
        epochs=epochs,
        trials=trials,
        parallel=parallel,
        sampler=sampler,
        pruner=pruner,
        storage=storage,
        params=params,
        n=n,
        seed=seed,
    )
    if pause:
        text = text.replace('target = "spirals:SpiralNet"', f'target = "slownet:SlowNet"\npause = {pause}')
    config.write_text(text)
    return config


def sweep(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """`tuitrain sweep sweep.toml ARGS` to its end (from the suite's fork server: conftest.tuitrain)."""
    return tuitrain("sweep", "sweep.toml", *args, cwd=tmp_path, timeout=timeout)


def start(tmp_path: Path, *args: str, session: bool = False):
    """`tuitrain sweep sweep.toml ARGS` in the background, its output piped (from the suite's fork server:
    conftest.python_popen); `session`: the leader of a process group of its own, as a job step is."""
    argv = ["-m", "tuitrain", "sweep", "sweep.toml", *args]
    return python_popen(argv, tmp_path, cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, session=session)


def run_json(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def losses(run_dir: Path) -> dict[int, float]:
    """step -> the logged training loss, over every session of the run."""
    out = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "MetricsLogged" and e.get("scope") == "step" and e.get("split") == "train":
            out[e["step"]] = e["metrics"]["loss"]
    return out


def study(folder: Path, storage: str = ""):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    backend = storage or JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    return optuna.load_study(study_name="spirals", storage=backend)


SWEEP = Path("runs") / "spirals" / "sweep-spirals"


@pytest.mark.parametrize(
    "table, key, said",
    [
        ('"optimzer.lr" = { low = 1e-4, high = 1e-1 }', 'sweep.params."optimzer.lr"', "unknown table"),
        ('"optimizer.lr" = { low = 0.1, high = 0.01 }', 'sweep.params."optimizer.lr"', "must be below high"),
        ('"optimizer.lr" = { low = 0.0, high = 0.1, log = true }', 'sweep.params."optimizer.lr".low', "above 0"),
        ('"train.epochs" = { low = -2, high = 3 }', 'sweep.params."train.epochs"', "-2 is refused"),
        ('"optimizer.lr" = { choices = [] }', 'sweep.params."optimizer.lr".choices', "expected a list"),
        (
            '"optimizer.lr" = { low = 1e-4, high = 1e-1, lg = true }',
            'sweep.params."optimizer.lr".lg',
            "did you mean 'log'",
        ),
        # keys the target refuses, found from its signature as `tuitrain run --set` finds them (issue 51): no
        # trial starts, where each of them would have failed with the same error
        (
            '"optimizer.lrr" = { low = 1e-4, high = 1e-1, log = true }',
            'sweep.params."optimizer.lrr"',
            "unexpected keyword argument for torch.optim:AdamW (did you mean 'lr'?)",
        ),
        (
            '"model.hiden" = { choices = [8, 16] }',
            'sweep.params."model.hiden"',
            "unexpected keyword argument for spirals:SpiralNet (did you mean 'hidden'?)",
        ),
        ('"optimizer.betas" = { choices = [0.9, 0.99] }', 'sweep.params."optimizer.betas"', "0.9 is refused"),
    ],
)
def test_a_bad_sweep_table_is_exit_2_naming_the_key_and_nothing_runs(tmp_path, monkeypatch, capsys, table, key, said):
    from tuitrain.cli import main

    project(tmp_path, params=table, sampler="random")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "sweep.toml"]) == 2  # (the command in this process: the same code, no start-up)
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"tuitrain: error: sweep.toml: {key}: ") and said in line, line
    assert not (tmp_path / "runs").exists()


def test_bad_sweep_settings_are_exit_2_too(tmp_path, monkeypatch, capsys):
    from tuitrain.cli import main

    # (the command in this process, as the bad tables above: the same code, without the 1.2 CPU-s a process forked
    # from the suite's fork server spends to end; the tests below run the command as its own process)
    project(tmp_path, sampler="tpee")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "sweep.toml"]) == 2
    err = capsys.readouterr().err
    assert "sweep.sampler: unknown sampler 'tpee' (did you mean 'tpe'?)" in err and "Traceback" not in err, err
    project(tmp_path)
    assert main(["sweep", "sweep.toml", "--set", "sweep.metric=valid/f1"]) == 2
    err = capsys.readouterr().err
    assert "sweep.metric: 'valid/f1' is not a metric this config logs" in err and "Traceback" not in err, err
    # a seed Optuna's samplers cannot take: it was a numpy traceback once the study began
    assert main(["sweep", "sweep.toml", "--set", "sweep.seed=-1"]) == 2
    err = capsys.readouterr().err
    assert "sweep.seed: expected an integer from 0 to 4294967295, got -1" in err and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()


def test_a_config_with_a_sweep_table_still_runs_as_one_run(tmp_path):
    from tuitrain.config import load_config

    cfg = load_config(project(tmp_path))
    assert cfg.sweep["trials"] == 4 and "sweep" not in cfg.to_dict()  # a run's config.toml leaves it out


def test_a_sweep_prunes_the_bad_trials_and_prints_the_best(tmp_path, postgres_url):  # noqa: F811
    """On a real PostgreSQL study."""
    # 50 ms a step: a trial lives on for seconds after its first validation, for the pruner's stop
    # the grid has 3 values, the bad one last with this seed: the median of the first two judges it
    project(
        tmp_path,
        epochs=5,
        trials=6,
        parallel=1,
        pause=0.05,
        seed=1,
        storage=postgres_url,
        params='"optimizer.lr" = { choices = [0.03, 0.00001, 0.02] }',
    )  # 6 trials asked, the grid has 3
    done = sweep(tmp_path, "--headless")
    assert done.returncode == 0, done.stdout + done.stderr
    folder = tmp_path / SWEEP
    trials = study(folder, postgres_url).get_trials()
    assert len(trials) == 3 and len({t.params["optimizer.lr"] for t in trials}) == 3  # the grid, once each
    states = {t.params["optimizer.lr"]: t.state.name for t in trials}
    assert states[0.03] == states[0.02] == "COMPLETE"
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert pruned and all(t.params["optimizer.lr"] < 1e-4 for t in pruned), states
    for t in pruned:  # stopped gracefully, before its last epoch, with a checkpoint
        run_dir = folder / t.user_attrs["run_dir"]
        run = run_json(run_dir)
        assert (run["status"], run["reason"]) == ("interrupted", "pruned") and run["epoch"] < 5
        index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
        assert (run_dir / "checkpoint" / index[-1]["file"]).exists()
    best = min((t for t in trials if t.state.name == "COMPLETE"), key=lambda t: t.value)
    assert best.value == min(v for s, v in losses_valid(folder / best.user_attrs["run_dir"]))
    out = done.stdout
    assert f"trial {pruned[0].number} pruned at step 8," in out  # its first validation, the median's
    from tuitrain.run.directories import list_runs  # `tuitrain ls`: the trials, named with their sweep

    rows = {r["name"]: r["status"] for r in list_runs(tmp_path / "runs")}
    assert rows[f"spirals/sweep-spirals/trial-{pruned[0].number:04d}"] == "pruned" and len(rows) == 3
    assert "best trials (min valid/loss):" in out
    assert f"best trial's settings: --set optimizer.lr={best.params['optimizer.lr']!r}" in out


def losses_valid(run_dir: Path) -> list[tuple[int, float]]:
    out = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "MetricsLogged" and e.get("split") == "valid" and e.get("scope") != "step":
            out.append((e["step"], e["metrics"]["loss"]))
    return out


def wait_for(check, timeout: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_two_workers_share_one_study_on_postgresql(tmp_path, postgres_url):  # noqa: F811
    """The same command from two shells on one PostgreSQL storage: the trials are shared out, the study
    holds `trials` of them, not twice as many."""
    project(
        tmp_path,
        epochs=2,
        trials=4,
        parallel=1,
        sampler="random",
        pruner="none",
        params='"optimizer.lr" = { low = 1e-3, high = 1e-1, log = true }',
        storage=postgres_url,
    )
    first = start(tmp_path, "--headless")
    time.sleep(1.0)
    second = sweep(tmp_path, "--headless")
    out = first.communicate(timeout=240)[0]
    assert first.returncode == 0 and second.returncode == 0, out + second.stdout + second.stderr
    trials = study(tmp_path / SWEEP, postgres_url).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 2, workers  # each worker ran some
    for t in trials:
        assert run_json(tmp_path / SWEEP / t.user_attrs["run_dir"])["status"] == "completed"


@pytest.mark.parametrize("how", ["tuitrain stop", "SIGUSR1"])
def test_stop_then_the_same_command_continues_the_study(tmp_path, monkeypatch, capsys, how):
    """`tuitrain stop SWEEP_DIR`, or a cluster's "time is up" (SIGUSR1 to the job's every process, as
    Slurm's --signal sends it): each trial stops with a checkpoint; the same command continues them."""
    storage = ""
    # 100 ms a forward pass, 10 of them an epoch: each trial runs ~12 s, for the stop to reach it in time, and
    # sleeps through them (the CPU seconds the continued trials spend are few)
    project(
        tmp_path,
        epochs=12,
        trials=2,
        parallel=2,
        sampler="random",
        pruner="none",
        pause=0.1,
        storage=storage,
        params='"optimizer.lr" = { low = 1e-3, high = 1e-1, log = true }',
    )
    worker = start(tmp_path, "--headless", session=True)
    folder = tmp_path / SWEEP
    wait_for(
        lambda: (
            len(
                [
                    t
                    for t in folder.glob("trial-0*")
                    if t.is_dir() and (t / "checkpoint").exists() and list((t / "checkpoint").glob("*.pt"))
                ]
            )
            == 2
        ),
        what="two trials with a checkpoint",
    )
    if how == "SIGUSR1":
        os.killpg(worker.pid, signal.SIGUSR1)  # the worker and its trials: one process group, as a job step
    else:  # `tuitrain stop SWEEP_DIR` in this process (the same code; it imports no torch, so a process of its own
        # would be a fresh interpreter)
        from tuitrain.cli import main

        monkeypatch.chdir(tmp_path)
        assert main(["stop", str(folder)]) == 0
        said = capsys.readouterr()
        assert "2 running trial(s) asked to stop" in said.out, said.out + said.err
    out = worker.communicate(timeout=120)[0]
    assert worker.returncode == 130, out
    for run_dir in sorted(p for p in folder.glob("trial-0*") if p.is_dir()):
        run = run_json(run_dir)
        assert run["status"] == "interrupted" and run["epoch"] < 12
        assert run["reason"] == ("preempted" if how == "SIGUSR1" else "stopped")
    # the same command again: the same trials go on in their own folders, from their checkpoints
    done = sweep(tmp_path, "--headless", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = study(folder, storage).get_trials()
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE", "FAIL", "FAIL"]
    for t in trials:
        if t.state.name == "COMPLETE":
            assert "resume_of" in t.user_attrs
            run = run_json(folder / t.user_attrs["run_dir"])
            assert run["status"] == "completed" and run["resumes"] == 1


def test_a_trial_of_a_worker_killed_with_kill_9_finishes_in_another_equal_to_an_uninterrupted_run(tmp_path):
    """kill -9 of the worker: its trial's run is sent SIGTERM by the kernel (it dies with its worker) and
    stops gracefully with a checkpoint; the next worker marks the trial failed, queues it again and
    continues its run directory from that checkpoint. Every step's loss equals an uninterrupted run's."""
    project(
        tmp_path,
        epochs=8,
        trials=1,
        parallel=1,
        sampler="random",
        pruner="none",
        n=6400,
        params='"optimizer.lr" = { low = 1e-3, high = 1e-1, log = true }',
    )
    folder = tmp_path / SWEEP
    worker = start(tmp_path, "--headless")
    run_dir = folder / "trial-0000"
    wait_for(
        lambda: (run_dir / "run.json").exists() and run_json(run_dir).get("epoch", 0) >= 3,
        what="trial 0 in its third epoch",
    )
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    wait_for(lambda: run_json(run_dir)["status"] != "running", what="the trial's run to stop")
    assert run_json(run_dir)["status"] == "interrupted"
    again = sweep(tmp_path, "--headless", timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "trial 1 continues trial 0 in" in again.stdout
    trials = study(folder).get_trials()
    assert [(t.state.name, t.user_attrs.get("resume_of")) for t in trials] == [("FAIL", None), ("COMPLETE", 0)]
    assert trials[1].user_attrs["run_dir"] == "trial-0000" and run_json(run_dir)["status"] == "completed"
    lr = trials[0].params["optimizer.lr"]
    ref = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuitrain",
            "run",
            "sweep.toml",
            "--headless",
            "--run-dir",
            "ref",
            f"--set=optimizer.lr={lr!r}",
        ],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ref.returncode == 0, ref.stderr
    resumed, whole = losses(run_dir), losses(tmp_path / "ref")
    assert len(whole) == 8 * 80 and resumed == whole


def test_on_a_terminal_the_trials_are_compared_live_and_q_stops_the_sweep(tmp_path):
    """`tuitrain sweep` in a real pseudo-terminal: the sweep's dashboard, trials joining with their values
    as they start; leaving it stops every running trial gracefully (exit 130) and prints the study."""

    from tests.conftest import read_pty

    project(
        tmp_path,
        epochs=40,
        trials=3,
        parallel=2,
        sampler="grid",
        pruner="none",
        pause=0.02,
        params='"model.hidden" = { choices = [8, 24, 40] }',
    )
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = python_in_pty(["-m", "tuitrain", "sweep", "sweep.toml"], tmp_path, env)
    screen = b""
    try:

        def shows(*texts: bytes) -> bool:
            nonlocal screen
            screen += read_pty(fd, 0.1)
            return all(t in screen for t in texts)

        # the title counts the trials; two run at once, each listed with its value and status
        wait_for(lambda: shows(b"sweep spirals", b"2 trials", b"running"), timeout=120, what="two trials on screen")
        folder = tmp_path / SWEEP
        wait_for(
            lambda: all((folder / t / "checkpoint").is_dir() for t in ("trial-0000", "trial-0001")),
            what="both trials training",
        )
        os.write(fd, b"q")

        def exited():
            nonlocal screen
            screen += read_pty(fd, 0.2)
            done, status = os.waitpid(pid, os.WNOHANG)
            return done and (os.waitstatus_to_exitcode(status),)

        deadline = time.monotonic() + 120
        while not (got := exited()):
            assert time.monotonic() < deadline, screen[-2000:]
        pid = None
        assert got == (130,)
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = screen.decode(errors="replace")
    assert "stopping the sweep" in text and "study spirals:" in text
    for t in ("trial-0000", "trial-0001"):
        run = run_json(folder / t)
        assert run["status"] == "interrupted" and run["epoch"] < 40
    assert not (folder / "trial-0002").exists()  # no new trial after the stop
    log = (folder / "sweep.log").read_text()
    assert "trial 0 starts in" in log and "stopped (it continues when the sweep runs again)" in log


BROKEN_NET = """from spirals import SpiralNet


class BrokenNet(SpiralNet):  # a model that cannot train: every trial fails alike
    def forward(self, x):
        raise RuntimeError("the model is broken")
"""


def test_a_study_whose_first_trials_fail_alike_stops_and_says_so(tmp_path):
    """Issue 51: the first 3 trials failed with the same error: the other 7 are not started; the error said
    once, with what was not started; exit 1."""
    project(
        tmp_path,
        epochs=1,
        trials=10,
        parallel=1,
        sampler="random",
        pruner="none",
        n=200,
        params='"optimizer.lr" = { low = 1e-4, high = 1e-1, log = true }',
    )
    (tmp_path / "broken.py").write_text(BROKEN_NET)
    config = tmp_path / "sweep.toml"
    config.write_text(config.read_text().replace('"spirals:SpiralNet"', '"broken:BrokenNet"'))
    done = sweep(tmp_path, "--headless")
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    folder = tmp_path / SWEEP
    assert sorted(p.name for p in folder.glob("trial-*") if p.is_dir()) == ["trial-0000", "trial-0001", "trial-0002"]
    assert len(study(folder).get_trials()) == 3
    assert out.count("the model is broken") == 2, out  # trial 0's line, and the end's
    for n in (1, 2):
        assert f"trial {n} failed with the same error as trial 0" in out
    assert "study spirals: 3 fail" in out
    assert "the first 3 trials failed with the same error, so the sweep stopped: 7 trials not started" in out


def test_leaving_the_dashboard_of_an_ended_sweep_prints_the_study_alone(tmp_path):
    """Issue 51: after its trials completed, leaving the sweep's dashboard prints the study's counts and best
    trials, and not the first trial's own "Training completed" table above them."""

    from tests.conftest import read_pty

    project(
        tmp_path,
        epochs=1,
        trials=2,
        parallel=1,
        sampler="grid",
        pruner="none",
        n=200,
        params='"model.hidden" = { choices = [8, 16] }',
    )
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = python_in_pty(["-m", "tuitrain", "sweep", "sweep.toml"], tmp_path, env)
    screen = b""
    log = tmp_path / SWEEP / "sweep.log"
    try:

        def shows(*texts: bytes) -> bool:
            nonlocal screen
            screen += read_pty(fd, 0.1)
            return all(t in screen for t in texts)

        wait_for(lambda: log.exists() and "study spirals:" in log.read_text(), timeout=180, what="the study's end")
        wait_for(lambda: shows(b"2 completed"), timeout=30, what="both trials completed on screen")
        os.write(fd, b"q")

        def exited():
            nonlocal screen
            screen += read_pty(fd, 0.2)
            done, status = os.waitpid(pid, os.WNOHANG)
            return done and (os.waitstatus_to_exitcode(status),)

        deadline = time.monotonic() + 60
        while not (got := exited()):
            assert time.monotonic() < deadline, screen[-2000:]
        pid = None
        assert got == (0,)
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    after = screen.decode(errors="replace").split("\x1b[?1049l")[-1]  # what stays on the terminal
    assert "study spirals: 2 complete" in after and "best trials (min valid/loss):" in after, after
    assert "Training" not in after and "trial-0000/checkpoint" not in after, after


def test_the_pruner_waits_prune_after_epochs(tmp_path):
    """Issue 51: `prune_after = 3`: a bad trial is judged from its validation after 3 epochs (step 24 here),
    not at its first (step 8), where a curve on a plateau would be stopped."""
    config = project(
        tmp_path,
        epochs=8,
        trials=3,
        parallel=1,
        pause=0.1,
        seed=1,
        params='"optimizer.lr" = { choices = [0.03, 0.00001, 0.02] }',
    )
    config.write_text(config.read_text().replace('pruner = "median"', 'pruner = "median"\nprune_after = 3'))
    done = sweep(tmp_path, "--headless")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "median pruner (after 3 epochs)" in out
    folder = tmp_path / SWEEP
    trials = study(folder).get_trials()
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert [t.params["optimizer.lr"] for t in pruned] == [0.00001], out
    assert f"trial {pruned[0].number} pruned at step 24," in out, out
    run = run_json(folder / pruned[0].user_attrs["run_dir"])
    assert (run["status"], run["reason"]) == ("interrupted", "pruned") and 3 <= run["epoch"] < 8


@pytest.mark.parametrize("value", ["-1", "nan", "true", '"3"'])
def test_a_bad_prune_after_is_exit_2(tmp_path, monkeypatch, capsys, value):
    from tuitrain.cli import main

    config = project(tmp_path, sampler="random")
    config.write_text(config.read_text().replace('pruner = "median"', f'pruner = "median"\nprune_after = {value}'))
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "sweep.toml"]) == 2
    assert capsys.readouterr().err.startswith("tuitrain: error: sweep.toml: sweep.prune_after: ")
    assert not (tmp_path / "runs").exists()
