"""`tuitrain.integrations.lightning.TuitrainCallback` with real Lightning on CPU: the run directory a
fit leaves (metrics split by name, config, max_steps), `tuitrain checkpoint` and `tuitrain stop`
honoured in one process and across 2 DDP ranks (Lightning's own launcher), `pytorch_lightning` as well
as `lightning.pytorch`, and the dashboard in a pseudo-terminal with Lightning's progress bar off.

The user's script is lightning_scripts/fit.py; the tests in this process import its LightningModule.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from operator import attrgetter
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import cli_env, end_pty, last_train_step, python_run, read_events, read_pty, wait_exit, wait_for

from tuitrain.core.control import FileControl

if importlib.util.find_spec("lightning") is None:
    pytest.skip("Lightning is not installed (the test extra)", allow_module_level=True)

FIT = Path(__file__).parent / "lightning_scripts" / "fit.py"
WAIT = 120.0  # seconds any one condition may take on a loaded 2-core machine (ranks import Lightning)
STEPS_PER_EPOCH = 8  # 64 items, batch 8


def _script():
    spec = importlib.util.spec_from_file_location("tuitrain_lightning_fit", FIT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def lit() -> SimpleNamespace:
    """Lightning, tuitrain's callback and what these tests build on them, imported by the first test that
    needs them (not as the file is collected: ~5 s of CPU in each pytest-xdist worker, which all collect it)."""
    import lightning.pytorch as L

    from tuitrain.integrations.lightning import TuitrainCallback, split_name

    class AtStep(L.Callback):
        """At global step `step`: `action()`, then wait (it must come true) until `taken()` says the
        tuitrain callback after this one in the list has the request, so it acts at this very step."""

        def __init__(self, step: int, action, taken) -> None:
            self.step, self.action, self.taken = step, action, taken

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step == self.step:
                self.action()
                wait_for(self.taken, timeout=30, what="the request to reach the Monitor")

    class Samples(L.Callback):
        """What a LightningModule does in its validation_epoch_end: an image batch and a text, through the
        trainer's TuitrainCallback, at the global step (the default)."""

        def on_validation_epoch_end(self, trainer, pl_module) -> None:
            if not trainer.sanity_checking:
                import torch

                tc = TuitrainCallback.of(pl_module.trainer)
                tc.log_image("samples", torch.rand(4, 3, 8, 8))
                tc.log_text("note", f"epoch {trainer.current_epoch}")

    fit_script = _script()
    return SimpleNamespace(
        L=L,
        TuitrainCallback=TuitrainCallback,
        split_name=split_name,
        AtStep=AtStep,
        Samples=Samples,
        fit_script=fit_script,
        TinyNet=fit_script.module_class(L),
    )


def trainer(callbacks, **kw):
    kw = {"max_epochs": 2, "log_every_n_steps": 1, **kw}
    return lit().L.Trainer(
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        accelerator="cpu",
        **kw,
    )


def run_json(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "run.json").read_text() or "{}")
    except (OSError, ValueError):
        return {}


def metrics_by_split(run_dir: Path) -> dict[str, list[tuple[int, dict]]]:
    out: dict[str, list] = {"train": [], "valid": []}
    for e in read_events(run_dir):
        if e["event"] == "MetricsLogged":
            out[e["split"]].append((e["step"], e["metrics"]))
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "key, split, name",
    [
        ("train_loss", "train", "loss"),
        ("val_loss", "valid", "loss"),
        ("valid_acc", "valid", "acc"),
        ("train/acc", "train", "acc"),
        ("val/acc", "valid", "acc"),
        ("loss/val", "valid", "loss"),
        ("loss/train", "train", "loss"),
        ("eval_f1", "valid", "f1"),
        ("loss", "train", "loss"),
        ("value_loss", "train", "value_loss"),
        ("val_loss/dataloader_idx_1", "valid", "loss/dataloader_idx_1"),
    ],
)
def test_metric_names_split_into_train_and_valid(key, split, name):
    assert lit().split_name(key) == (split, name)


def test_the_callback_is_a_lightning_callback_that_pickles():
    L, TuitrainCallback = attrgetter("L", "TuitrainCallback")(lit())
    cb = TuitrainCallback(experiment="x", dashboard=False, dir="elsewhere")
    assert isinstance(cb, L.Callback) and isinstance(cb, TuitrainCallback)
    back = pickle.loads(pickle.dumps(cb))  # ddp_spawn sends the trainer's callbacks to its processes
    assert isinstance(back, L.Callback) and (back.experiment, back.dir) == ("x", "elsewhere")


