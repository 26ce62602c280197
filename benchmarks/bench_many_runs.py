"""`tuitrain watch runs/exp` with tens of runs: how long 30 finished runs (a few hundred logged steps
each) take to be shown, every run listed in the run list with its monitored value and every chart
overlaying the runs' series to their last step.

    python benchmarks/bench_many_runs.py [--runs 30] [--steps 300] [--rounds 5] [--dir DIR]
    python benchmarks/bench_many_runs.py --write DIR [--runs 30] [--steps 300]   # the runs only (tmux)

The runs are written once (events.jsonl with the event classes' own JSON, config.toml, run.json):
4 train metrics a logged step, valid loss and accuracy each epoch of 100 steps, checkpoints with
the monitored valid/loss, optimizer.lr and model.hidden differing between runs. Each round is a
fresh process (`python -m tuitrain watch`'s own path: `_watched_runs`, then `run_compare`'s app,
under `run_test` at 120x40); the time is from before the app is made until the run list shows
every run ended with a value and the loss chart holds every run's last step. Wall time and the
process's CPU time (user+sys) are printed, median (min-max) over rounds: on a shared machine the
CPU time is the steadier figure. The import of textual and tuitrain is measured apart (`import`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LRS = (1e-3, 3e-3, 1e-2, 3e-2, 1e-4)
HIDDEN = (32, 64, 128)


def write_runs(root: Path, runs: int = 30, steps: int = 300, per_epoch: int = 100) -> list[Path]:
    """`runs` finished runs of `steps` logged steps under root/exp/, as the runner leaves them."""
    from tuitrain.core.events import (
        CheckpointSaved,
        EpochCompleted,
        EpochStarted,
        MetricsLogged,
        PhaseStarted,
        RunFailed,
        RunFinished,
        RunStarted,
    )

    out = []
    for i in range(runs):
        lr, hidden = LRS[i % len(LRS)], HIDDEN[i % len(HIDDEN)]
        name = f"20250101-{i:06d}-lr{lr:g}-h{hidden}"
        run_dir = root / "exp" / name
        (run_dir / "checkpoint").mkdir(parents=True, exist_ok=True)
        config = {
            "experiment": {"name": "exp", "seed": i},
            "model": {"target": "m:Net", "hidden": hidden},
            "optimizer": {"name": "AdamW", "lr": lr, "weight_decay": 0.01},
            "checkpoint": {"monitor": "valid/loss", "mode": "min"},
            "train": {"epochs": steps // per_epoch},
        }
        (run_dir / "config.toml").write_text(
            '[experiment]\nname = "exp"\nseed = %d\n\n[model]\ntarget = "m:Net"\nhidden = %d\n\n'
            '[optimizer]\nname = "AdamW"\nlr = %r\nweight_decay = 0.01\n\n'
            '[checkpoint]\nmonitor = "valid/loss"\nmode = "min"\n\n[train]\nepochs = %d\n'
            % (i, hidden, lr, steps // per_epoch)
        )
        rnd = random.Random(i)
        speed = 0.5 + (i % 7) / 4 + hidden / 128  # each run learns at its own pace
        failed = i % 10 == 9  # a few runs failed half way
        last = steps // 2 if failed else steps
        t0 = t = 1_700_000_000.0 + i * 3600
        epochs = -(-steps // per_epoch)
        best = None
        with open(run_dir / "events.jsonl", "w", encoding="utf-8") as f:

            def w(e):
                f.write(e.to_json() + "\n")

            w(
                RunStarted(
                    run_dir=str(run_dir),
                    experiment="exp",
                    epochs=epochs,
                    max_steps=0,
                    steps_per_epoch=per_epoch,
                    batch_size=64,
                    config=config,
                    time=t,
                )
            )
            step = 0
            for epoch in range(1, epochs + 1):
                w(EpochStarted(epoch=epoch, epochs=epochs, step=step, time=t))
                w(PhaseStarted(phase="train", split="train", epoch=epoch, step=step, batches=per_epoch, time=t))
                for b in range(per_epoch):
                    if step >= last:
                        break
                    step += 1
                    t += 0.05
                    loss = 2.0 / (1 + speed * step / 50) + rnd.random() * 0.05
                    w(
                        MetricsLogged(
                            split="train",
                            epoch=epoch,
                            step=step,
                            batch=b + 1,
                            batches=per_epoch,
                            time=t,
                            metrics={"loss": loss, "accuracy": 1 - loss / 4, "lr": lr, "grad_norm": rnd.random() * 3},
                        )
                    )
                if step >= last and failed:
                    break
                vloss = 2.2 / (1 + speed * step / 50) + rnd.random() * 0.02
                w(
                    MetricsLogged(
                        split="valid",
                        epoch=epoch,
                        step=step,
                        scope="epoch",
                        batch=10,
                        batches=10,
                        time=t,
                        metrics={"loss": vloss, "accuracy": 1 - vloss / 4},
                    )
                )
                w(
                    EpochCompleted(
                        epoch=epoch,
                        epochs=epochs,
                        step=step,
                        duration=5.0,
                        time=t,
                        metrics={"train/loss": loss, "valid/loss": vloss},
                    )
                )
                is_best = best is None or vloss < best
                best = vloss if is_best else best
                w(
                    CheckpointSaved(
                        file=f"checkpoint/epoch-{epoch}.pt",
                        epoch=epoch,
                        step=step,
                        bytes=1 << 20,
                        metrics={"train/loss": loss, "valid/loss": vloss},
                        best=is_best,
                        reason="epoch",
                        stall=0.0,
                        write=0.01,
                        time=t,
                    )
                )
            if failed:
                w(
                    RunFailed(
                        error="RuntimeError: CUDA out of memory",
                        epoch=epoch,
                        step=step,
                        duration=t - t0,
                        traceback="Traceback (most recent call last):\nRuntimeError: CUDA out of memory",
                        time=t,
                    )
                )
            else:
                w(
                    RunFinished(
                        status="completed",
                        exit_code=0,
                        epoch=epochs,
                        step=step,
                        reason="epochs",
                        duration=t - t0,
                        summary={},
                        time=t,
                        best={"file": "checkpoint/epoch-3.pt", "monitor": "valid/loss", "value": best},
                    )
                )
        (run_dir / "run.json").write_text(
            json.dumps(
                {
                    "status": "failed" if failed else "completed",
                    "started": t0,
                    "experiment": "exp",
                    "pid": 0,
                    "epoch": epochs,
                    "step": step,
                    "run_dir": str(run_dir),
                }
            )
        )
        out.append(run_dir)
    return out


# --- what each child process measures (it prints one JSON line) ------------------------------------


def _usage() -> dict:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024}


def child_import() -> dict:
    t0 = time.perf_counter()
    import textual.app  # noqa: F401

    import tuitrain.dashboard.app  # noqa: F401

    return {"wall": time.perf_counter() - t0, **_usage()}


def child_app(folder: str, runs: int) -> dict:
    import asyncio

    import tuitrain.dashboard.app  # noqa: F401  (measured apart: `import`)

    before = _usage()

    async def main() -> tuple[float, dict]:
        from tuitrain.cli import _watched_runs
        from tuitrain.dashboard.entry import compare_app
        from tuitrain.dashboard.panels.run_list import RunList

        t0 = time.perf_counter()
        dirs = _watched_runs([folder])
        app = compare_app(dirs, None)
        async with app.run_test(size=(120, 40)) as pilot:
            while True:
                await pilot.pause(0.02)
                st = app.state
                lst = app.query(RunList)
                loss = [c for c in app.query("MetricPlot") if getattr(c, "metric", "") == "loss"]
                if not lst or not loss or app.bridge.pending():
                    continue
                rows = lst.first().runs
                pts = loss[0].points
                ends = [pts.get(f"train/{n}", ([], []))[0][-1:] for n in st.runs]
                if (
                    len(rows) == runs
                    and all(r.status in ("completed", "failed") and r.value is not None for r in rows)
                    and all(e and e[0] >= rs.step for e, rs in zip(ends, st.runs.values()))
                ):
                    return time.perf_counter() - t0, {"listed": len(rows), "series": len(pts)}

    wall, seen = asyncio.run(main())
    after = _usage()
    return {"wall": wall, "cpu": after["cpu"] - before["cpu"], "rss_mb": after["rss_mb"], **seen}


def _child(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _summary(values: list[float], unit: str = "s") -> str:
    return f"{statistics.median(values):.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", help="where to write the runs (default: a temp dir)")
    ap.add_argument("--write", metavar="DIR", help="only write the runs into DIR/exp and leave")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        result = child_import() if kind == "import" else child_app(rest[0], int(rest[1]))
        print(json.dumps(result))
        return
    if args.write:
        dirs = write_runs(Path(args.write), args.runs, args.steps)
        print(f"{len(dirs)} runs in {Path(args.write) / 'exp'}")
        return
    root = Path(args.dir or tempfile.mkdtemp(prefix="tuitrain-many-"))
    folder = root / "exp"
    if not folder.is_dir():
        write_runs(root, args.runs, args.steps)
    size = sum(f.stat().st_size for f in folder.rglob("events.jsonl"))
    print(
        f"{args.runs} runs x {args.steps} steps in {folder} ({size / 1e6:.1f} MB of events.jsonl); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    imports, apps = [], []
    for r in range(args.rounds):
        imports.append(_child("import"))
        apps.append(_child("app", str(folder), str(args.runs)))
        print(
            f"round {r + 1}: import {imports[-1]['wall']:.2f} s, app {apps[-1]['wall']:.2f} s wall, "
            f"{apps[-1]['cpu']:.2f} s CPU, {apps[-1]['rss_mb']:.0f} MB, {apps[-1]['listed']} listed, "
            f"{apps[-1]['series']} loss series; load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print(f"import textual + dashboard: {_summary([i['wall'] for i in imports])}")
    print(
        f"30 runs shown (app to every run listed and drawn): wall {_summary([a['wall'] for a in apps])}, "
        f"CPU {_summary([a['cpu'] for a in apps])}, peak RSS {max(a['rss_mb'] for a in apps):.0f} MB"
    )


if __name__ == "__main__":
    main()
