"""The `[watch]` rules' cost: tuitrain's step with every rule on against every rule off, each timed in
lockstep against the same hand-written loop (bench_lockstep.py), the two settings alternating run by
run. The figure is median(ratio with rules on) / median(ratio with rules off); the target is at most
1.02 on the medium model. The method's noise: `bench_lockstep.py --control` (about ±1 % run by run).

`--rules defaults` compares the rules on by default (`[watch]` as it comes: loss_spike and grad_spike
"alert", stall "10m") with those three off, the metrics as they come (benchmarks/RESULTS.md, the
house's table for the tiny model).

    python benchmarks/bench_health.py [--repeats 4] [--model medium|tiny] [--rules all|defaults]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_lockstep  # noqa: E402

OFF = ("watch.loss_spike=off", "watch.grad_spike=off", 'watch.stall=""', "watch.data_wait=0", "watch.nonfinite=fail")
ON = (
    "watch.loss_spike=skip",
    "watch.grad_spike=skip",
    'watch.stall="10m"',
    "watch.data_wait=0.5",
    "watch.nonfinite=skip",
    'metrics.train=["loss", "data_wait"]',
)
OFF = OFF + ('metrics.train=["loss", "data_wait"]',)  # the same metrics both ways
# --rules defaults: the [watch] table as it comes against its rules that can be turned off, off
DEFAULTS_ON: tuple[str, ...] = ()
DEFAULTS_OFF = ("watch.loss_spike=off", "watch.grad_spike=off", 'watch.stall=""')


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4, help="runs of each setting (even: who starts alternates)")
    ap.add_argument("--model", choices=["tiny", "medium"], default="medium")
    ap.add_argument(
        "--rules",
        choices=["all", "defaults"],
        default="all",
        help="all: every rule acting against every rule off; defaults: [watch] as it comes against "
        "loss_spike, grad_spike and stall off",
    )
    args = ap.parse_args(argv)
    on, off = (ON, OFF) if args.rules == "all" else (DEFAULTS_ON, DEFAULTS_OFF)
    cpu = bench_lockstep.default_cpu()
    runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, sets in (("off", off), ("on", on)) if r % 2 == 0 else (("on", on), ("off", off)):
                runs[name].append(bench_lockstep.lockstep(args.model, Path(tmp), r % 2 == 1, cpu=cpu, sets=sets))
    for name in ("off", "on"):
        bench_lockstep.print_runs(args.model, f"tuitrain rules {name}", "hand-written", runs[name])
    med = {k: statistics.median(t / h for t, h in v) for k, v in runs.items()}
    print(f"{args.model}: rules on / rules off = {med['on'] / med['off']:.3f}x (target <= 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
