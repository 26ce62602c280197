"""Issue 39's cheap device checks, for benchmarks/gpu/run.sh (not part of the test suite):

- `syncs`: a fit (tests/health's regression project, the [watch] rules at their defaults, logging every
  10 steps) under `torch.cuda.set_sync_debug_mode("error")` on the steps that log nothing: any
  host-device sync there raises inside the fit and fails it. The mode is switched by a forward pre-hook
  from `learner.state.step` (the steps done): it is "error" from the forward of step k+1 where
  k % 10 is 1..8 (steps 2..9 of every ten, their update and the step count's increment), off from the
  forward where k % 10 is 9 or 0 (the step that logs: the rules before its update, the log after it).
  The first 20 steps (set-up) are not checked. On the CPU (`--device cpu`) the same schedule runs with a
  recorder in place of torch's mode, and the check is that no MetricsLogged of the train split falls
  inside an "error" window (the harness itself); the sync part is "skipped: no CUDA".
- `devices`: a run through prepare_run (as the CLI) with TUITRAIN_DEVICES_INTERVAL=0.2: its
  DevicesSampled events carry one entry per GPU with util, mem_used, mem_total (and torch_allocated).
  On the CPU: DevicesSampled present; the GPU fields "skipped: no CUDA".
- `resume`: exact resume with deterministic algorithms on (`torch.use_deterministic_algorithms(True)`,
  `CUBLAS_WORKSPACE_CONFIG=:4096:8`, set here as a user would: tuitrain has no switch of its own): an
  MLP with dropout on shuffled data, AdamW and a per-step OneCycleLR, checkpoints every 20 steps, run
  straight through 60 steps; the same run stopped at step 30 (the interrupter, as the dashboard's `s`)
  and resumed from its run directory (`--resume RUN_DIR`, in a new Run) to 60. Every per-step loss of
  the resumed run (the value logged last for a step) equals the straight run's, bit for bit, and so do
  the final weights. The same on the CPU (a check of the harness and of resume there).

    python benchmarks/gpu/checks.py --device cuda --out gpu-out     # writes gpu-out/checks.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

EVERY = 10
CHECK_FROM = 20

# the resume check's project: dropout (the CUDA generator's state must come back) on shuffled data
RESUMEPROJ = """
import torch
from torch import nn
from torch.utils.data import TensorDataset


class Net(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, hidden), nn.GELU(), nn.Dropout(0.2), nn.Linear(hidden, hidden),
                                    nn.GELU(), nn.Dropout(0.2), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.layers(x)


def datasets(n=1024):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n + 256, 32, generator=g)
    y = torch.randint(0, 10, (n + 256,), generator=g)
    return TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])
