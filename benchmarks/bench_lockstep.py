"""Per-step time of `tuitrain run --headless` against a hand-written loop, the two in lockstep.

Both processes run at once but take turns: each runs `turn` steps, hands the turn to the other
through a pipe and waits for it back (benchproj.Baton, called from the model's forward pass). Each
times only its own turns, so the two are timed in alternating slices a few tenths of a second long:
the drifts of a shared machine's speed, which move by several per cent every few seconds, fall on
both alike. Only one of them computes at any moment. The ratio of a lockstep run is the sum of the
tuitrain process's timed turns over the hand-written process's; the figure is the median of runs.

Both processes are pinned to one CPU (`--cpu`, the last one by default). Unpinned, each tends to
stay on the core it last ran on, and this VM's two cores drift apart in speed for tens of seconds at
a time: `--control` (a second hand-written loop in tuitrain's place) then spread ±2-4 % on the
medium model, no better than separate runs. Pinned, both see the same core, and the control lands
within about ±1 % run by run (0.987-1.012x over 15 runs), the medians of a few runs within 0.5 %.
tuitrain headless trains on its main thread and starts no other busy thread, so sharing a CPU costs
it nothing that the hand-written loop escapes.
Who starts may matter: in one run of bench_all (L) tuitrain's medium ratio was ~1.018x whenever the
hand-written loop started and ~1.005x whenever tuitrain did (the next run, M, showed no such skew).
Runs alternate, and an even number of them weighs both orders alike.

Headless only: the dashboard's screen thread would go on drawing during the other process's turn,
and its cost would be counted against the hand-written loop.

    python benchmarks/bench_lockstep.py [--repeats 6] [--model tiny|medium|both] [--control] [--cpu N|none]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_dashboard as steps_bench  # noqa: E402

# model, steps per turn, turns (the first `skip` not timed)
SIZES = {
    "tiny": dict(d_in=32, hidden=64, batch=32, turn=400, turns=60, skip=10),
    "medium": dict(d_in=784, hidden=1024, batch=128, turn=40, turns=45, skip=8),
}


def default_cpu() -> int:
    """The CPU lockstep runs pin to: the last one this process may use."""
    return max(os.sched_getaffinity(0))


def lockstep(
    kind: str,
    tmp: Path,
    tuitrain_first: bool = False,
    control: bool = False,
    cpu: int | None = None,
    fetch: str = "item",
    sets: tuple[str, ...] = (),
) -> tuple[float, float]:
    """One lockstep run: (tuitrain's seconds per step, the hand-written loop's). `control`: a second
    hand-written loop in tuitrain's place (the method's own noise). `cpu`: both processes run on
    that CPU only (None: wherever the kernel puts them). `fetch`: the hand-written loop's data
    loader (bench_dashboard.LOADERS): "whole" fetches batches as tuitrain does."""
    m = SIZES[kind]
    steps = m["turn"] * m["turns"]
    model = {k: m[k] for k in ("d_in", "hidden", "batch")}
    cfg = steps_bench.write_config(tmp, steps, model, "lockstep.toml", "benchproj:LockstepNet")
    hand_code = steps_bench.hand_code(steps, model, 1, fetch).replace("benchproj.Net(", "benchproj.LockstepNet(")
    a_r, a_w = os.pipe()  # hand -> tuitrain
    b_r, b_w = os.pipe()  # tuitrain -> hand
    outs = tmp / f"hand-{time.time_ns()}.txt", tmp / f"tuitrain-{time.time_ns()}.txt"
    spec = f"{m['turn']},{m['skip']}"
    hand_env = dict(
        steps_bench.env(),
        BENCH_BATON=f"{b_r},{a_w},{spec},{outs[0]}",
        BENCH_BATON_SECOND="1" if tuitrain_first else "0",
    )
    tt_env = dict(
        steps_bench.env(),
        BENCH_BATON=f"{a_r},{b_w},{spec},{outs[1]}",
        BENCH_BATON_SECOND="0" if tuitrain_first else "1",
    )
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    hand = subprocess.Popen(
        [sys.executable, "-c", hand_code], env=hand_env, pass_fds=(b_r, a_w), stdout=subprocess.DEVNULL, preexec_fn=pin
    )
    tt_cmd = (
        [sys.executable, "-c", hand_code]
        if control
        else [
            sys.executable,
            "-m",
            "tuitrain",
            "run",
            str(cfg),
            "--headless",
            "--run-dir",
            str(tmp / f"run-{time.time_ns()}"),
        ]
        + [a for kv in sets for a in ("--set", kv)]
    )
    tt = subprocess.Popen(
        tt_cmd, env=tt_env, pass_fds=(a_r, b_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pin
    )
    for fd in (a_r, a_w, b_r, b_w):  # only the two processes hold the pipes: one's exit frees the other
        os.close(fd)
    if hand.wait() or tt.wait():
        raise RuntimeError(f"lockstep {kind}: exit {hand.returncode} / {tt.returncode}")
    h, t = ([float(x) for x in p.read_text().split()] for p in outs)
    n = min(len(h), len(t))
    return sum(t[:n]) / (n * m["turn"]), sum(h[:n]) / (n * m["turn"])


def print_runs(kind: str, name: str, other: str, runs: list[tuple[float, float]]) -> None:
    """One line for a model's runs, each (seconds per step, the hand-written loop's): medians and ratios."""
    ratios = [t / h for t, h in runs]
    print(
        f"{kind}: {name} {statistics.median(t for t, _ in runs) * 1e6:.1f} µs/step, "
        f"{other} {statistics.median(h for _, h in runs) * 1e6:.1f}; ratio median "
        f"{statistics.median(ratios):.3f}x of {[round(r, 3) for r in ratios]}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=6, help="runs; who starts alternates (use an even number)")
    ap.add_argument("--model", choices=["tiny", "medium", "both"], default="both")
    ap.add_argument(
        "--control",
        action="store_true",
        help="a second hand-written loop in tuitrain's place: how far apart two identical runs land",
    )
    ap.add_argument(
        "--fetch",
        choices=list(steps_bench.LOADERS),
        default="item",
        help="the hand-written loop's fetch: item by item (torch's default) or whole batches (tuitrain's)",
    )
    ap.add_argument(
        "--cpu",
        default=str(default_cpu()),
        help="the CPU both processes are pinned to (default: the last one), or none",
    )
    args = ap.parse_args(argv)
    cpu = None if args.cpu == "none" else int(args.cpu)
    kinds = list(SIZES) if args.model == "both" else [args.model]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            # who starts alternates: the first and second process are not alike
            runs = [lockstep(kind, Path(tmp), r % 2 == 1, args.control, cpu, args.fetch) for r in range(args.repeats)]
            print_runs(kind, "hand-written again" if args.control else "tuitrain headless", "hand-written", runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
