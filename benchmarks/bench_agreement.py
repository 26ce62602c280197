"""What `Monitor.stop_requested` costs a loop across 2 gloo ranks under torchrun (the agreement tick: an
all-reduce MAX about every 50 ms, started asynchronously and read one exchange later), and what one
blocking `Agreement.now()` costs.

A step is a fixed amount of work (small matmuls, calibrated once to about --work-ms; `--work busy`
spins for that long instead) and, as DDP's backward has, a small all-reduce that keeps the ranks in step
(`--no-grad-sync` leaves it out: then a stall of either rank is waited for at the next exchange). Blocks of --steps steps run in turns, the order rotated each round:
"control" (the loop alone), "check" (the loop and `mon.stop_requested` once a step) and "control 2"
(the loop alone again: the method's own noise). A block's time is the slower rank's (both ranks start a
block together after a barrier, outside the timing). The cost per call is the median over rounds of
(check - control) per step; the noise is the same for (control 2 - control). Inside "check" the call
itself is also timed (perf_counter around it, and this thread's CPU time): its mean over all calls,
exchanges included. Beside wall time, each block's process CPU time (all threads, gloo's included) per
step: on a machine busy with other work, a difference of CPU time still resolves what wall time cannot.

    python benchmarks/bench_agreement.py [--rounds 15] [--steps 100] [--work-ms 10] [--work matmul|busy] [--no-grad-sync]

It starts `python -m torch.distributed.run --nproc-per-node 2` on itself (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("control", "check", "control 2")


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=100, help="steps per block")
    ap.add_argument("--work-ms", type=float, default=10.0)
    ap.add_argument("--work", choices=["matmul", "busy"], default="matmul")
    ap.add_argument(
        "--no-grad-sync",
        dest="grad_sync",
        action="store_false",
        help="leave out the per-step all-reduce (DDP's gradient sync) from every variant",
    )
    ap.add_argument("--now-calls", type=int, default=2000)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    return ap.parse_args()


# --- inside each rank -------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from tuitrain import Monitor
    from tuitrain.core.strategies.agreement import Agreement

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    a, b = torch.randn(64, 64), torch.randn(64, 64)
    n = torch.zeros(1, dtype=torch.int64)
    if rank == 0:  # matmuls for about --work-ms, measured here and used by both ranks
        reps = 200
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            per = (time.perf_counter() - t0) / reps
        n[0] = max(1, round(args.work_ms / 1e3 / per))
    dist.broadcast(n, 0)
    matmuls = int(n[0])
    work_s = args.work_ms / 1e3

    grad = torch.zeros(1024)

    def work() -> None:
        if args.work == "busy":
            end = time.perf_counter() + work_s
            while time.perf_counter() < end:
                pass
        else:
            for _ in range(matmuls):
                torch.mm(a, b)
        if args.grad_sync:  # as DDP's backward does: the ranks meet once a step, on the same gloo group
            dist.all_reduce(grad)

    # the raw cost of one blocking exchange, both ranks calling back to back
    agreement = Agreement(None, width=5)
    for _ in range(50):
        agreement.now([0, 0, 0, 0, 0])
    dist.barrier()
    now_times = []
    for _ in range(args.now_calls):
        t0 = time.perf_counter()
        agreement.now([0, 0, 0, 0, 0])
        now_times.append(time.perf_counter() - t0)

    tmp = tempfile.mkdtemp() if rank == 0 else ""
    mon = Monitor(experiment="bench", run_dir=Path(tmp) / "run" if rank == 0 else None, dashboard=False).start()
    synced = mon._synced
    exchanges = [0]
    start = synced._agreement.start

    def counted(flags):  # how many exchanges a block started (an attribute lookup more per exchange)
        exchanges[0] += 1
        start(flags)

    synced._agreement.start = counted
    timer = torch.zeros(2, dtype=torch.float64)
    cpu = torch.zeros(1, dtype=torch.float64)

    def block(variant: str) -> tuple[float, float, int, float, float]:
        """Per step: the slower rank's wall time, time in the call (wall), exchanges, the ranks' mean
        process CPU time (every thread: gloo's and the Monitor's too), time in the call (this thread's CPU)."""
        dist.barrier()
        called = called_cpu = 0.0
        exchanges[0] = 0
        c_start = time.process_time()
        t0 = time.perf_counter()
        if variant == "check":
            for _ in range(args.steps):
                work()
                c0, u0 = time.perf_counter(), time.thread_time()
                if mon.stop_requested:
                    break
                called += time.perf_counter() - c0
                called_cpu += time.thread_time() - u0
        else:
            for _ in range(args.steps):
                work()
                c0, u0 = time.perf_counter(), time.thread_time()
                called += time.perf_counter() - c0  # the same timer calls, around nothing
                called_cpu += time.thread_time() - u0
        timer[0] = time.perf_counter() - t0
        cpu[0] = time.process_time() - c_start
        dist.all_reduce(timer, op=dist.ReduceOp.MAX)  # the slower rank's block
        dist.all_reduce(cpu)
        n = args.steps
        return float(timer[0]) / n, called / n, exchanges[0], float(cpu[0]) / 2 / n, called_cpu / n

    for variant in VARIANTS:  # warm-up: the tick's spacing settles from the measured time between ticks
        block(variant)
    rows: dict[str, list] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
        for variant in order:
            rows[variant].append(block(variant))
    mon.finish()
    if rank == 0:
        Path(args.result).write_text(json.dumps({"rows": rows, "now": now_times, "matmuls": matmuls}))
    dist.destroy_process_group()


# --- the launcher -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def us(x: float) -> str:
    return f"{x * 1e6:8.1f}"


def main() -> None:
    args = parse()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            __file__,
            "--worker",
            "--result",
            str(result),
            "--rounds",
            str(args.rounds),
            "--steps",
            str(args.steps),
            "--work-ms",
            str(args.work_ms),
            "--work",
            args.work,
            "--now-calls",
            str(args.now_calls),
        ] + ([] if args.grad_sync else ["--no-grad-sync"])
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        t0 = time.time()
        subprocess.run(cmd, env=env, check=True)
        data = json.loads(result.read_text())
    rows, now = data["rows"], data["now"]
    step = {v: [r[0] for r in rows[v]] for v in VARIANTS}
    base = step["control"]
    sync = "a 4 KB all-reduce per step" if args.grad_sync else "no per-step all-reduce"
    print(
        f"2 gloo ranks, {args.work} work ~{args.work_ms:g} ms/step ({data['matmuls']} 64x64 matmuls), {sync}, "
        f"{args.rounds} rounds of {args.steps}-step blocks, {time.time() - t0:.0f} s\n"
    )
    print(f"{'loop':32s} {'step, us':>9s} {'- control, us':>14s} {'rounds (min..max)':>22s}")
    for v in VARIANTS:
        med = statistics.median(step[v])
        diffs = [x - c for x, c in zip(step[v], base)]
        extra = (
            "" if v == "control" else f"{us(statistics.median(diffs))}      {us(min(diffs))}..{us(max(diffs)).strip()}"
        )
        print(f"{v:32s} {us(med)} {extra}")

    def median_diff(i: int, v: str) -> tuple[float, float, float]:
        d = [x[i] - c[i] for x, c in zip(rows[v], rows["control"])]
        return statistics.median(d), min(d), max(d)

    print(
        "\nprocess CPU time per step, mean of the ranks (every thread), check - control: "
        "median %+.1f us (rounds %+.1f..%+.1f); control 2 - control: median %+.1f us (rounds %+.1f..%+.1f)"
        % (*(x * 1e6 for x in median_diff(3, "check")), *(x * 1e6 for x in median_diff(3, "control 2")))
    )
    for label, i in (("wall", 1), ("this thread's CPU", 4)):
        inside = [r[i] for r in rows["check"]]
        empty = [r[i] for r in rows["control"]]
        print(
            f"`mon.stop_requested` timed inside the call ({label}): {statistics.median(inside) * 1e6:.2f} us/call "
            f"(median over rounds of the mean; rounds {min(inside) * 1e6:.2f}..{max(inside) * 1e6:.2f}); "
            f"the timer around nothing: {statistics.median(empty) * 1e6:.2f} us"
        )
    ex = [r[2] for r in rows["check"]]
    print(f"exchanges per {args.steps}-step block: median {statistics.median(ex):g} (min {min(ex)}, max {max(ex)})")
    q = statistics.quantiles(now, n=20)
    print(
        f"blocking Agreement.now() on gloo, {len(now)} calls on rank 0: median {statistics.median(now) * 1e6:.1f} us, "
        f"p5 {q[0] * 1e6:.1f} us, p95 {q[-1] * 1e6:.1f} us, mean {statistics.fmean(now) * 1e6:.1f} us"
    )
    cost = statistics.median([x - c for x, c in zip(step["check"], base)])
    noise = [x - c for x, c in zip(step["control 2"], base)]
    print(
        f"\ncost per call {cost * 1e6:+.1f} us (target <= 100 us, 1 % of a 10 ms step); the method's noise "
        f"(control 2 - control): median {statistics.median(noise) * 1e6:+.1f} us, "
        f"rounds {min(noise) * 1e6:+.1f}..{max(noise) * 1e6:+.1f} us (wall time of the slower rank)"
    )


if __name__ == "__main__":
    main()
