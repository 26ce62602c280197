"""The `[watch]` rules' cost: tuitrain's step with every rule on against every rule off, each timed in
lockstep against the same hand-written loop (bench_lockstep.py), the two settings alternating run by
run. The figure is median(ratio with rules on) / median(ratio with rules off); the target is at most
1.02 on the medium model. The method's noise: `bench_lockstep.py --control` (about ±1 % run by run).

    python benchmarks/bench_health.py [--repeats 4] [--model medium|tiny]
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

OFF = ("watch.loss_spike=off", "watch.grad_spike=off", 'watch.stall=""', "watch.data_wait=0",
       "watch.nonfinite=fail")
ON = ("watch.loss_spike=skip", "watch.grad_spike=skip", 'watch.stall="10m"', "watch.data_wait=0.5",
      "watch.nonfinite=skip", "metrics.train=[\"loss\", \"data_wait\"]")
OFF = OFF + ("metrics.train=[\"loss\", \"data_wait\"]",)  # the same metrics both ways


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4, help="runs of each setting (even: who starts alternates)")
    ap.add_argument("--model", choices=["tiny", "medium"], default="medium")
    args = ap.parse_args(argv)
    cpu = bench_lockstep.default_cpu()
    runs: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, sets in (("off", OFF), ("on", ON)) if r % 2 == 0 else (("on", ON), ("off", OFF)):
                runs[name].append(bench_lockstep.lockstep(args.model, Path(tmp), r % 2 == 1, cpu=cpu, sets=sets))
    for name in ("off", "on"):
        bench_lockstep.print_runs(args.model, f"tuitrain rules {name}", "hand-written", runs[name])
    med = {k: statistics.median(t / h for t, h in v) for k, v in runs.items()}
    print(f"{args.model}: rules on / rules off = {med['on'] / med['off']:.3f}x (target <= 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
