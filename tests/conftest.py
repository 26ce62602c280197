"""Shared fixtures: a tiny user project (model + data module, config TOML) written into tmp_path,
and helpers to run the `tuitrain` CLI in a subprocess as a user would.

The project is small enough that one CLI run takes about two seconds, most of it importing torch.
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import forkserver

TINY_MODULE = '''
"""A tiny user project for tuitrain's tests: an MLP with dropout on random data."""
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset


class Net(nn.Module):
    def __init__(self, inputs=4, hidden=16, classes=3, dropout=0.3, sleep=0.0, fail_at_step=0,
                 nan_at_step=0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, classes))
        self.sleep, self.fail_at_step, self.nan_at_step = sleep, fail_at_step, nan_at_step
        self.train_calls = 0

    def forward(self, x):
        if self.training:
            self.train_calls += 1
            if self.fail_at_step and self.train_calls == self.fail_at_step:
                raise RuntimeError(f"tinyproj exploded on purpose at call {self.train_calls}")
        if self.sleep:
            time.sleep(self.sleep)
        out = self.net(x)
        if self.training and self.nan_at_step and self.train_calls == self.nan_at_step:
            out = out * float("nan")
        return out


def datasets(n=100, seed=0, inputs=4, classes=3, valid_n=40):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n + valid_n, inputs, generator=g)
    y = torch.randint(0, classes, (n + valid_n,), generator=g)
    return TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])