def test_fit_writes_the_run_and_takes_a_checkpoint_request(tmp_path):
    L, TuitrainCallback, AtStep, Samples, TinyNet, fit_script = attrgetter(
        "L", "TuitrainCallback", "AtStep", "Samples", "TinyNet", "fit_script"
    )(lit())
    cb = TuitrainCallback(dashboard=False, dir=tmp_path / "runs")
    ask = AtStep(
        3, lambda: FileControl(cb.monitor.run_dir).request_checkpoint(), lambda: cb.monitor.checkpoint_requested
    )
    t = trainer([ask, cb, Samples()], log_every_n_steps=2)
    t.fit(fit_script.module_class(L, on_epoch_too=True)(), *fit_script.loaders())

    runs = list((tmp_path / "runs" / "tinynet").iterdir())  # the module's class name, in lower case
    assert len(runs) == 1
    run_dir = runs[0]
    info = run_json(run_dir)
    assert (info["status"], info["exit_code"], info["step"]) == ("completed", 0, 2 * STEPS_PER_EPOCH)

    config = tomllib.loads((run_dir / "config.toml").read_text())
    assert (config["lr"], config["hidden"]) == (0.05, 16)
    assert config["trainer"]["max_epochs"] == 2
    started = next(e for e in read_events(run_dir) if e["event"] == "RunStarted")
    assert (started["max_steps"], started["batch_size"]) == (2 * STEPS_PER_EPOCH, 8)
    assert started["loop"] == "lightning"  # what the dashboard's q dialog words a stop by

    media = [(e["key"], e["step"], e["path"]) for e in read_events(run_dir) if e["event"] == "MediaLogged"]
    assert sorted(media) == [
        ("note", 8, "media/note/8.txt"),
        ("note", 16, "media/note/16.txt"),
        ("samples", 8, "media/samples/8.png"),
        ("samples", 16, "media/samples/16.png"),
    ]
    assert (run_dir / "media/note/16.txt").read_text() == "epoch 1"
    assert (run_dir / "media/samples/8.png").read_bytes()[:4] == b"\x89PNG"
    logged = metrics_by_split(run_dir)
    train = [e for e in read_events(run_dir) if e["event"] == "MetricsLogged" and e["split"] == "train"]
    step_rows = [(e["step"], e["metrics"]) for e in train if e["scope"] == "step" and "loss" in e["metrics"]]
    assert [s for s, _ in step_rows] == list(range(2, 17, 2))  # log_every_n_steps=2
    assert all(set(m) == {"loss", "lr"} and m["lr"] == 0.05 for _, m in step_rows)
    # on_epoch=True values, per epoch: `train/acc` (no suffix: a step value, as the CSV reader reads it) and
    # `train_loss_epoch`, the epoch scope of `loss`
    epoch_rows = [(e["scope"], e["step"], set(e["metrics"])) for e in train if "lr" not in e["metrics"]]
    assert epoch_rows == [("step", 8, {"acc"}), ("epoch", 8, {"loss"}), ("step", 16, {"acc"}), ("epoch", 16, {"loss"})]
    assert train[-1]["metrics"]["loss"] == pytest.approx(float(t.callback_metrics["train_loss_epoch"]))
    assert [(s, set(m)) for s, m in logged["valid"]] == [(8, {"loss", "acc"}), (16, {"loss", "acc"})]
    assert logged["valid"][-1][1]["loss"] == pytest.approx(float(t.callback_metrics["val_loss"]))

    index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    assert [(e["file"], e["step"], e["reason"]) for e in index] == [("epoch-0001-step-00000003.ckpt", 3, "request")]
    path = run_dir / "checkpoint" / index[0]["file"]
    assert index[0]["sha256"] == sha256(path)
    assert __import__("torch").load(path, weights_only=False)["global_step"] == 3
    again = trainer([], max_epochs=1)  # Lightning resumes from it: step 3 of epoch 0, on to its end
    again.fit(TinyNet(), *fit_script.loaders(), ckpt_path=path)
    assert again.global_step == STEPS_PER_EPOCH


