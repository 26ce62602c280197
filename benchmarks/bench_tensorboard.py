"""TensorBoard event files read by tuitrain's source (tuitrain/sources/tensorboard.py) beside
TensorBoard's own EventAccumulator, on the same files, each in a fresh process, the variants interleaved.

    python benchmarks/bench_tensorboard.py [--rounds 3] [--steps 1000000] [--dir /tmp/bench-tb]
                                           [--skip ea,runs,noverify] [--runs 100 --run-steps 20000]

The files are written once into --dir by torch's SummaryWriter (`add_scalar("loss", ...)` every step:
1M records, ~42 MB; it takes minutes) and reused. Variants:
- `tuitrain`: find_runs + the source -> DashboardState (reading and folding, no screen), until every
  point is folded; with where the time went (the same steps timed one by one after it: read, frame,
  the CRCs and the scalar decode, the blocks, the fold);
- `noverify`: the same without the data CRCs (what checking every record costs);
- `ea`: EventAccumulator(size_guidance scalars=0).Reload() and all its scalars (TensorBoard's reader,
  which checks every CRC in Python);
- `runs`: --runs runs of --run-steps steps (one SummaryWriter file copied into each folder, so every
  run's bytes are a real writer's), found by find_runs and read whole (the reader side of `watch DIR`).
Wall time and the process's CPU time (user+sys): on a shared machine the CPU time is the steadier figure.
Medians over rounds, with min-max.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _usage() -> dict:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024}


def write_run(folder: Path, steps: int) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(folder), max_queue=10_000, flush_secs=3600)
    for i in range(1, steps + 1):
        w.add_scalar("loss", 1.0 / math.sqrt(i), i)
    w.close()


def child_tuitrain(folder: str, verify: bool) -> dict:
    before = _usage()
    t0 = time.perf_counter()
    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.sources import tensorboard as tb

    (ref,) = tb.find_runs(folder)
    state, pending, lock = DashboardState(), [], threading.Lock()

    def emit(e, s=None):
        with lock:
            pending.append(e)

    source = tb.TensorBoardSource(ref, live=False, verify=verify)
    source.open(emit)
    source.backlog = lambda: len(pending)
    worker = threading.Thread(target=source.work, daemon=True)
    worker.start()
    while True:  # the app's drain, without its 1/15 s tick
        with lock:
            batch, pending[:] = pending[:], []
        if batch:
            state.apply(batch)
        elif source.caught_up and not pending:
            break
        else:
            time.sleep(0.002)
    wall = time.perf_counter() - t0
    after = _usage()
    source.close()
    worker.join(2)
    xs, _ = state.metric_series("loss", "train").points()
    return {
        "wall": wall,
        "cpu": after["cpu"] - before["cpu"],
        "rss_mb": after["rss_mb"],
        "points": source.points,
        "step": state.step,
        "problems": len(source.problems),
        "shown": len(xs),
        "parts": parts(ref) if verify else {},
    }


def parts(ref) -> dict:
    """Where the time goes: the reader's steps timed one by one, in CPU time (imports already done)."""
    import numpy as np

    from tuitrain.dashboard.state.model import DashboardState
    from tuitrain.sources import tensorboard as tb
    from tuitrain.sources import tfrecord

    out = {}
    t = time.process_time()
    (path,) = tb.event_files(Path(ref.path))
    buf = path.read_bytes()
    out["read"], t = time.process_time() - t, time.process_time()
    framing = tfrecord.frame(buf)
    out["frame"], t = time.process_time() - t, time.process_time()
    rec = tfrecord.read_records(buf, framing.starts, framing.lengths, verify=True)
    out["crc+decode"], t = time.process_time() - t, time.process_time()
    tfrecord.read_records(buf, framing.starts, framing.lengths, verify=False)
    out["decode alone"], t = time.process_time() - t, time.process_time()
    block = tb._block(
        [x.decode() for x in rec.tags],
        tb.split_of,
        rec.which,
        rec.steps,
        rec.walls,
        rec.values,
        rec.tag_ids,
    )
    out["block"], t = time.process_time() - t, time.process_time()
    DashboardState().apply([block])
    out["fold"] = time.process_time() - t
    assert np.isfinite(rec.values).all()
    return out