"""

RESUME_CONFIG = """
[experiment]
name = "gpu-resume"
dir = "{runs}"
seed = 3
[model]
target = "resumeproj:Net"
[data]
target = "resumeproj:datasets"
batch_size = 32
shuffle = true
[loss]
target = "torch.nn:CrossEntropyLoss"
[optimizer]
name = "AdamW"
lr = 1e-3
[scheduler]
name = "OneCycleLR"
max_lr = 0.01
interval = "step"
[train]
max_steps = 60
[metrics]
train = ["loss"]
valid = ["loss"]
[log]
every_n_steps = 1
[checkpoint]
every_n_steps = 20
"""
RESUME_STOP_AT = 30


def project(folder: Path) -> Path:
    shutil.copy(ROOT / "tests/health/healthproj.py", folder / "healthproj.py")
    config = folder / "checks.toml"
    sys.path.insert(0, str(folder))
    from healthproj import CONFIG  # the project's health.toml (its checkpoints set off by each check)

    config.write_text(CONFIG.format(runs=folder / "runs"))
    return config


def events_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines() if line.strip()]


def check_syncs(config: Path, device: str, steps: int) -> dict:
    import torch

    from tuitrain.core.callbacks import EventBus
    from tuitrain.core.control import Interrupter
    from tuitrain.run.build import build_learner
    from tuitrain.run.runner import prepare_run

    cuda = device == "cuda"
    run = prepare_run(
        config,
        [
            f"train.device={device}",
            f"train.max_steps={steps}",
            f"log.every_n_steps={EVERY}",
            "checkpoint.every_n_steps=0",
        ],
    )
    windows: list[tuple[int, str]] = []  # (steps done at the switch, mode)
    mode = ["off"]

    def set_mode(new: str) -> None:
        if new != mode[0]:
            if cuda:
                torch.cuda.set_sync_debug_mode(new if new == "error" else 0)
            mode[0] = new
            windows.append((learner.state.step, new))

    def pre_forward(module, args):
        done = learner.state.step
        if not module.training:
            set_mode("off")
        elif done >= CHECK_FROM and 1 <= done % EVERY <= EVERY - 2:
            set_mode("error")
        else:
            set_mode("off")

    seen: list[int] = []

    def on_event(event, state) -> None:  # may come later through the bus: only its step is used
        if event.name == "MetricsLogged" and getattr(event, "split", None) == "train":
            seen.append(event.step)

    bus = EventBus([on_event])
    learner, train_loader, _ = build_learner(run.cfg, run.run_dir, bus, Interrupter())
    handle = learner.model.register_forward_pre_hook(pre_forward)
    t0 = time.perf_counter()
    try:
        result = learner.fit(train_loader, None)
    finally:
        handle.remove()
        set_mode("off")
    out = {
        "seconds": round(time.perf_counter() - t0, 2),
        "status": result.status,
        "error": None if result.error is None else str(result.error)[-2000:],
        "error_windows": sum(1 for _, m in windows if m == "error"),
    }
    # the harness: an "error" window opened at k steps done covers steps k+1.. up to the next switch;
    # a log at step s (after s steps) must be outside every window
    spans, start = [], None
    for done, m in windows:
        if m == "error":
            start = done
        elif start is not None:
            spans.append((start, done))
            start = None
    bus.close() if hasattr(bus, "close") else None
    logged = sorted(set(seen))
    in_error_at_log = [s for s in logged if any(a < s <= b and s % EVERY not in (0, EVERY - 1) for a, b in spans)]
    out["error_spans"] = [f"{a}..{b}" for a, b in spans[:4]] + (["..."] if len(spans) > 4 else [])  # steps done
    out["logged_steps"] = logged[:8] + (["..."] if len(logged) > 8 else [])
    out["harness_ok"] = bool(spans) and all(s % EVERY == 0 for s in logged) and not in_error_at_log
    out["ok"] = result.status == "completed" and out["harness_ok"]
    if not cuda:
        out["sync_mode"] = "skipped: no CUDA"
    return out


def check_devices(config: Path, device: str, steps: int) -> dict:
    from tuitrain.run.runner import prepare_run

    os.environ["TUITRAIN_DEVICES_INTERVAL"] = "0.2"
    t0 = time.perf_counter()
    run = prepare_run(
        config, [f"train.device={device}", "data.slow=0.001", f"train.max_steps={steps}", "checkpoint.every_n_steps=0"]
    )
    code = run.execute()
    samples = [e for e in events_of(run.run_dir) if e["event"] == "DevicesSampled"]
    out = {"seconds": round(time.perf_counter() - t0, 2), "code": code, "samples": len(samples)}
    gpus = samples[-1].get("gpus", []) if samples else []
    out["gpus"] = gpus
    if device == "cuda":
        import torch

        want = {"util", "mem_used", "mem_total"}
        out["ok"] = (
            code == 0
            and bool(samples)
            and len(gpus) == torch.cuda.device_count()
            and all(want <= set(g) and g["util"] is not None and 0 < g["mem_used"] <= g["mem_total"] for g in gpus)
        )
    else:
        out["gpu_fields"] = "skipped: no CUDA"
        out["ok"] = code == 0 and bool(samples)
    return out


def _losses(run_dir: Path) -> dict[int, float]:
    """step -> train loss, the value logged last for a step (a resumed run logs its steps again)."""
    return {
        e["step"]: e["metrics"]["loss"]
        for e in events_of(run_dir)
        if e["event"] == "MetricsLogged" and e.get("split") == "train" and e.get("scope") == "step"
    }


def check_resume(folder: Path, device: str) -> dict:
    import torch

    from tuitrain.core.checkpoint import latest_checkpoint, load_checkpoint
    from tuitrain.run.runner import prepare_run

    (folder / "resumeproj.py").write_text(RESUMEPROJ)
    config = folder / "resume.toml"
    config.write_text(RESUME_CONFIG.format(runs=folder / "runs"))
    sets = [f"train.device={device}"]
    t0 = time.perf_counter()
    torch.use_deterministic_algorithms(True)
    try:
        straight = prepare_run(config, sets)
        code_straight = straight.execute()

        stopped = prepare_run(config, sets)
        stops: list[int] = []

        def stop_at(event, state) -> None:
            if (
                event.name == "MetricsLogged"
                and getattr(event, "split", None) == "train"
                and getattr(event, "scope", None) == "step"
                and event.step == RESUME_STOP_AT
            ):
                stopped.interrupter.request_stop("api")
                stops.append(event.step)

        stopped.subscribe(stop_at, steps=True)
        code_stopped = stopped.execute()
        resumed = prepare_run(config, sets, resume=str(stopped.run_dir))
        code_resumed = resumed.execute()
    finally:
        torch.use_deterministic_algorithms(False)
    want, got = _losses(straight.run_dir), _losses(stopped.run_dir)
    steps = sorted(want)
    differ = [s for s in steps if got.get(s) != want[s]]

    def weights(run_dir: Path) -> dict:
        return load_checkpoint(latest_checkpoint(run_dir / "checkpoint"))["model"]

    try:
        a, b = weights(straight.run_dir), weights(stopped.run_dir)
        same_weights = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    except Exception as e:  # the check reports, it does not crash
        same_weights = f"? {type(e).__name__}: {e}"
    out = {
        "seconds": round(time.perf_counter() - t0, 2),
        "codes": [code_straight, code_stopped, code_resumed],
        "steps": len(steps),
        "resumed_from": str(resumed.resume_path),
        "stop_asked_at": stops,
        "differing_steps": differ[:10],
        "same_final_weights": same_weights,
    }
    failures = [
        f"{e['error']}\n{e['traceback'][-1500:]}"
        for run in (straight, stopped, resumed)
        for e in events_of(run.run_dir)
        if e["event"] == "RunFailed"
    ]
    if failures:
        out["failures"] = failures
    out["ok"] = (
        code_straight == 0
        and code_stopped == 130
        and code_resumed == 0
        and len(steps) == 60
        and stops == [RESUME_STOP_AT]
        and resumed.resume_path is not None
        and not differ
        and same_weights is True
    )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default="gpu-out")
    a = p.parse_args(argv)
    out_dir = Path(a.out).resolve()  # before the chdir below
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": a.device}
    # cuBLAS's deterministic workspace, for the resume check; before CUDA starts (harmless elsewhere)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    folder = Path(tempfile.mkdtemp(prefix="tuitrain-gpu-checks-"))
    os.chdir(folder)
    config = project(folder)
    steps = 120 if a.device == "cuda" else 60
    checks = {
        "syncs": lambda: check_syncs(config, a.device, steps),
        "devices": lambda: check_devices(config, a.device, 300),
        "resume": lambda: check_resume(folder, a.device),
    }
    for name, fn in checks.items():
        try:
            report[name] = fn()
        except Exception:
            report[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        print(name, json.dumps(report[name], default=str), flush=True)
    report["ok"] = all(report[k]["ok"] for k in checks)
    (out_dir / "checks.json").write_text(json.dumps(report, indent=1, default=str))
    shutil.rmtree(folder, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
