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

CONFIG = """
[experiment]
name = "gpu-checks"
dir = "{runs}"
seed = 0
[model]
target = "healthproj:Net"
[data]
target = "healthproj:datasets"
batch_size = 16
shuffle = false
[loss]
target = "torch.nn:MSELoss"
[optimizer]
target = "torch.optim:SGD"
lr = 0.02
[train]
epochs = 1
[metrics]
train = ["loss", "grad_norm"]
valid = ["loss"]
[log]
every_n_steps = 10
[checkpoint]
every_n_steps = 0
"""

EVERY = 10
CHECK_FROM = 20


def project(folder: Path) -> Path:
    shutil.copy(ROOT / "tests/health/healthproj.py", folder / "healthproj.py")
    config = folder / "checks.toml"
    config.write_text(CONFIG.format(runs=folder / "runs"))
    sys.path.insert(0, str(folder))
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
    run = prepare_run(config, [f"train.device={device}", f"train.max_steps={steps}",
                               f"log.every_n_steps={EVERY}", "checkpoint.every_n_steps=0"])
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
    out = {"seconds": round(time.perf_counter() - t0, 2), "status": result.status,
           "error": None if result.error is None else str(result.error)[-2000:],
           "error_windows": sum(1 for _, m in windows if m == "error")}
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
    run = prepare_run(config, [f"train.device={device}", "data.slow=0.001", f"train.max_steps={steps}"])
    code = run.execute()
    samples = [e for e in events_of(run.run_dir) if e["event"] == "DevicesSampled"]
    out = {"seconds": round(time.perf_counter() - t0, 2), "code": code, "samples": len(samples)}
    gpus = samples[-1].get("gpus", []) if samples else []
    out["gpus"] = gpus
    if device == "cuda":
        import torch

        want = {"util", "mem_used", "mem_total"}
        out["ok"] = (code == 0 and bool(samples) and len(gpus) == torch.cuda.device_count()
                     and all(want <= set(g) and g["util"] is not None and 0 < g["mem_used"] <= g["mem_total"]
                             for g in gpus))
    else:
        out["gpu_fields"] = "skipped: no CUDA"
        out["ok"] = code == 0 and bool(samples)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default="gpu-out")
    a = p.parse_args(argv)
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": a.device}
    folder = Path(tempfile.mkdtemp(prefix="tuitrain-gpu-checks-"))
    os.chdir(folder)
    config = project(folder)
    steps = 120 if a.device == "cuda" else 60
    for name, fn, n in (("syncs", check_syncs, steps), ("devices", check_devices, 300)):
        try:
            report[name] = fn(config, a.device, n)
        except Exception:
            report[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
        print(name, json.dumps(report[name], default=str), flush=True)
    report["ok"] = all(report[k]["ok"] for k in ("syncs", "devices"))
    (out_dir / "checks.json").write_text(json.dumps(report, indent=1, default=str))
    shutil.rmtree(folder, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
