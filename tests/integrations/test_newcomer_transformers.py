"""Defects a newcomer found in the Hugging Face Trainer callback: `tuitrain stop` promised a checkpoint
that a Trainer with save_strategy="no" never writes, and the run ended at the step of the Trainer's last
log (every `logging_steps`) rather than at its global step. One real Trainer run (a 2-layer GPT-2 on CPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers is not installed", allow_module_level=True)

from tests.conftest import cli_env, read_events  # noqa: E402


def _stop(run_dir: Path) -> subprocess.CompletedProcess:
    """`tuitrain stop RUN_DIR` from another shell."""
    return subprocess.run(
        [sys.executable, "-m", "tuitrain", "stop", str(run_dir)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_stop_says_no_checkpoint_when_save_strategy_is_no_and_the_run_ends_at_the_global_step(tmp_path):
    from tests.integrations.transformers_scripts.callbacks import Gate
    from tests.integrations.transformers_scripts.tiny_gpt2 import trainer_for
    from tuitrain.integrations.transformers import TuitrainCallback

    gate = Gate()
    run_dir = tmp_path / "run"
    callback = TuitrainCallback(experiment="newcomer", run_dir=run_dir, dashboard=False)
    # the gate before tuitrain's callback: the request is in by the time tuitrain looks at that step
    trainer = trainer_for(tmp_path, [gate, callback], max_steps=50, save_steps=0, eval_steps=10)  # save_strategy="no"
    trainer.args.logging_steps = 4  # the Trainer logs at 4, 8 ...: it stops at 5, between two logs
    said: list[subprocess.CompletedProcess] = []

    def shell() -> None:
        for n in range(1, 5):
            gate.wait_for_step(n)
            gate.release(n)
        gate.wait_for_step(5)
        said.append(_stop(run_dir))  # returns once the run took the request
        gate.release(10_000)

    driver = threading.Thread(target=shell, daemon=True)
    driver.start()
    trainer.train()
    driver.join(timeout=120)

    (r,) = said
    assert r.returncode == 0, r.stderr
    assert "took the request to stop after this step" in r.stdout, r.stdout
    assert 'no checkpoint: its save_strategy is "no"' in r.stdout and "saves a checkpoint" not in r.stdout, r.stdout
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").glob("checkpoint-*"))  # none was written

    # the Trainer's global step is the truth: its last log (the end-of-training summary) says 5
    assert trainer.state.global_step == 5 and trainer.state.log_history[-1]["step"] == 5
    info = json.loads((run_dir / "run.json").read_text())
    # stopped by the user: interrupted, 130 (the Trainer was told to keep no checkpoint; it kept none)
    assert (info["status"], info["exit_code"], info["step"]) == ("interrupted", 130, 5)
    end = read_events(run_dir)[-1]
    assert (end["event"], end["step"]) == ("RunFinished", 5)
    logged = [(e["split"], e["step"]) for e in read_events(run_dir) if e["event"] == "MetricsLogged"]
    assert logged == [("train", 4)]  # what the Trainer logged, at the step it logged it


def _started(run_dir: Path, loop: str, config: dict | None = None) -> Path:
    run_dir.mkdir()
    event = {"event": "RunStarted", "run_dir": str(run_dir), "loop": loop, "config": config or {}}
    (run_dir / "events.jsonl").write_text(json.dumps(event) + "\n")
    return run_dir


@pytest.mark.parametrize(
    "loop, config, says",
    [
        ("", {}, "stop gracefully (it saves a checkpoint first)"),
        ("monitor", {}, "it saves a checkpoint if it checks checkpoint_requested"),
        ("lightning", {}, "a checkpoint first, unless save_on_stop=False"),
        ("transformers", {"trainer": {"save_strategy": "no"}}, 'no checkpoint: its save_strategy is "no"'),
        ("transformers", {"trainer": {"save_strategy": "steps"}}, "the Trainer saves a checkpoint first"),
        ("transformers", {}, 'a checkpoint unless save_strategy is "no"'),
    ],
)
def test_stop_says_what_the_runs_loop_does(tmp_path, loop, config, says):
    """The line `tuitrain stop` prints, by the loop RunStarted names (the dashboard's q dialog words it alike);
    `tuitrain checkpoint` promises a loop of one's own's checkpoint only if it checks for the request."""
    from tuitrain.cli import _checkpoint_says, _stop_says

    run_dir = _started(tmp_path / "run", loop, config)
    assert says in _stop_says(run_dir)
    checkpoint = _checkpoint_says(run_dir)
    assert checkpoint.startswith("write a checkpoint") and ("checkpoint_requested" in checkpoint) == (loop == "monitor")
    assert _stop_says(tmp_path) == "stop gracefully" and _checkpoint_says(tmp_path) == "write a checkpoint"  # no run