def test_tuitrain_stop_from_another_thread_ends_fit_at_that_step(tmp_path):
    TuitrainCallback, AtStep, TinyNet, fit_script = attrgetter("TuitrainCallback", "AtStep", "TinyNet", "fit_script")(
        lit()
    )
    cb = TuitrainCallback(experiment="stopped", dashboard=False, dir=tmp_path / "runs")
    reached = threading.Event()

    def shell() -> None:  # another shell: `tuitrain stop RUN_DIR` once the run is at step 5
        if reached.wait(WAIT):
            FileControl(cb.monitor.run_dir).request_stop()

    sender = threading.Thread(target=shell, daemon=True)
    sender.start()
    stop_at = AtStep(5, reached.set, lambda: cb.monitor.stop_requested)
    t = trainer([stop_at, cb], max_epochs=50)
    t.fit(TinyNet(), *fit_script.loaders())
    sender.join(5)

    assert t.global_step == 5 < 50 * STEPS_PER_EPOCH
    run_dir = next((tmp_path / "runs" / "stopped").iterdir())
    info = run_json(run_dir)
    assert (info["status"], info["exit_code"], info["step"]) == ("interrupted", 130, 5)
    assert [e["command"] for e in read_events(run_dir) if e["event"] == "ControlReceived"] == ["stop"]
    index = json.loads((run_dir / "checkpoint" / "index.json").read_text())
    assert [e["step"] for e in index] == [5]  # a stop saves a checkpoint first, as `tuitrain stop` says


def test_an_exception_in_training_ends_the_run_failed(tmp_path):
    TuitrainCallback, TinyNet, fit_script = attrgetter("TuitrainCallback", "TinyNet", "fit_script")(lit())

    class Exploding(TinyNet):
        def training_step(self, batch, batch_idx):
            if self.global_step == 3:
                raise RuntimeError("exploded on purpose")
            return super().training_step(batch, batch_idx)

    cb = TuitrainCallback(dashboard=False, run_dir=tmp_path / "run")
    with pytest.raises(RuntimeError, match="exploded on purpose"):
        trainer([cb]).fit(Exploding(), *fit_script.loaders())
    info = run_json(tmp_path / "run")
    assert info["status"] == "failed" and "exploded on purpose" in info["error"]
    assert cb.monitor is None  # finished: a next fit opens a run of its own


