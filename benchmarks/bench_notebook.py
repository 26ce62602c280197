"""What the notebook's picture costs the training: `fit(dashboard="auto")` in a real Jupyter kernel (the
dashboard drawn once a second by a process of its own, tuitrain/run/notebook.py) against
`fit(dashboard=False)` in the same kernel, the two taking turns run by run. The figure is the per-step
time of the steps after the warm-up (from events.jsonl's logged steps), picture over none, per pair;
the median of the pairs. Target: <= 1.03x on the medium benchmark model.

    python benchmarks/bench_notebook.py [--pairs 4] [--model medium|tiny] [--steps 1200] [--control]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIZES = {"tiny": dict(d_in=32, hidden=64, batch=32), "medium": dict(d_in=784, hidden=1024, batch=128)}

SETUP = """
import sys, json, torch
sys.path[:0] = [{here!r}, {repo!r}]
from benchproj import Net, datasets
from tuitrain import Learner

def per_step(run_dir, warmup):
    marks = {{}}
    for line in open(f"{{run_dir}}/events.jsonl"):
        e = json.loads(line)
        if e["event"] == "MetricsLogged" and e.get("scope") == "step":
            marks[e["step"]] = e["time"]
    last = max(marks)
    return (marks[last] - marks[warmup]) / (last - warmup)

def run(name, dashboard, steps, d_in, hidden, batch):
    torch.manual_seed(0)
    model = Net(d_in=d_in, hidden=hidden)
    train, _ = datasets(n=batch * steps, d_in=d_in)
    learner = Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-3), loss_fn=torch.nn.CrossEntropyLoss(),
                      train_metrics=["loss"], valid_metrics=[], epochs=1, batch_size=batch, seed=0,
                      device="cpu", run_dir=f"{{ROOT}}/{{name}}")
    result = learner.fit(train, dashboard=dashboard)
    assert result.status == "completed", result.error
    return per_step(learner.run_dir, steps // 4)
"""


def execute(kc, code: str) -> str:
    """Run `code` in the kernel; what it printed (an error raises)."""
    msg_id = kc.execute(code)
    out = ""
    while True:
        msg = kc.get_iopub_msg(timeout=900)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "stream":
            out += msg["content"]["text"]
        elif kind == "error":
            raise RuntimeError("\n".join(msg["content"]["traceback"]))
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--model", choices=sorted(SIZES), default="medium")
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--control", action="store_true",
                    help="dashboard=False in both places of a pair: how far apart two identical runs land")
    args = ap.parse_args(argv)
    from jupyter_client.manager import start_new_kernel

    size = SIZES[args.model]
    with tempfile.TemporaryDirectory() as tmp:
        km, kc = start_new_kernel(kernel_name="python3", cwd=tmp)
        try:
            execute(kc, SETUP.format(here=str(HERE), repo=str(HERE.parent)) + f"\nROOT = {tmp!r}\n")
            ratios = []
            for i in range(args.pairs):
                order = ("auto", False) if i % 2 == 0 else (False, "auto")  # who goes first alternates
                times = {}
                for arm in order:
                    dashboard = False if args.control else arm
                    name = f"{'picture' if arm else 'none'}-{i}"
                    said = execute(kc, f"print(run({name!r}, {dashboard!r}, {args.steps}, **{size!r}))")
                    times[arm] = float(said.strip().splitlines()[-1])
                ratios.append(times["auto"] / times[False])
                print(f"pair {i + 1}: picture {times['auto'] * 1e3:.2f} ms/step, none {times[False] * 1e3:.2f} "
                      f"ms/step, ratio {ratios[-1]:.3f}", flush=True)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    print(f"{args.model}: picture over none, median {statistics.median(ratios):.3f}x of "
          f"{[round(r, 3) for r in ratios]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
