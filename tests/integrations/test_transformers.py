"""`TuitrainCallback` in a real `transformers.Trainer` (a 2-layer GPT-2 built from a config, on CPU):
the run directory it leaves, the Trainer's metrics split into train and valid, `tuitrain checkpoint`
and `tuitrain stop` obeyed in one process and under torchrun, a failed train(), and the dashboard in
a pseudo-terminal."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

from tests.conftest import cli_env, last_train_step, read_events, read_pty, wait_for, wait_exit, end_pty  # noqa: E402
from tuitrain.core.control import FileControl  # noqa: E402
from tuitrain.core.fsutil import tree_sha256  # noqa: E402

# transformers itself (and tuitrain's callback, the tiny GPT-2 and the user's callbacks, which import it) is
# imported by the tests that use it: importing it costs each pytest-xdist worker ~3 s of its start, and one
# worker runs this file

SCRIPT = Path(__file__).parent / "transformers_scripts" / "tiny_gpt2.py"
ROOT = Path(__file__).resolve().parents[2]
TQDM_BAR = re.compile(r"\| *\d+/\d+ \[\d\d:\d\d")  # tqdm's "| 12/3000 [00:01<...": tuitrain says it/s too


def _run_json(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "run.json").read_text())


def _index(run_dir: Path) -> list[dict]:
    p = Path(run_dir) / "checkpoint" / "index.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return []


def _script_env() -> dict:
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def test_the_trainers_log_keys_split_into_train_and_valid():
    from tuitrain.integrations.transformers import split_metrics

    assert split_metrics({"loss": 3.9, "grad_norm": 1.5, "learning_rate": 5e-5, "epoch": 0.25}) == (
        {"loss": 3.9, "grad_norm": 1.5, "lr": 5e-5},
        {},
    )
    assert split_metrics(
        {
            "eval_loss": 3.1,
            "eval_runtime": 0.1,
            "eval_samples_per_second": 80.0,
            "eval_steps_per_second": 20.0,
            "epoch": 1.0,
        }
    ) == ({}, {"loss": 3.1})
    # the end-of-training summary: a mean loss over the run and timings, no point of any curve
    assert split_metrics(
        {
            "train_runtime": 1.2,
            "train_samples_per_second": 9.0,
            "train_steps_per_second": 2.0,
            "total_flos": 1e9,
            "train_loss": 3.5,
            "epoch": 2.0,
        }
    ) == ({}, {})
    assert split_metrics(
        {
            "val/acc": 0.5,
            "loss/valid": 2.0,
            "train/loss": 3.0,
            "valid_f1": 0.25,
            "eval_wiki_loss": 4.0,
            "train_acc": 0.75,
            "name": "x",
            "flag": True,
        }
    ) == ({"loss": 3.0, "acc": 0.75}, {"acc": 0.5, "loss": 2.0, "f1": 0.25, "wiki_loss": 4.0})


def test_a_trainer_run_leaves_a_run_directory(tmp_path):
    from tests.integrations.transformers_scripts.callbacks import Histograms
    from tests.integrations.transformers_scripts.tiny_gpt2 import trainer_for
    from tuitrain.integrations.transformers import TuitrainCallback

    callback = TuitrainCallback(dashboard=False, dir=tmp_path / "runs")
    trainer = trainer_for(tmp_path, [callback, Histograms(callback)], max_steps=10, save_steps=5, eval_steps=5)
    trainer.train()
    run_dir = callback.monitor.run_dir
    assert run_dir.parent == tmp_path / "runs" / "GPT2LMHeadModel"  # named after the model's class
    info = _run_json(run_dir)
    assert info["status"] == "completed" and info["exit_code"] == 0 and info["step"] == 10
    events = read_events(run_dir)
    started = next(e for e in events if e["event"] == "RunStarted")
    assert started["max_steps"] == 10 and started["batch_size"] == 4
    assert started["loop"] == "transformers"  # what the dashboard's q dialog words a stop by
    train = [e for e in events if e["event"] == "MetricsLogged" and e["split"] == "train"]
    assert [e["step"] for e in train] == list(range(1, 11))
    assert all(set(e["metrics"]) == {"loss", "lr", "grad_norm"} for e in train), train[-1]
    assert train[0]["metrics"]["lr"] == pytest.approx(5e-5)
    valid = [(e["step"], set(e["metrics"])) for e in events if e["event"] == "MetricsLogged" and e["split"] == "valid"]
    assert valid == [(5, {"loss"}), (10, {"loss"})]
    hists = [e for e in events if e["event"] == "HistogramLogged"]
    assert [(e["key"], e["step"]) for e in hists] == [("weights/lm_head", 5), ("weights/lm_head", 10)]
    assert sum(hists[0]["counts"]) == trainer.model.lm_head.weight.numel()
    config = (run_dir / "config.toml").read_text()
    assert "[trainer]" in config and "max_steps = 10" in config and 'class = "GPT2LMHeadModel"' in config
    # the Trainer's own scheduled saves, listed where they are, with their sha256
    index = _index(run_dir)
    folders = [Path(trainer.args.output_dir).resolve() / f"checkpoint-{n}" for n in (5, 10)]
    assert [(e["step"], e["file"]) for e in index] == [(5, str(folders[0])), (10, str(folders[1]))]
    assert [e["sha256"] for e in index] == [tree_sha256(f) for f in folders]


def test_checkpoint_and_stop_requests_are_obeyed_in_one_process(tmp_path):
    from tests.integrations.transformers_scripts.callbacks import Gate
    from tests.integrations.transformers_scripts.tiny_gpt2 import trainer_for
    from tuitrain.integrations.transformers import TuitrainCallback

    gate = Gate()
    callback = TuitrainCallback(experiment="steer", run_dir=tmp_path / "run", dashboard=False)
    # the gate before tuitrain's callback: the request is in by the time tuitrain looks at that step
    trainer = trainer_for(tmp_path, [gate, callback], max_steps=50, save_steps=0)

    def steer() -> None:
        for n in range(1, 3):
            gate.wait_for_step(n)
            gate.release(n)
        gate.wait_for_step(3)
        FileControl(tmp_path / "run").request_checkpoint()  # what `tuitrain checkpoint RUN_DIR` drops
        wait_for(lambda: callback.monitor.checkpoint_requested, timeout=30, what="the checkpoint request")
        gate.release(5)
        gate.wait_for_step(6)
        FileControl(tmp_path / "run").request_stop()
        wait_for(lambda: callback.monitor.interrupter.stop_requested, timeout=30, what="the stop request")
        gate.release(10_000)

    driver = threading.Thread(target=steer, daemon=True)
    driver.start()
    trainer.train()
    driver.join(timeout=60)
    assert trainer.state.global_step == 6 < 50  # it stopped after the step the request came in
    info = _run_json(tmp_path / "run")
    assert info["status"] == "interrupted" and info["exit_code"] == 130 and info["step"] == 6
    folder = Path(trainer.args.output_dir).resolve() / "checkpoint-3"
    assert folder.is_dir()  # save_strategy="no": the Trainer saved because it was asked to
    assert sorted(p.name for p in folder.parent.iterdir()) == ["checkpoint-3"]  # no save at the stop either
    index = _index(tmp_path / "run")
    assert [(e["step"], e["file"], e["reason"]) for e in index] == [(3, str(folder), "request")]
    assert index[0]["sha256"] == tree_sha256(folder) and index[0]["metrics"]["train/loss"] > 0
    commands = [e["command"] for e in read_events(tmp_path / "run") if e["event"] == "ControlReceived"]
    assert commands == ["checkpoint", "stop"]


def test_an_exception_in_train_ends_the_run_failed(tmp_path):
    r = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--max-steps", "20", "--fail-at", "3", "--dashboard", "false"],
        env=_script_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1 and "failed on purpose at step 3" in r.stderr, r.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs" / "gpt2").iterdir()
    info = _run_json(run_dir)
    assert info["status"] == "failed" and info["exit_code"] == 1, info
    assert "failed on purpose" in info["error"]
    assert read_events(run_dir)[-1]["event"] == "RunFailed"


def test_a_train_that_raised_is_failed_when_the_next_train_begins(tmp_path):
    """The exception caught by the user's code (a notebook cell): no excepthook ever sees it, yet
    the run does not stay running, nor end as completed."""
    from tests.integrations.transformers_scripts.callbacks import FailOnce
    from tests.integrations.transformers_scripts.tiny_gpt2 import trainer_for
    from tuitrain.integrations.transformers import TuitrainCallback

    callback = TuitrainCallback(dashboard=False, dir=tmp_path / "runs")
    trainer = trainer_for(tmp_path, [callback, FailOnce(2)], max_steps=3)
    with pytest.raises(RuntimeError, match="failed once"):
        trainer.train()
    first = callback.monitor.run_dir
    assert _run_json(first)["status"] == "running"
    trainer.train()
    second = callback.monitor.run_dir
    assert second != first
    info = _run_json(first)
    assert info["status"] == "failed" and info["exit_code"] == 1 and "ended by an exception" in info["error"]
    assert _run_json(second)["status"] == "completed"


def test_torchrun_two_ranks_obey_checkpoint_and_stop_at_the_same_step(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(SCRIPT),
        str(tmp_path),
        "--max-steps",
        "400",
        "--save-steps",
        "1000",
        "--sleep",
        "0.05",
        "--dashboard",
        "auto",
    ]
    log = open(tmp_path / "torchrun.log", "w+")
    proc = subprocess.Popen(cmd, env=_script_env(), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        runs = tmp_path / "runs" / "gpt2"
        run_dir = wait_for(
            lambda: next(iter(runs.iterdir()), None) if runs.is_dir() else None, timeout=300, what="the run directory"
        )
        wait_for(lambda: last_train_step(run_dir) >= 3 or proc.poll() is not None, timeout=300, what="step 3")
        FileControl(run_dir).request_checkpoint()
        wait_for(lambda: _index(run_dir) or proc.poll() is not None, timeout=120, what="the requested checkpoint")
        FileControl(run_dir).request_stop()
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert code == 0, output[-4000:]
    assert [p.name for p in runs.iterdir()] == [run_dir.name]  # one run directory for both ranks
    assert {(tmp_path / f"run-dir-rank{r}.txt").read_text() for r in (0, 1)} == {str(run_dir)}
    final = {int((tmp_path / f"final-step-rank{r}.txt").read_text()) for r in (0, 1)}
    assert len(final) == 1, f"the ranks stopped at different steps: {final}"
    (step,) = final
    assert 3 <= step < 400
    info = _run_json(run_dir)
    assert info["status"] == "interrupted" and info["exit_code"] == 130 and info["step"] == step
    started = next(e for e in read_events(run_dir) if e["event"] == "RunStarted")
    assert started["batch_size"] == 8  # 4 a device, 2 ranks
    index = _index(run_dir)
    hf = (tmp_path / "hf").resolve()
    # the requested checkpoint, then the one the Trainer writes where it stops (it keeps checkpoints)
    assert [e["reason"] for e in index][0] == "request" and len(index) == 2, index
    assert index[1]["step"] == step and index[1]["file"] == str(hf / f"checkpoint-{step}")
    for e in index:
        assert e["sha256"] == tree_sha256(e["file"])
    assert sorted(p.name for p in hf.iterdir()) == sorted(Path(e["file"]).name for e in index)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty")
def test_the_dashboard_shows_the_trainers_metrics_and_no_tqdm_bar(tmp_path):
    import pty

    cmd = [sys.executable, str(SCRIPT), str(tmp_path), "--max-steps", "3000", "--sleep", "0.02"]
    env = dict(_script_env(), TERM="xterm-256color", COLUMNS="120", LINES="40")
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(tmp_path)
        os.execvpe(cmd[0], cmd, env)
    runs = tmp_path / "runs" / "gpt2"
    try:
        screen = b""
        deadline = time.time() + 300  # two processes import torch (and one transformers, one textual)
        run_dir = None
        code = None
        while time.time() < deadline and code is None:
            screen += read_pty(fd, 0.2)
            if run_dir is None and runs.is_dir():
                run_dir = next(iter(runs.iterdir()), None)
            if run_dir and last_train_step(run_dir) >= 20 and b"loss" in screen and b"progress" in screen:
                break
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
        assert code is None, f"the script ended early ({code}): {screen[-3000:]!r}"
        assert run_dir is not None and b"\x1b[?1049h" in screen, screen[-2000:]  # the dashboard's own screen
        screen += read_pty(fd, 1.0)
        text = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", screen)
        assert b"loss" in text
        assert not TQDM_BAR.search(text.decode(errors="replace"))  # no tqdm bar on the screen
        os.write(fd, b"q")
        screen += read_pty(fd, 1.0)
        os.write(fd, b"y")
        code, more = wait_exit(pid, fd, 120)
        screen += more
        assert code == 0, screen[-2000:]
        info = _run_json(run_dir)
        assert info["status"] == "interrupted" and info["exit_code"] == 130
        assert 20 <= int((tmp_path / "final-step-rank0.txt").read_text()) < 3000
        commands = [(e["command"], e["source"]) for e in read_events(run_dir) if e["event"] == "ControlReceived"]
        assert commands == [("stop", "dashboard")], commands
        assert not TQDM_BAR.search((run_dir / "experiment.log").read_text())  # nor in the output panel's lines
    finally:
        end_pty(pid, fd)