def test_ddp_two_ranks_one_run_checkpoint_and_stop_at_the_same_step(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    log = open(tmp_path / "fit.out", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(FIT),
            "--out",
            str(out),
            "--root",
            str(tmp_path / "runs"),
            "--devices",
            "2",
            "--max-epochs",
            "1000",
            "--sleep",
            "0.05",
        ],
        cwd=tmp_path,
        env=cli_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def tuitrain(command: str, run_dir: Path) -> None:
        r = subprocess.run(
            [sys.executable, "-m", "tuitrain", command, str(run_dir)],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert r.returncode == 0, r.stdout + r.stderr

    def index() -> list:
        try:
            return json.loads((run_dir / "checkpoint" / "index.json").read_text())
        except (OSError, ValueError):
            return []

    try:
        experiment = tmp_path / "runs" / "tinynet"
        run_dir = wait_for(
            lambda: experiment.is_dir() and next(experiment.iterdir(), None), timeout=WAIT, what="the run directory"
        )
        wait_for(lambda: last_train_step(run_dir) >= 3, timeout=WAIT, what="training under DDP")
        tuitrain("checkpoint", run_dir)
        wait_for(index, timeout=WAIT, what="the requested checkpoint")
        tuitrain("stop", run_dir)
        code = proc.wait(timeout=WAIT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert code == 0, output[-3000:]
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["children"] == [0], output[-3000:]  # rank 1, started by Lightning's launcher, exited 0
    assert ranks[0]["global_step"] == ranks[1]["global_step"]  # both left at the same step
    assert [p.name for p in experiment.iterdir()] == [run_dir.name]  # one run directory: rank 0's
    info = run_json(run_dir)
    assert (info["status"], info["exit_code"], info["step"]) == ("interrupted", 130, ranks[0]["global_step"])
    entries = index()
    # `tuitrain checkpoint`, then the stop's own: both asked for, never deleted by keep_last
    assert [(e["reason"], e.get("requested_by")) for e in entries] == [("request", "command"), ("stop", "stop")]
    assert entries[-1]["step"] == ranks[0]["global_step"]
    for e in entries:
        path = run_dir / "checkpoint" / e["file"]
        assert e["sha256"] == sha256(path)
        assert __import__("torch").load(path, weights_only=False)["global_step"] == e["step"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty")
def test_dashboard_in_a_terminal_with_pytorch_lightning_and_no_progress_bar(tmp_path):
    """A person at a terminal runs a `pytorch_lightning` script: the dashboard shows its metrics, no
    Lightning progress bar reaches the screen (nor output.log: the bar is off), `q` `y` stops it."""
    import pty

    pytest.importorskip("pytorch_lightning")
    out = tmp_path / "out"
    out.mkdir()
    cmd = [
        sys.executable,
        str(FIT),
        "--out",
        str(out),
        "--root",
        str(tmp_path / "runs"),
        "--package",
        "pytorch_lightning",
        "--max-epochs",
        "1000",
        "--sleep",
        "0.03",
        "--dashboard",
        "auto",
    ]
    env = dict(cli_env(), TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tmp_path)
        os.execvpe(cmd[0], cmd, env)
    experiment = tmp_path / "runs" / "tinynet"
    screen = b""
    try:
        deadline = time.time() + WAIT
        run_dir = None
        while time.time() < deadline:
            screen += read_pty(fd, 0.2)
            run_dir = run_dir or (experiment.is_dir() and next(experiment.iterdir(), None))
            if run_dir and last_train_step(run_dir) >= 5 and b"progress" in screen and b"loss" in screen:
                break
        assert run_dir and b"\x1b[?1049h" in screen and b"loss" in screen, screen[-3000:]
        os.write(fd, b"q")
        screen += read_pty(fd, 1.0)
        os.write(fd, b"y")
        code, more = wait_exit(pid, fd, WAIT)
        screen += more
    finally:
        end_pty(pid, fd)
    assert code == 0, screen[-3000:]
    info = run_json(run_dir)
    assert (info["status"], info["exit_code"]) == ("interrupted", 130)
    assert [e["source"] for e in read_events(run_dir) if e["event"] == "ControlReceived"] == ["dashboard"]
    report = json.loads((out / "rank-0.json").read_text())
    assert report["modules"] == ["pytorch_lightning"]  # lightning itself never imported
    assert "pytorch_lightning.callbacks.callback.Callback" in report["bases"]
    # Lightning's bar ("Epoch 3/999 ━━ ... it/s" or "Epoch 3: 40%|...") never reached the terminal,
    # and was off rather than only redirected: output.log has what the script printed, not the bar
    assert b"Epoch " not in screen
    assert "training step" in (run_dir / "experiment.log").read_text()
    assert all("Epoch " not in (run_dir / name).read_text() for name in ("experiment.log", "output.log"))


def test_headless_lines_count_epochs_as_run_json_does_and_no_progress_bar_follows(tmp_path):
    """stdout not a terminal: the console's lines (issue 51: they read `epoch 0/10` to the end while
    run.json said 10, and Lightning's bar was printed once more after the run's last line)."""
    out = tmp_path / "out"
    out.mkdir()
    cmd = [
        sys.executable,
        str(FIT),
        "--out",
        str(out),
        "--root",
        str(tmp_path / "runs"),
        "--max-epochs",
        "3",
        "--sleep",
        "0.1",
        "--dashboard",
        "auto",
    ]
    r = python_run(cmd[1:], tmp_path, cli_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / "tinynet").iterdir()
    assert run_json(run_dir)["epoch"] == 3
    progress = [line for line in r.stdout.splitlines() if re.match(r"(epoch \S+ · )?step \d+/", line)]
    assert progress, r.stdout
    epochs = [int(line.split()[1].split("/")[0]) for line in progress]
    assert all(line.startswith("epoch ") and line.split()[1].endswith("/3") for line in progress), progress
    assert 1 <= epochs[0] and epochs == sorted(epochs) and epochs[-1] >= 2, progress
    assert "training completed" in r.stdout.splitlines() and "completed: completed" not in r.stdout
    assert r.stdout.rstrip().splitlines()[-1].startswith("status completed · exit code 0 · epoch 3 · step 24")
    assert "Epoch " not in r.stdout + r.stderr  # Lightning's bar (rich or tqdm): off under the console
