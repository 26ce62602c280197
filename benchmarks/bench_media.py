"""What logging samples and distributions costs a training run (issue 40), three ways.

1. lockstep (bench_lockstep's method, pinned to one CPU): the medium model under `tuitrain run
   --headless` against the hand-written loop, with `[log] samples` (a 64-image grid of the first layer's
   filters and a line of text, every 50 steps) and `[log] histograms = ["weights", "grads"]` every 100
   steps, and without; the runs alternate (with, without, ...), and the figure is the median ratio with
   over the median ratio without. The media worker is a thread of the tuitrain process, so on one CPU
   whatever it does in the hand-written loop's turn is charged to that loop: part 2 counts it apart.
2. CPU accounting, in this process: the same medium model and media on a `CoreLearner`, timing the
   loop's own share (the samples function, the copies and histc on the loop's thread) and the media
   worker's CPU seconds (`MediaLog.cpu_seconds`, thread CPU time), both over the run's wall time. Their
   sum over the run's time is the cost the loop could see at most, were the worker never to overlap.
3. Memory over a long run: a `Monitor` loop of `--long` steps (each a `--step-ms` sleep, the time a
   step's device work would take) logging a text and a 64-image grid every 50 steps and a 1M-value
   histogram every 100; RSS, the files kept and the items dropped, every tenth of the run.

    python benchmarks/bench_media.py [--repeats 4] [--steps 1800] [--long 100000] [--step-ms 1] [--part 1,2,3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MEDIA_SETS = (
    'log.samples={ target = "benchproj:samples64", every_n_steps = 50 }',
    'log.histograms=["weights", "grads"]',
    "log.histograms_every_n_steps=100",
)


def part_lockstep(repeats: int) -> None:
    import bench_lockstep

    with tempfile.TemporaryDirectory() as tmp:
        runs = {"with": [], "without": []}
        cpu = bench_lockstep.default_cpu()
        for r in range(repeats):
            for which in ("with", "without") if r % 2 == 0 else ("without", "with"):
                sets = MEDIA_SETS if which == "with" else ()
                t, h = bench_lockstep.lockstep("medium", Path(tmp), r % 2 == 1, cpu=cpu, sets=sets)
                runs[which].append(t / h)
                print(f"  round {r + 1} {which:7s} media: tuitrain/hand-written {t / h:.3f}x", flush=True)
        w, wo = statistics.median(runs["with"]), statistics.median(runs["without"])
        print(
            f"lockstep medium: with media {w:.3f}x, without {wo:.3f}x (medians of {repeats}); "
            f"media cost {w / wo:.3f}x; spread with {min(runs['with']):.3f}-{max(runs['with']):.3f}, "
            f"without {min(runs['without']):.3f}-{max(runs['without']):.3f}"
        )


def part_accounting(steps: int) -> None:
    import torch

    import benchproj
    from tuitrain.core.learner import CoreLearner
    from tuitrain.core.sections import Log

    torch.manual_seed(0)
    train, _ = benchproj.datasets(n=128 * steps, d_in=784)
    loop_share = [0.0]

    def timed_samples(model, step):
        t0 = time.thread_time()
        out = benchproj.samples64(model, step)
        loop_share[0] += time.thread_time() - t0
        return out

    results = {}
    for which in ("without", "with", "without", "with"):
        model = benchproj.Net(d_in=784, hidden=1024)
        log = (
            Log(
                samples={"target": timed_samples, "every_n_steps": 50},
                histograms=["weights", "grads"],
                histograms_every_n_steps=100,
            )
            if which == "with"
            else Log()
        )
        with tempfile.TemporaryDirectory() as tmp:
            learner = CoreLearner(
                model,
                torch.optim.AdamW(model.parameters(), lr=1e-3),
                loss_fn=torch.nn.CrossEntropyLoss(),
                epochs=1,
                batch_size=128,
                run_dir=tmp,
                log=log,
                checkpoint=None,
            )
            calls = {"s": 0.0}

            def wrap(fn):  # the loop thread's time inside the media calls (copy, histc, hand-over)
                def timed(*a, **k):
                    t0 = time.thread_time()
                    try:
                        return fn(*a, **k)
                    finally:
                        calls["s"] += time.thread_time() - t0

                return timed

            start = time.perf_counter()
            loop_share[0] = 0.0
            orig_start = learner._start_media

            def start_media():
                orig_start()
                if which == "with":
                    m = learner.media
                    m.image, m.text, m.histogram = wrap(m.image), wrap(m.text), wrap(m.histogram)

            learner._start_media = start_media
            result = learner.fit(train)
            wall = time.perf_counter() - start
            media = learner.media
            worker = media.cpu_seconds if media is not None else 0.0
            results.setdefault(which, []).append((wall, loop_share[0] + calls["s"], worker))
            print(
                f"  {which:7s} media: {wall:.2f} s wall; loop thread in media {loop_share[0] + calls['s']:.3f} s "
                f"(samples fn {loop_share[0]:.3f}); worker CPU {worker:.3f} s; status {result.status}",
                flush=True,
            )
    wo = statistics.median(w for w, _, _ in results["without"])
    loop_s = statistics.median(x for _, x, _ in results["with"])
    worker_s = statistics.median(x for _, _, x in results["with"])
    print(
        f"accounting, {steps} steps: the loop's own media time {loop_s / wo * 100:.2f} % of the run, the "
        f"worker's CPU {worker_s / wo * 100:.2f} %; at most {(loop_s + worker_s) / wo * 100:.2f} % together"
    )


def part_memory(steps: int, step_ms: float) -> None:
    import psutil
    import torch

    from tuitrain import Monitor

    proc = psutil.Process()
    w = torch.randn(1000, 1000)
    imgs = torch.rand(64, 1, 28, 28)
    with tempfile.TemporaryDirectory() as tmp:
        with Monitor(experiment="media-memory", run_dir=Path(tmp) / "run", dashboard=False) as mon:
            start = time.perf_counter()
            for step in range(1, steps + 1):
                mon.log(step, loss=1.0 / step)
                time.sleep(step_ms / 1000)
                if step % 50 == 0:
                    mon.log_text(step, "sample", f"step {step}: " + "lorem ipsum " * 40)
                    mon.log_image(step, "grid", imgs)
                if step % 100 == 0:
                    mon.log_histogram(step, "weights/w", w)
                if step % (steps // 10) == 0:
                    mon._media.flush()  # what was handed over is written: RSS of a worker caught up
                    files = sum(len(list((Path(tmp) / "run/media" / n).glob("*"))) for n in ("sample", "grid"))
                    size = (Path(tmp) / "run/events.jsonl").stat().st_size
                    print(
                        f"  step {step:7d}: RSS {proc.memory_info().rss / 2**20:7.1f} MiB, media files {files}, "
                        f"events.jsonl {size / 2**20:.1f} MiB, dropped {mon._media.dropped}, "
                        f"{time.perf_counter() - start:.0f} s",
                        flush=True,
                    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--steps", type=int, default=1800, help="steps of part 2's runs")
    ap.add_argument("--long", type=int, default=100_000, help="steps of part 3's run")
    ap.add_argument("--step-ms", type=float, default=1.0, help="part 3: milliseconds each step sleeps")
    ap.add_argument("--part", default="1,2,3")
    args = ap.parse_args(argv)
    parts = set(args.part.split(","))
    if "1" in parts:
        part_lockstep(args.repeats)
    if "2" in parts:
        part_accounting(args.steps)
    if "3" in parts:
        part_memory(args.long, args.step_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
