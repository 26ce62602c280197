"""What `tuitrain sweep` itself costs per trial: N trials of the medium benchmark model, `parallel = 2`,
against the same N runs (the same values, read back from the sweep's study) started two at a time by a
plain loop, as a shell's `xargs -P 2 tuitrain run ...` would. Both arms run the same `tuitrain run`
processes; what differs is the sweep's own work: Optuna's study (the journal file), asking and
telling, following each trial's events for the pruner, the lines it prints. The arms alternate who goes
first, rep by rep; the figure is (sweep - loop) / N per rep, and the median.

    python benchmarks/bench_sweep.py [--trials 30] [--reps 2] [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = """[experiment]
name = "bench"
dir = "runs"
seed = 0
[model]
target = "benchproj:Net"
d_in = 784
hidden = 1024
[data]
target = "benchproj:datasets"
batch_size = 128
n = {n}
d_in = 784
[loss]
target = "torch.nn:CrossEntropyLoss"
[optimizer]
name = "AdamW"
lr = 1e-3
[train]
epochs = 1
device = "cpu"
[metrics]
train = ["loss"]
valid = []
[checkpoint]
monitor = "train/loss"
mode = "min"
[sweep]
metric = "train/loss"
mode = "min"
trials = {trials}
parallel = 2
sampler = "random"
pruner = "none"
seed = 0
[sweep.params]
"optimizer.lr" = {{ low = 1e-4, high = 1e-2, log = true }}
"""


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(HERE.parent), e.get("PYTHONPATH", "")]))
    return e


SELF_CPU: list[float] = []  # the sweep process's own CPU seconds (not its trials'), run by run


def sweep_arm(folder: Path) -> tuple[float, list[float]]:
    import psutil

    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuitrain", "sweep", "sweep.toml", "--headless"],
        cwd=folder,
        env=env(),
        stdout=subprocess.DEVNULL,
    )
    ps, cpu = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:  # its own CPU, read until it leaves (a waited-for child's is no longer there)
        try:
            t = ps.cpu_times()
            cpu = t.user + t.system
        except psutil.Error:
            break
        time.sleep(0.05)
    assert proc.wait() == 0
    wall = time.monotonic() - start
    SELF_CPU.append(cpu)
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = folder / "runs" / "bench" / "sweep-bench" / "study.journal"
    study = optuna.load_study(study_name="bench", storage=JournalStorage(JournalFileBackend(str(journal))))
    lrs = [t.params["optimizer.lr"] for t in sorted(study.get_trials(), key=lambda t: t.number)]
    return wall, lrs


def loop_arm(folder: Path, lrs: list[float], naive: bool = False) -> float:
    """The runs two at a time. Each with the threads the sweep gives a trial (cores / parallel) unless
    `naive`: then each takes torch's default, every core, as a plain `xargs -P 2` would."""
    run_env = env()
    if not naive:
        run_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // 2)))

    def one(i_lr):
        i, lr = i_lr
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tuitrain",
                "run",
                "sweep.toml",
                "--headless",
                f"--set=optimizer.lr={lr!r}",
                "--run-dir",
                f"loop{'-naive' if naive else ''}/trial-{i:04d}",
            ],
            cwd=folder,
            env=run_env,
            check=True,
            stdout=subprocess.DEVNULL,
        )

    start = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, enumerate(lrs)))
    return time.monotonic() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200, help="training steps a trial (batch 128)")
    ap.add_argument("--naive", action="store_true", help="also time the loop with torch's default threads")
    args = ap.parse_args(argv)
    per_trial = []
    lrs: list[float] | None = None
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "sweep.toml").write_text(CONFIG.format(n=128 * args.steps, trials=args.trials))
            order = ("sweep", "loop") if rep % 2 == 0 else ("loop", "sweep")
            walls = {}
            for arm in order:
                if arm == "sweep":
                    walls["sweep"], got = sweep_arm(folder)
                    lrs = lrs or got
                else:
                    if lrs is None:  # the loop goes first: it needs the sweep's values, from a sweep run apart
                        with tempfile.TemporaryDirectory() as first:
                            shutil.copy(folder / "sweep.toml", Path(first) / "sweep.toml")
                            _, lrs = sweep_arm(Path(first))
                    walls["loop"] = loop_arm(folder, lrs)
            if args.naive:
                walls["naive loop"] = loop_arm(folder, lrs, naive=True)
            per_trial.append((walls["sweep"] - walls["loop"]) / args.trials)
            print(
                json.dumps(
                    {
                        "rep": rep + 1,
                        "order": order,
                        **{f"{k}_s": round(v, 2) for k, v in walls.items()},
                        "overhead_per_trial_s": round(per_trial[-1], 3),
                    }
                ),
                flush=True,
            )
    print(
        f"{args.trials} trials, parallel 2, {args.steps} steps each: the sweep's own cost per trial, median "
        f"{statistics.median(per_trial):.3f} s of {[round(x, 3) for x in per_trial]} (wall); the sweep process's "
        f"own CPU: {[round(c, 2) for c in SELF_CPU]} s, {statistics.median(SELF_CPU) / args.trials:.3f} s a trial"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
