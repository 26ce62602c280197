"""What the notebook's picture costs the training: `fit(dashboard="auto")` in a real Jupyter kernel (the
dashboard drawn once a second by a process of its own, tuitrain/run/notebook.py) against
`fit(dashboard=False)` in the same kernel, the two taking turns run by run. The figure is the per-step
time of the steps after the warm-up (from events.jsonl's logged steps), picture over none, per pair;
the median of the pairs. Target: <= 1.03x on the medium benchmark model.

On a 2-core machine two identical runs land up to 10 % apart (`--control`), too far to judge 3 % by
times alone. So each picture run also counts what the drawing took, with the operating system's own
counters rather than a clock: the CPU seconds of the kernel's child processes (the drawing process is its
only one: getrusage(RUSAGE_CHILDREN) before and after fit) over the run's wall time and the machine's
cores. The training can lose at most the CPU the drawing took from it, so that share bounds the cost.
Part of it is paid once: the drawing process's start (Python, Textual, reading the run) and its last
picture, measured apart by drawing the finished run once more; the rest, over the run's seconds, is the
steady cost of the redraws.

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

import tuitrain.run.notebook as _nb
SHOWN = []  # pictures each picture run put in its display
_close = _nb.NotebookView.close
def _counted_close(self, *a, **k):
    _close(self, *a, **k)
    SHOWN.append(self.shown)
_nb.NotebookView.close = _counted_close

def run(name, dashboard, steps, d_in, hidden, batch):
    import os, resource, time
    torch.manual_seed(0)
    SHOWN.clear()
    model = Net(d_in=d_in, hidden=hidden)
    train, _ = datasets(n=batch * steps, d_in=d_in)
    learner = Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-3), loss_fn=torch.nn.CrossEntropyLoss(),
                      train_metrics=["loss"], valid_metrics=[], epochs=1, batch_size=batch, seed=0,
                      device="cpu", run_dir=f"{{ROOT}}/{{name}}")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    result = learner.fit(train, dashboard=dashboard)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.status == "completed", result.error
    drawing = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    return per_step(learner.run_dir, steps // 4), drawing, wall, os.cpu_count(), (SHOWN or [0])[-1]
"""


def start_and_last_picture(run_dir: Path) -> float:
    """CPU seconds of drawing a finished run's one picture in a fresh process: what a picture run pays
    once (the process's start and its last picture)."""
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tuitrain",
            "watch",
            str(run_dir),
            "--frames",
            str(run_dir / "once.svg"),
            "--size",
            "120x40",
        ],
        check=True,
        capture_output=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


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
    ap.add_argument(
        "--control",
        action="store_true",
        help="dashboard=False in both places of a pair: how far apart two identical runs land",
    )
    args = ap.parse_args(argv)
    from jupyter_client.manager import start_new_kernel

    size = SIZES[args.model]
    with tempfile.TemporaryDirectory() as tmp:
        km, kc = start_new_kernel(kernel_name="python3", cwd=tmp)
        try:
            execute(kc, SETUP.format(here=str(HERE), repo=str(HERE.parent)) + f"\nROOT = {tmp!r}\n")
            ratios, shares, steady = [], [], []
            for i in range(args.pairs):
                order = ("auto", False) if i % 2 == 0 else (False, "auto")  # who goes first alternates
                times = {}
                for arm in order:
                    dashboard = False if args.control else arm
                    name = f"{'picture' if arm else 'none'}-{i}"
                    said = execute(kc, f"print(*run({name!r}, {dashboard!r}, {args.steps}, **{size!r}))")
                    step, drawing, wall, cores, shown = map(float, said.strip().splitlines()[-1].split())
                    times[arm] = step
                    if arm:
                        once = start_and_last_picture(Path(tmp) / name)
                        shares.append(drawing / (wall * cores))
                        steady.append(max(0.0, drawing - once) / (wall * cores))
                        print(
                            f"  the drawing took {drawing:.2f} CPU s over {wall:.1f} s on {cores:.0f} cores: "
                            f"{shares[-1]:.2%} of the machine; {once:.2f} s of it once (start, last "
                            f"picture), the redraws {steady[-1]:.2%}; {shown:.0f} pictures shown, "
                            f"{shown / wall:.2f} a second",
                            flush=True,
                        )
                ratios.append(times["auto"] / times[False])
                print(
                    f"pair {i + 1}: picture {times['auto'] * 1e3:.2f} ms/step, none {times[False] * 1e3:.2f} "
                    f"ms/step, ratio {ratios[-1]:.3f}",
                    flush=True,
                )
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    print(
        f"{args.model}: picture over none, median {statistics.median(ratios):.3f}x of {[round(r, 3) for r in ratios]}"
    )
    if shares:
        print(
            f"the drawing's share of the machine (the cost's bound): median {statistics.median(shares):.2%} of "
            f"{[f'{x:.2%}' for x in shares]}; the redraws alone {statistics.median(steady):.2%} of "
            f"{[f'{x:.2%}' for x in steady]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
