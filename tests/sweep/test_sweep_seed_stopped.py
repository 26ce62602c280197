"""A trial the user stopped is said as stopped, not failed, in the study's count the sweep prints at its end
(newcomer defects: `tuitrain stop SWEEP_DIR` printed `study xg: 1 fail, 1 waiting`). The sweep runs in this
process; its trial is a tiny shell script in place of `python -m tuitrain run`, which does what a trial asked
to stop does (run.json `interrupted`, reason `stopped`) after leaving the sweep's stop file, as `tuitrain
stop SWEEP_DIR` does."""

from __future__ import annotations

import io

import pytest

from tuitrain.run.sweep import EXIT_STOPPED, Sweep
from tuitrain.run.sweep_spec import SweepSpec
from tuitrain.sources.sweep_files import read_param

pytest.importorskip("optuna")

STOPPED_TRIAL = """#!/bin/sh
while [ $# -gt 0 ]; do
    if [ "$1" = "--run-dir" ]; then run_dir="$2"; fi
    shift
done
mkdir -p "$run_dir"
touch "$(dirname "$run_dir")/stop"
echo '{"status": "interrupted", "reason": "stopped"}' > "$run_dir/run.json"
"""


def test_a_stopped_trial_is_counted_stopped_not_failed(tmp_path, monkeypatch):
    monkeypatch.setattr("tuitrain.run.sweep.Launcher.available", staticmethod(lambda: False))  # (no python to fork)
    python = tmp_path / "python"
    python.write_text(STOPPED_TRIAL)
    python.chmod(0o755)
    params = {"optimizer.lr": read_param("optimizer.lr", {"low": 1e-4, "high": 1e-1, "log": True})}
    spec = SweepSpec("xg", "valid/loss", "min", 2, 1, "tpe", "median", "", 0, params)
    out = io.StringIO()
    sweep = Sweep(spec, "sw.toml", [], tmp_path / "sweep-xg", out=out, python=str(python))
    assert sweep.run() == EXIT_STOPPED
    said = out.getvalue()
    assert "trial 0 stopped (it continues when the sweep runs again)" in said, said
    # its queued continuation is that trial, not another one "waiting"
    assert "study xg: 1 stopped (a stopped trial goes on from its checkpoint when the sweep runs again)\n" in said, said
    assert "fail" not in said, said
