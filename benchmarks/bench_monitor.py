"""What `Monitor.log` costs a hand-written loop per call, against a control: the same loop appending
the same values to a list of its own. Interleaved rounds; the figure is the median of the rounds.

    python benchmarks/bench_monitor.py [--calls 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tuitrain import Monitor


def control(calls: int, loss) -> float:
    kept: list = []
    t0 = time.perf_counter()
    for step in range(1, calls + 1):
        kept.append((step, "train", {"loss": loss, "lr": 3e-4}, time.time()))
    return (time.perf_counter() - t0) / calls


def monitored(mon: Monitor, start: int, calls: int, loss) -> float:
    t0 = time.perf_counter()
    for step in range(start, start + calls):
        mon.log(step, loss=loss, lr=3e-4)
    return (time.perf_counter() - t0) / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    loss = torch.tensor(0.5)  # a 0-d tensor, as `loss.detach()` gives
    rows = {"control": [], "log(float)": [], "log(tensor)": []}
    with tempfile.TemporaryDirectory() as tmp, Monitor(run_dir=Path(tmp) / "r", dashboard=False) as mon:
        step = 1
        for _ in range(args.rounds):
            rows["control"].append(control(args.calls, loss))
            rows["log(float)"].append(monitored(mon, step, args.calls, 0.5))
            step += args.calls
            rows["log(tensor)"].append(monitored(mon, step, args.calls, loss))
            step += args.calls
            while mon._pending:  # the Monitor's thread writes what was logged outside the timed loops:
                time.sleep(0.05)  # otherwise its writing slows whichever loop runs next, the control too
            time.sleep(0.5)
    base = statistics.median(rows["control"])
    for name, xs in rows.items():
        med = statistics.median(xs)
        print(
            f"{name:12s} {med * 1e6:6.2f} us/call (rounds {min(xs) * 1e6:.2f}-{max(xs) * 1e6:.2f})"
            + ("" if name == "control" else f"   {(med - base) * 1e6:+.2f} us over the control")
        )


if __name__ == "__main__":
    main()