def child_ea(folder: str) -> dict:
    before = _usage()
    t0 = time.perf_counter()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    n = sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])
    after = _usage()
    return {
        "wall": time.perf_counter() - t0,
        "cpu": after["cpu"] - before["cpu"],
        "rss_mb": after["rss_mb"],
        "points": n,
    }


def child_runs(root: str) -> dict:
    before = _usage()
    t0 = time.perf_counter()
    from tuitrain.sources import tensorboard as tb

    t1 = time.perf_counter()
    refs = tb.find_runs(root)
    found = time.perf_counter() - t1
    points = 0
    for ref in refs:
        source = tb.open_source(ref, live=False)
        source.open(lambda e, s=None: None)
        source.read_to_end()
        points += source.points
    after = _usage()
    return {
        "wall": time.perf_counter() - t0,
        "cpu": after["cpu"] - before["cpu"],
        "rss_mb": after["rss_mb"],
        "find": found,
        "runs": len(refs),
        "points": points,
    }


def _child(args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, timeout=900
    )
    if out.returncode:
        raise SystemExit(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(values: list[float], unit: str = "s") -> str:
    med = statistics.median(values)
    return f"{med:.2f} {unit} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--dir", default="/tmp/bench-tb")
    p.add_argument("--skip", default="")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--run-steps", type=int, default=20_000)
    p.add_argument("--child", nargs="+")
    args = p.parse_args()
    if args.child:
        kind, *rest = args.child
        fn = {
            "tuitrain": lambda: child_tuitrain(rest[0], True),
            "noverify": lambda: child_tuitrain(rest[0], False),
            "ea": lambda: child_ea(rest[0]),
            "runs": lambda: child_runs(rest[0]),
        }[kind]
        print(json.dumps(fn()))
        return
    skip = set(args.skip.split(",")) - {""}
    base = Path(args.dir)
    big = base / f"run-{args.steps}"
    if not any(big.glob("events.out.tfevents.*")):
        print(f"writing {args.steps:,} scalars with SummaryWriter into {big} (once) ...", flush=True)
        write_run(big, args.steps)
    many = base / f"runs-{args.runs}x{args.run_steps}"
    if "runs" not in skip and not many.exists():
        one = base / f"one-{args.run_steps}"
        if not any(one.glob("events.out.tfevents.*")):
            write_run(one, args.run_steps)
        (src,) = one.glob("events.out.tfevents.*")
        for i in range(args.runs):
            (many / f"run{i:03d}").mkdir(parents=True)
            shutil.copy(src, many / f"run{i:03d}" / src.name)
    size = sum(f.stat().st_size for f in big.glob("events.out.tfevents.*"))
    print(f"{args.steps:,} scalar records, {size / 1e6:.1f} MB; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}")
    variants = [v for v in ("tuitrain", "noverify", "ea", "runs") if v not in skip]
    got: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            res = _child([v, str(many if v == "runs" else big)])
            got[v].append(res)
            print(f"  round {r + 1} {v}: wall {res['wall']:.2f} s, cpu {res['cpu']:.2f} s", flush=True)
    print()
    for v in variants:
        rows = got[v]
        line = f"{v:9s} wall {_fmt([x['wall'] for x in rows])}, cpu {_fmt([x['cpu'] for x in rows])}"
        line += f", peak RSS {statistics.median(x['rss_mb'] for x in rows):.0f} MB, points {rows[0]['points']:,}"
        if v == "runs":
            line += f", runs {rows[0]['runs']}, find_runs {_fmt([x['find'] for x in rows])}"
        print(line)
    if "tuitrain" in got and "ea" in got:
        for key in ("wall", "cpu"):
            ours = statistics.median(x[key] for x in got["tuitrain"])
            theirs = statistics.median(x[key] for x in got["ea"])
            print(f"EventAccumulator / tuitrain ({key}): {theirs / ours:.1f}x")
    if "tuitrain" in got:
        keys = got["tuitrain"][0]["parts"]
        print("where tuitrain's time goes (CPU, medians, s): " + ", ".join(
            f"{k} {statistics.median(x['parts'][k] for x in got['tuitrain']):.3f}" for k in keys))  # fmt: skip


if __name__ == "__main__":
    main()