'''

# 100 items / batch 16 = 7 batches per epoch (the last one has 4 items); 3 epochs = 21 steps
TINY_CONFIG = """
[experiment]
name = "tiny"
dir = "{runs}"
seed = 7

[model]
target = "tinyproj:Net"
hidden = 16
dropout = 0.3

[data]
target = "tinyproj:datasets"
batch_size = 16
num_workers = 0
shuffle = true
n = 100
seed = 0

[loss]
target = "torch.nn:CrossEntropyLoss"

[optimizer]
name = "AdamW"
lr = 1e-2

[train]
epochs = 3
device = "cpu"

[metrics]
train = ["loss", "accuracy"]
valid = ["loss", "accuracy"]

[log]
every_n_steps = 1

[checkpoint]
every_n_epochs = 1
keep_last = 2
keep_best = 1
monitor = "valid/loss"
mode = "min"

[dashboard]
theme = "{theme}"
"""

STEPS_PER_EPOCH = 7
EPOCHS = 3


class TinyProject:
    """A user's project folder: tinyproj.py, tiny.toml, an empty theme, and runs/ for the runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs = root / "runs"
        self.theme = root / "empty.tcss"
        self.theme.write_text("")
        (root / "tinyproj.py").write_text(TINY_MODULE)
        self.config = root / "tiny.toml"
        self.config.write_text(self.config_text())

    def config_text(self, extra: str = "") -> str:
        return textwrap.dedent(TINY_CONFIG).format(runs=self.runs.as_posix(), theme=self.theme.as_posix()) + extra

    def write_config(self, name: str, text: str) -> Path:
        p = self.root / name
        p.write_text(text)
        return p

    def run_dirs(self) -> list[Path]:
        d = self.runs / "tiny"
        return sorted(p for p in d.iterdir() if p.is_dir()) if d.is_dir() else []

    # the helpers below, as methods, so that test files need no import of this conftest
    def cli(self, *args, timeout: float = 600) -> subprocess.CompletedProcess:
        return tuitrain(*args, cwd=self.root, timeout=timeout)

    def cli_bg(self, *args) -> subprocess.Popen:
        return tuitrain_bg(*args, cwd=self.root)

    read_events = staticmethod(lambda run_dir, torn_ok=False: read_events(run_dir, torn_ok))
    step_losses = staticmethod(lambda events: step_losses(events))
    wait_for = staticmethod(lambda *a, **k: wait_for(*a, **k))
    last_train_step = staticmethod(lambda run_dir: last_train_step(run_dir))


@pytest.fixture
def tiny(tmp_path) -> TinyProject:
    return TinyProject(tmp_path)


@pytest.fixture(scope="session")
def make_tiny(tmp_path_factory):
    """A factory of TinyProjects in fresh folders, for module-scoped fixtures (one run, many tests)."""
    return lambda name="tiny": TinyProject(tmp_path_factory.mktemp(name))


@pytest.fixture
def forget_tinyproj():
    """For tests that import the user's module in this process: forget it afterwards, so that the
    next project folder's copy is the one imported."""
    yield
    sys.modules.pop("tinyproj", None)


def cli_env() -> dict:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["MKL_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONHASHSEED", None)
    return env


def tuitrain(*args: str | os.PathLike, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m tuitrain ARGS` to completion; stdout is a pipe, so `run` is headless. Started from the fork
    server (tests/forkserver.py: torch imported once) where it can serve the environment, fresh otherwise."""
    done = forkserver.run([*map(str, args)], cwd, cli_env(), timeout)
    if done is not None:
        return done
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", *map(str, args)],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tuitrain_bg(*args: str | os.PathLike, cwd: Path) -> subprocess.Popen:
    """`python -m tuitrain ARGS` in the background, output to files in cwd (no pipe to fill up)."""
    out = open(cwd / f"bg-{time.time_ns()}.out", "w+")
    forked = forkserver.start([*map(str, args)], cwd, cli_env(), out)
    if forked is not None:
        return forked
    return subprocess.Popen(
        [sys.executable, "-m", "tuitrain", *map(str, args)],
        cwd=cwd,
        env=cli_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )


def python_run(argv: list, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """`subprocess.run([python, *ARGV], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)` for a
    Python that imports torch (a user's training script): started from the fork server where it can serve the
    environment, fresh otherwise."""
    argv = [*map(str, argv)]
    done = forkserver.run_python(argv, cwd, env, timeout)
    if done is not None:
        return done
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def python_popen(
    argv: list, cwd: Path, env: dict, stdout=None, stderr=None, session: bool = False
) -> subprocess.Popen | forkserver.ForkedProcess:
    """`subprocess.Popen([python, *ARGV], cwd=cwd, env=env, stdout=..., stderr=..., text=True,
    start_new_session=session)` for a Python that imports torch (`-m tuitrain run ...`, a user's training script):
    started from the fork server where it can serve the environment, fresh otherwise. stdout: PIPE or None; stderr:
    PIPE, STDOUT or None."""
    argv = [*map(str, argv)]
    forked = forkserver.popen(argv, cwd, env, stdout, stderr, session)
    if forked is not None:
        return forked
    return subprocess.Popen(
        [sys.executable, *argv],
        cwd=cwd,
        env=env,
        stdout=stdout,
        stderr=stderr,
        text=True,
        start_new_session=session,
    )


def python_in_pty(argv: list, cwd: Path, env: dict, runtime: tuple[str, ...] = ()) -> tuple[int, int]:
    """`pty.fork()` whose child runs `python ARGV` in `cwd` with `env`: (the child's pid, the terminal's fd). The
    child is this process's own, the leader of its own session with the pty as its controlling terminal, as
    pty.fork makes it; started from the fork server where it can serve the environment (`runtime`: names of
    `env` read only by the child's own code as it runs), fresh otherwise."""
    argv = [*map(str, argv)]
    started = forkserver.in_pty(argv, cwd, env, runtime)
    if started is not None:
        return started
    import pty

    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cwd)
            os.execvpe(sys.executable, [sys.executable, *argv], env)
        finally:
            os._exit(127)
    return pid, fd


class Receiver:
    """A webhook on 127.0.0.1 that keeps every JSON body POSTed to it (the alerts' tests)."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        got = self.got = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Clock:
    """A clock a test moves by hand (`clock.now += 61`)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def read_events(run_dir: Path, torn_ok: bool = False) -> list[dict]:
    """events.jsonl as dicts; `torn_ok` skips a line a `kill -9` may have cut (JSON errors otherwise)."""
    out = []
    for line in (Path(run_dir) / "events.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            if not torn_ok:
                raise
    return out


def step_losses(events: list[dict]) -> dict[int, float]:
    """{step: train loss} from step-scope MetricsLogged events; a later line for a step wins."""
    out: dict[int, float] = {}
    for e in events:
        if e.get("event") == "MetricsLogged" and e["split"] == "train" and e.get("scope", "step") == "step":
            if "loss" in e["metrics"]:
                out[e["step"]] = e["metrics"]["loss"]
    return out


def wait_for(predicate, timeout: float = 300.0, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def last_train_step(run_dir: Path) -> int:
    """The highest train step logged so far in a live run's events.jsonl (0 when none)."""
    p = Path(run_dir) / "events.jsonl"
    try:
        text = p.read_text()
    except OSError:
        return 0
    step = 0
    for line in text.splitlines():
        if '"MetricsLogged"' not in line:
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line being written
        if e.get("split") == "train":
            step = max(step, int(e.get("step", 0)))
    return step


def read_pty(fd: int, seconds: float) -> bytes:
    """What a program in a pseudo-terminal wrote during `seconds` (the screen's raw bytes)."""
    import select

    out = b""
    end = time.time() + seconds
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
    return out


def wait_exit(pid: int, fd: int, timeout: float) -> tuple[int | None, bytes]:
    """Read a pseudo-terminal's child until it ends: (its exit code, or None after `timeout` s; the
    bytes it wrote meanwhile)."""
    screen = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        screen += read_pty(fd, 0.1)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), screen
    return None, screen


def end_pty(pid: int, fd: int) -> None:
    """Kill a pseudo-terminal's child if it still runs, reap it, and close the terminal."""
    try:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    os.close(fd)


# --- the long real-process tests: `python -m pytest -m slow` runs them ------------------------------
# The default run (the README's test command, CI) leaves these out to stay under 10 minutes on 2
# cores; each repeats, with more processes or a longer run, what a faster test beside it checks.
SLOW = {
    "tests/checkpoint/test_resume_longer.py::test_the_cli_resume_of_the_bug_report_completes",
    "tests/integrations/test_lightning.py::test_dashboard_in_a_terminal_with_pytorch_lightning_and_no_progress_bar",
    "tests/health/test_health_dashboard.py::test_a_stall_abort_under_the_dashboard_gives_the_terminal_back_and_says_why",
    "tests/cli/test_live_runs.py::test_checkpoint_and_stop_commands_steer_a_live_run",
    "tests/dashboard/test_axes.py::test_linear_axes_put_each_label_on_its_value",
    "tests/cli/test_watch.py::test_watch_follows_a_live_run_and_q_then_l_leaves_it_running",
    "tests/distributed/test_ddp.py::test_a_crashing_rank_ends_the_run_within_seconds",
    "tests/phases/test_config_phases.py::test_gan_toml_runs_headless_and_resumes",
    "tests/run/test_api_learner.py::test_a_script_in_a_terminal_shows_the_dashboard_and_stops_from_outside",
    "tests/integrations/test_monitor_ranks.py::test_one_process_start_finish_is_the_with_form_and_an_uncaught_exception_fails",
    "tests/integrations/test_monitor_ranks.py::test_sigterm_to_rank_1_alone_stops_both_ranks_at_the_same_step",
    "tests/integrations/test_transformers.py::test_torchrun_two_ranks_obey_checkpoint_and_stop_at_the_same_step",
    "tests/integrations/test_transformers.py::test_the_dashboard_shows_the_trainers_metrics_and_no_tqdm_bar",
    "tests/integrations/test_monitor_ranks.py::test_the_dashboard_of_a_torchrun_script_shows_rank_0_and_q_y_stops_both",
    "tests/distributed/test_ddp.py::test_ddp_run_completes_with_a_full_run_dir",
    "tests/distributed/test_fsdp.py::test_another_world_size_resumes_from_a_checkpoint_directory",
    "tests/distributed/test_ddp.py::test_stop_and_checkpoint_commands_then_resume_latest_is_exact",
    "tests/distributed/test_ddp.py::test_two_ranks_match_one_process_with_the_same_global_batch[2-True]",
    "tests/health/test_health.py::test_under_ddp_a_rank_stuck_in_a_step_aborts_the_run_within_the_stall_time",
    "tests/cluster/test_cluster.py::test_torchrun_restart_after_a_rank_is_killed_ends_equal_to_an_uninterrupted_run",
    "tests/cluster/test_cluster.py::test_two_nodes_share_one_run_dir_and_either_one_stops_both",
    "tests/cluster/test_cluster.py::test_sigusr1_under_slurm_checkpoints_requeues_and_the_same_command_finishes_exactly",
    "tests/checkpoint/test_worker_augmentation.py::test_kill_9_during_an_augmenting_epoch_then_resume_latest_is_bitwise",
    "tests/cli/test_live_runs.py::test_kill_9_of_a_stateful_stream_then_resume_latest_is_bitwise_the_same_run",
    "tests/cli/test_live_runs.py::test_resume_of_a_live_run_is_refused",
    "tests/system/test_real_models.py::test_a_factory_that_returns_no_optimizer_under_ddp_is_the_same_one_line_and_exit_2",
    "tests/system/test_faults.py::test_a_closed_terminal_leaves_training_to_go_on_detached_to_its_end",
    "tests/system/test_faults.py::test_a_failing_screen_leaves_training_to_finish_with_console_lines",
    "tests/integrations/test_transformers.py::test_an_exception_in_train_ends_the_run_failed",
    "tests/integrations/test_monitor_ranks.py::test_an_exception_in_a_top_level_loop_without_finish_fails_the_run",
    "tests/checkpoint/test_checksums.py::test_resume_refuses_a_damaged_path_and_latest_resumes_from_the_newest_sound_one",
    "tests/distributed/test_fsdp.py::test_stop_then_resume_latest_continues_exactly",
    "tests/distributed/test_ddp.py::test_each_rank_reports_its_own_cpu_throughput_and_memory",
    "tests/distributed/test_ddp.py::test_two_ranks_match_one_process_with_the_same_global_batch[1-False]",
    "tests/distributed/test_ddp.py::test_pause_then_sigterm_stops_every_rank_with_a_checkpoint",
    "tests/run/test_runner_extras.py::test_what_the_model_prints_while_it_is_built_reaches_experiment_log[ddp rank 0]",
    "tests/cli/test_lr_find.py::test_a_divergent_sweep_stops_before_its_end",
    "tests/cli/test_lr_find.py::test_the_weights_it_starts_from_are_not_changed",
    "tests/run/test_heap.py::test_without_it_each_block_comes_back_from_the_kernel",
    "tests/run/test_notebook.py::test_lightning_and_the_hf_trainer_show_the_picture_and_no_bars_of_their_own",
    "tests/run/test_notebook.py::test_a_second_interrupt_ends_the_run_at_once[fit]",
    "tests/sweep/test_sweep.py::test_stop_then_the_same_command_continues_the_study[SIGUSR1]",
    "tests/sweep/test_sweep.py::test_two_workers_share_one_study_on_postgresql",
    "tests/integrations/test_lightning.py::test_ddp_two_ranks_one_run_checkpoint_and_stop_at_the_same_step",
    "tests/integrations/test_monitor_ranks.py::test_checkpoint_pause_and_stop_from_outside_reach_both_ranks",
    "tests/run/test_flops_from_a_config.py::test_run_logs_tflops_mfu_max_memory",
    "tests/checkpoint/test_resume_longer.py::test_an_explicit_total_steps_too_short_for_the_resumed_run_exits_2_before_training",
    "tests/cli/test_live_runs.py::test_sigterm_stops_gracefully_with_a_checkpoint",
    "tests/run/test_housekeeping_in_a_run.py::test_slow_steps_move_the_chores_to_threads_which_keep_their_pace",
    "tests/distributed/test_ddp.py::test_ranks_end_when_the_launcher_is_killed_while_they_start",
    "tests/dashboard/test_many_runs.py::test_hiding_a_run_takes_its_series_and_its_legend_entry_away",
    "tests/sweep/test_sweep.py::test_a_trial_of_a_worker_killed_with_kill_9_finishes_in_another_equal_to_an_uninterrupted_run",
}


# --- the device tests: `TUITRAIN_TEST_DEVICE=cuda python -m pytest -m device` -----------------------
# A chosen set of the fast tests that exercise devices and precision take the device they train on from
# the `test_device` fixture: the CPU unless TUITRAIN_TEST_DEVICE names another ("cuda", "cuda:1"). Every
# test that uses it (directly or through `exact_device`) is marked `device`; benchmarks/gpu/run.sh runs
# them on cuda. A device asked for that is not here is a usage error, never a quiet run on the CPU.
DEVICE_ENV = "TUITRAIN_TEST_DEVICE"


def requested_device() -> str:
    """TUITRAIN_TEST_DEVICE ("cpu", "cuda" or "cuda:N"; unset or empty: "cpu"); UsageError otherwise."""
    spec = os.environ.get(DEVICE_ENV, "").strip() or "cpu"
    if not re.fullmatch(r"cpu|cuda(:\d+)?", spec):
        raise pytest.UsageError(f"{DEVICE_ENV}={spec!r}: expected cpu, cuda or cuda:N")
    return spec


def device_missing(spec: str) -> str | None:
    """Why the device `spec` cannot be used in this process (None: it can)."""
    if spec == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        return (
            f"{DEVICE_ENV}={spec}, but CUDA is not available here (torch {torch.__version__}, "
            f"built with CUDA {torch.version.cuda})"
        )
    index = torch.device(spec).index
    if index is not None and index >= torch.cuda.device_count():
        return f"{DEVICE_ENV}={spec}, but there are only {torch.cuda.device_count()} CUDA device(s)"
    return None


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): a worker more than the cores. Many tests wait (on a kernel, a
    process's line, a timer) while their worker holds no core: with one worker a core, the cores were busy
    163% of the suite's time on two; with one more, 186%."""
    return len(os.sched_getaffinity(0)) + 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) + 1


# Python's bytecode caches, where PYTHONDONTWRITEBYTECODE is set (some CI images set it) and a fresh clone
# has none: each of the suite's few hundred processes would compile tuitrain's modules again (~0.3 s of CPU
# each) and each xdist worker rewrite every test module's asserts again. tuitrain is compiled once, here in
# the controller, and the test modules' caches are written as they are collected. A user's module that a test
# writes into its folder is never cached by this (a test may write it again within the same second).
if not os.environ.get("PYTEST_XDIST_WORKER"):
    import compileall

    compileall.compile_dir(Path(__file__).resolve().parents[1] / "tuitrain", quiet=1, workers=1)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = before


# --- Python's collector in the test processes ----------------------------------------------------------
# A dashboard test builds and drops a few thousand objects a frame (Textual's strips, segments, regions): at
# Python's default thresholds (700, 10, 10) the collector took a fifth of a dashboard test's CPU, most of it
# in full passes over everything the worker imported and kept. Collections come less often here; with the
# cache below emptied too, 70 dashboard tests collected with the whole suite (`-n 0 tests -k ...`) took 78.4 ->
# 70.7 CPU-s, the collector's share 15.9 -> 8.0 s. What a test checks in its own processes is untouched,
# and the CLI's and the kernels' processes keep Python's defaults. The collector is not frozen (gc.freeze):
# fit's own freeze (TrainingSession) would see a frozen heap and skip its work, which a test checks.
GC_THRESHOLDS = (10_000, 10, 10)


def _forget_dropped_widgets() -> None:
    """Textual 8's `StylesCache.get_inner_outer` is an lru_cache(1024) on a method: it keeps the last 1,024
    widgets' style caches (and every strip they drew) alive after their apps ended, for every later full
    collection to walk. Emptied after each test; a Textual without it is left alone."""
    module = sys.modules.get("textual._styles_cache")
    cached = getattr(getattr(module, "StylesCache", None), "get_inner_outer", None)
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    _forget_dropped_widgets()


def _rewrite_share(config) -> None:
    """A pytest-xdist worker of N rewrites the asserts of every Nth test file (and conftest) ahead of its
    collection, into the cache pytest reads them from (`__pycache__/*-pytest-X.pyc`, written even under
    PYTHONDONTWRITEBYTECODE, as the collection's are: see above): on a fresh clone each worker rewrote all of
    them, 5.5 CPU-s each, where a share is 5.5 / N. pytest's own functions
    (_pytest.assertion.rewrite, pinned with pytest in the test extra); anything amiss, and the worker rewrites
    what it imports itself, as before."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        share, workers = int(config.workerinput["workerid"].removeprefix("gw")), config.workerinput["workercount"]
        files = sorted(
            p for p in Path(__file__).parent.rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py"
        )
        for fn in files[share::workers]:
            cache_dir = rewrite.get_cache_dir(fn)
            pyc = cache_dir / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc, state.trace) is None and rewrite.try_makedirs(cache_dir):
                source_stat, co = rewrite._rewrite_test(fn, config)
                rewrite._write_pyc(state, co, source_stat, pyc)
    except Exception:  # noqa: BLE001 - a speed-up only
        return


def pytest_configure(config):
    gc.set_threshold(*GC_THRESHOLDS)
    if hasattr(config, "workerinput"):
        _rewrite_share(config)
    if requested_device() != "cpu":
        # cuBLAS's deterministic workspace, which `exact_device` needs; read when CUDA starts, so set now
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # a pytest-xdist worker (pyproject's addopts: one per core) trains on one thread: several workers
        # each with a thread per core would fight over the cores (the CLI's subprocesses get
        # OMP_NUM_THREADS=1 from cli_env for the same reason)
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def test_device() -> str:
    """The device a `device` test trains on: TUITRAIN_TEST_DEVICE, the CPU by default."""
    spec = requested_device()
    why = device_missing(spec)
    if why:
        pytest.fail(why, pytrace=False)
    return spec


@pytest.fixture
def exact_device(test_device):
    """`test_device`, for a test that asserts bit-for-bit equal runs: on CUDA with torch's deterministic
    algorithms on for the test (as a user who wants exact resumes sets them; tuitrain has no key of its
    own); the CPU is left as it is."""
    if test_device == "cpu":
        yield test_device
        return
    import torch

    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield test_device
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


# --- where the suite's time goes: TUITRAIN_TEST_CPU=FILE writes each test's CPU seconds ------------------
# Wall times (`--durations`) on a shared machine measure the neighbours as much as the test; CPU seconds
# (this process and the subprocesses it waited for: torch imports, CLI runs, ranks) do not. Each line of
# FILE: seconds, then the test's id; sort -rn FILE | head lists the costliest.
_CPU_FILE = os.environ.get("TUITRAIN_TEST_CPU", "")


def _cpu_seconds() -> float:
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + forkserver.cpu_seconds()


if _CPU_FILE:
    # and FILE.spawns: each process a test started (its first three arguments), for the costliest launches
    _spawned: list[str] = []

    def _audit(event: str, args: tuple) -> None:
        if event == "subprocess.Popen":
            _spawned.append(" ".join(map(str, list(args[1] or [args[0]])[:3])))
        elif event in ("os.fork", "os.forkpty"):
            _spawned.append(event)

    sys.addaudithook(_audit)

    # and FILE.imports: the test that first imported each of these in its process (a few CPU seconds each: a
    # second worker that runs a test needing one imports it again)
    _HEAVY = (
        "lightning", "transformers", "torchmetrics", "mlflow", "wandb", "trackio", "tensorboard", "optuna",
        "IPython", "jupyter_client", "scipy", "pandas", "aiohttp", "sqlalchemy", "torch._dynamo", "textual.app",
    )  # fmt: skip

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        before, began = _cpu_seconds(), time.time()
        _spawned.clear()
        had = [name for name in _HEAVY if name not in sys.modules]
        yield
        new = [name for name in had if name in sys.modules]
        if new:
            with open(_CPU_FILE + ".imports", "a") as f:
                f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', '-')} {item.nodeid} {' '.join(new)}\n")
        with open(_CPU_FILE, "a") as f:
            f.write(f"{_cpu_seconds() - before:.2f} {item.nodeid}\n")
        with open(_CPU_FILE + ".timeline", "a") as f:  # and when, on which worker: the wall clock's gaps
            f.write(f"{began:.2f} {time.time():.2f} {os.environ.get('PYTEST_XDIST_WORKER', '-')} {item.nodeid}\n")
        if _spawned:
            with open(_CPU_FILE + ".spawns", "a") as f:
                f.writelines(f"{item.nodeid}\t{s}\n" for s in _spawned)


def pytest_sessionfinish(session):
    forkserver.close_servers()


def pytest_unconfigure(config):
    """pytest's unraisable-exception plugin collects garbage five times as the session ends (its cleanup, after
    this hook), for the finalizers that raise: over a worker's heap (torch, every module the tests imported)
    each full collection took about 1.3 CPU-s, 19 CPU-s of the suite's last seconds. One collection here finds
    that garbage and runs its finalizers while pytest's hook still records what they raise (it reports them in
    that cleanup); what is left alive is then frozen (gc.freeze: left out of later collections), so pytest's
    five go over only the objects made after it."""
    gc.collect()
    gc.freeze()


# the files that keep one xdist worker busy longest, longest first (their walls on a worker, from
# TUITRAIN_TEST_CPU's FILE.timeline on 2 cores): pyproject's `--dist loadfile` hands out whole files, in
# collection order with `--no-loadscope-reorder` (xdist otherwise hands out the files with the most tests first:
# the gpu script's one test started 6 minutes in, and ended the run alone). A long file started last while the
# other workers have run out is the run's tail; the short files after these even out the ends
FIRST = (
    "tests/sweep/test_sweep.py",  # ~150 s
    "tests/dashboard/test_key_fuzz.py",  # ~90 s
    "tests/test_lint.py",  # ~65 s (mypy)
    "tests/system/test_gpu_script.py",  # ~60 s
    "tests/integrations/test_lightning.py",  # with the rest of FRAMEWORKS: ~60 s
    "tests/run/test_notebook.py",  # ~40 s each below
    "tests/dashboard/test_app.py",
    "tests/dashboard/test_window_fails_alone.py",
    "tests/cli/test_exit_codes.py",
    "tests/dashboard/test_truthful_screens.py",
    "tests/sources/test_wandb.py",
    "tests/run/test_notebook_interrupt_picture.py",
    "tests/run/test_heap.py",
)

# the files whose tests import Lightning, torchmetrics or transformers in the worker that runs them (~5 CPU s
# of imports in each worker: torchmetrics imports transformers and scipy; FILE.imports of TUITRAIN_TEST_CPU
# says which): one work unit, so one worker imports them, running these files one after the other, handed
# out where the first of them stands in FIRST
FRAMEWORKS = (
    "tests/integrations/test_lightning.py",
    "tests/sources/test_registry.py",
    "tests/core/test_weights_and_torchmetrics.py",
    "tests/sources/test_lightning_csv.py",
    "tests/integrations/test_transformers.py",
    "tests/system/test_real_models.py",
    "tests/sources/test_tensorboard.py",
    "tests/integrations/test_newcomer_lightning.py",
    "tests/integrations/test_newcomer_transformers.py",
)


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (pyproject's addopts), each file a work unit as xdist makes them, but FRAMEWORKS one
    work unit together (xdist's LoadFileScheduling._split_scope, the method that names a test's unit: the
    test extra pins pytest-xdist<4)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return FRAMEWORKS[0] if path in FRAMEWORKS else path

    return FileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)
        if "test_device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)
    first = {path: i for i, path in enumerate(FIRST)}
    first.update(dict.fromkeys(FRAMEWORKS, first.get(FRAMEWORKS[0], len(FIRST))))  # together, in FIRST's order
    items.sort(key=lambda item: first.get(item.nodeid.partition("::")[0], len(FIRST)))  # stable: the rest as collected


def pytest_collection_finish(session):
    """One clear error, before any test runs, when the selected tests need a device that is not here."""
    if session.config.option.collectonly:
        return
    spec = requested_device()
    if spec != "cpu" and any("test_device" in getattr(item, "fixturenames", ()) for item in session.items):
        why = device_missing(spec)
        if why:
            raise pytest.UsageError(why)
