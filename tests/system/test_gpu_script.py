"""The GPU machine's one command (`benchmarks/gpu/run.sh`, issue 39) dry-run on the CPU, so that it cannot
rot between the sessions that are lent a GPU: every step it takes there runs here, small (the CUDA
tests and the device tests collected, checks.py's harness and resume, bench_gpu.py's contenders with
the dashboard in a pseudo-terminal), and the report it writes says so."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_script_runs_every_step_on_the_cpu_and_reports_them(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TUITRAIN_TEST_DEVICE")}
    res = subprocess.run(
        ["bash", "benchmarks/gpu/run.sh", "--cpu"],
        cwd=ROOT,
        env={**env, "OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=420,
    )
    tail = res.stdout[-4000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] and report["mode"] == "cpu" and not report["failed"], tail
    status = {s["step"]: s["status"] for s in report["steps"]}
    for step in ("imports", "pytest-cuda-collect", "pytest-device-collect", "checks", "bench-gpu"):
        assert status.get(step) == "pass", (step, status)
    assert status["pytest-cuda"].startswith("skipped") and status["pytest-device"].startswith("skipped")
    # the install runs where wheels were fetched (fetch_wheels.sh); a clean checkout has none
    assert status["install-wheels"] == "pass" or status["install-wheels"].startswith("skipped: no .whl")

    log = (out / "run.log").read_text()
    # the selections the GPU runs are not empty (pytest prints "N tests collected" or "N/M tests collected")
    collected = [int(n) for n in re.findall(r"(\d+)(?:/\d+)? tests? collected", log)]
    assert len(collected) == 2 and all(n > 0 for n in collected), collected

    checks = report["checks"]
    assert checks["syncs"]["harness_ok"] and checks["devices"]["samples"] > 0
    assert checks["resume"]["ok"] and checks["resume"]["differing_steps"] == []

    bench = report["bench"]
    assert set(report["goals"]) >= {"headless_ratio", "dashboard_ratio", "tflops_vs_independent"}
    assert all(g["met"] is None for g in report["goals"].values())  # nothing is judged on a CPU
    assert bench["medians"]["headless_ratio"] > 0 and bench["medians"]["dashboard_ratio"] > 0, bench
