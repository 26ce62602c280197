"""Per-step time of Lightning's and the Hugging Face Trainer's own loops with tuitrain's
`TuitrainCallback` (headless: `dashboard=False`) against the same loop without it, the two in lockstep.

A lockstep run starts two processes, each one fit of the same configuration from the same seed: one
with `TuitrainCallback(dashboard=False, dir=<tmp>)`, one without. They take turns, as in
`bench_lockstep.py`: each runs `turn` steps (a few tenths of a second), hands the turn over through a
pipe and waits for it back, and times only its own turns, so the drifts of a shared machine's speed
fall on both alike. The baton is passed by a callback placed after every other one, at the end of a
step, so a turn holds whole steps with all their hooks. The first `--skip` turns (start-up, the other
process still importing) and the last turn are not counted. Both processes run with one torch
thread, pinned to one CPU (`--cpu`, the last one by default; `--cpu none` leaves them unpinned).

The Monitor's thread (it turns what `log` appended into events and files every 0.2 s) may wake during
the other process's turn; pinned, it then takes that CPU from the other process. The "with" process
reads that thread's CPU clock at each hand-over, and what it spent during the other's turns is moved
back: added to the "with" process's time and taken from the other's. Its share is printed apart.

A run's ratio is the sum of its "with" turns over the sum of its "without" turns; the figure is the
median of the runs (who starts alternates), with their range, and the interquartile range of the
turn-by-turn ratios (turn i of one process against turn i of the other) over all runs. Control runs
put a second process without the callback in its place: the method's own noise.

Configurations (`--only` picks some): Lightning with an MLP of a few ms per step ("small", 256-512-10,
batch 64) and one near 10 ms ("medium", 512-1024-10, batch 128), the LightningModule logging its loss
with `self.log` every step, at Lightning's default `log_every_n_steps=50` and at 1 (the callback's
worst case: it reads the metrics and logs at every step); the HF Trainer with a 2-layer GPT-2 built
from a config (no download: n_embd 64, vocab 256, 32 tokens, batch 4), `logging_steps` 50 and 1. The
Trainer's PrinterCallback (it prints every log dict when tqdm is off) is removed from both sides.

`--inside` instead runs one fit per configuration with the callback's hooks timed where they run (wall
and the thread's CPU time) and the Monitor thread's CPU clock read: what the callback adds to a step,
in CPU time, which a loaded machine disturbs far less than whole steps (see `inside`).

    python benchmarks/bench_integrations.py [--repeats 4] [--controls 2] [--turns 16] [--only lightning-small-1,hf-1] [--cpu N|none]
    python benchmarks/bench_integrations.py --inside [--turns 10 --skip 2]
    python benchmarks/bench_integrations.py --profile lightning-small-1    # one fit with the callback under cProfile
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# name -> (framework, model, log every, steps per turn)
CONFIGS = {
    "lightning-small-50": ("lightning", "small", 50, 60),
    "lightning-small-1": ("lightning", "small", 1, 60),
    "lightning-medium-50": ("lightning", "medium", 50, 20),
    "lightning-medium-1": ("lightning", "medium", 1, 20),
    "hf-50": ("hf", "gpt2", 50, 15),
    "hf-1": ("hf", "gpt2", 1, 15),
}
MLP = {"small": dict(d_in=256, hidden=512, batch=64), "medium": dict(d_in=512, hidden=1024, batch=128)}
GPT2 = dict(batch=4, length=32)
MONITOR_THREAD = "tuitrain-monitor"


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4, help="lockstep runs per configuration (who starts alternates)")
    ap.add_argument("--controls", type=int, default=2, help="control runs per configuration (without against without)")
    ap.add_argument("--turns", type=int, default=16, help="timed turns per process and run")
    ap.add_argument("--skip", type=int, default=3, help="turns at the start not timed")
    ap.add_argument("--only", default="", help="comma-separated configuration names: " + ", ".join(CONFIGS))
    ap.add_argument(
        "--cpu",
        default=str(max(os.sched_getaffinity(0))),
        help="the CPU both processes are pinned to (default: the last one), or none",
    )
    ap.add_argument("--profile", default="", help="one configuration: a fit with the callback under cProfile")
    ap.add_argument(
        "--inside",
        action="store_true",
        help="instead of lockstep: one fit per configuration with the callback's hooks timed inside",
    )
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--with-callback", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baton", default="", help=argparse.SUPPRESS)
    ap.add_argument("--inside-one", default="", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def quiet(framework: str) -> None:
    """The framework's start-up notices off (after its import, which sets its loggers' levels)."""
    warnings.filterwarnings("ignore")
    if framework == "hf":
        import transformers

        transformers.logging.set_verbosity_error()
    else:
        import lightning.pytorch  # noqa: F401

        for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_fabric"):
            logging.getLogger(name).setLevel(logging.ERROR)


# --- Lightning --------------------------------------------------------------------------------------


def lightning_fit(
    model: str, every: int, steps: int, tmp: Path, with_callback: bool, at_step_end, profile=None
) -> None:
    """One fit; `at_step_end()` is called at the end of every step, after every other callback."""
    import lightning.pytorch as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from tuitrain.integrations.lightning import TuitrainCallback

    m = MLP[model]

    class Net(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(m["d_in"], m["hidden"]), nn.ReLU(), nn.Linear(m["hidden"], 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self.body(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Times(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            at_step_end()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    n = m["batch"] * 40
    data = TensorDataset(torch.randn(n, m["d_in"], generator=g), torch.randint(0, 10, (n,), generator=g))
    loader = DataLoader(data, batch_size=m["batch"], shuffle=True, generator=g)
    callbacks = ([TuitrainCallback(dashboard=False, dir=tmp)] if with_callback else []) + [Times()]
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        max_steps=steps,
        log_every_n_steps=every,
        callbacks=callbacks,
    )
    net = Net()
    with profile or contextlib.nullcontext():
        trainer.fit(net, loader)


# --- the Hugging Face Trainer -----------------------------------------------------------------------


def hf_fit(model: str, every: int, steps: int, tmp: Path, with_callback: bool, at_step_end, profile=None) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
    from transformers.trainer_callback import PrinterCallback

    from tuitrain.integrations.transformers import TuitrainCallback

    class Times(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            at_step_end()

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n: int = 512, length: int = GPT2["length"]) -> None:
            g = torch.Generator().manual_seed(0)
            self.ids = torch.randint(0, 256, (n, length), generator=g)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    net = GPT2LMHeadModel(
        GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0)
    )
    args = TrainingArguments(
        output_dir=str(tmp / "hf"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=every,
        disable_tqdm=True,
        max_steps=steps,
        per_device_train_batch_size=GPT2["batch"],
        seed=0,
    )
    callbacks = ([TuitrainCallback(dashboard=False, dir=tmp)] if with_callback else []) + [Times()]
    trainer = Trainer(model=net, args=args, train_dataset=Tokens(), callbacks=callbacks)
    trainer.remove_callback(PrinterCallback)
    with profile or contextlib.nullcontext():
        trainer.train()


FITS = {"lightning": lightning_fit, "hf": hf_fit}


# --- one process of a lockstep run ------------------------------------------------------------------


class Baton:
    """Turns with the other process: at every `turn`-th step end, note the turn's time, hand the turn
    over and wait for it back. Also the Monitor thread's CPU time spent while the other process ran."""

    def __init__(self, spec: str) -> None:
        rfd, wfd, turn, second = spec.split(",")
        self.rfd, self.wfd, self.turn, self.second = int(rfd), int(wfd), int(turn), second == "1"
        self.steps = 0
        self.times: list[float] = []
        self.away: list[float] = []  # the Monitor thread's CPU seconds during the other's turn before each turn
        self.free = False  # the other process has ended: no more waiting
        self.clock: int | None = None
        self.t0 = 0.0

    def _monitor_cpu(self) -> float:
        if self.clock is None:
            for t in threading.enumerate():
                if t.name == MONITOR_THREAD and t.ident is not None:
                    self.clock = time.pthread_getcpuclockid(t.ident)
            if self.clock is None:
                return 0.0
        try:
            return time.clock_gettime(self.clock)
        except OSError:  # the thread has ended
            return 0.0

    def start(self) -> None:
        if self.second:
            self._wait()
        self.t0 = time.perf_counter()

    def _wait(self) -> None:
        if not self.free:
            self.free = os.read(self.rfd, 1) == b""

    def step_end(self) -> None:
        self.steps += 1
        if self.steps % self.turn:
            return
        self.times.append(time.perf_counter() - self.t0)
        out = self._monitor_cpu()
        if not self.free:
            os.write(self.wfd, b"x")
        self._wait()
        self.away.append(self._monitor_cpu() - out if out else 0.0)
        self.t0 = time.perf_counter()


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    framework, model, every, turn = CONFIGS[args.worker]
    quiet(framework)
    baton = Baton(args.baton)
    steps = turn * (args.skip + args.turns + 1)
    first = [True]

    def at_step_end() -> None:
        if first[0]:  # the first step's end: the fit has started (and the Monitor with it)
            first[0] = False
            baton.start()
            baton.steps = 1
            return
        baton.step_end()

    with tempfile.TemporaryDirectory(prefix="bench-integrations-") as tmp:
        FITS[framework](model, every, steps, Path(tmp), args.with_callback, at_step_end)
    print(" ".join(repr(t) for t in baton.times))
    print(" ".join(repr(t) for t in baton.away), flush=True)


# --- the runs ---------------------------------------------------------------------------------------


def lockstep(name: str, args: argparse.Namespace, with_first: bool, control: bool) -> dict:
    """One lockstep run: each process's timed turns, the Monitor thread's CPU time moved over."""
    turn = CONFIGS[name][3]
    a_r, a_w = os.pipe()  # without -> with
    b_r, b_w = os.pipe()  # with -> without
    cpu = None if args.cpu == "none" else int(args.cpu)
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    base = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        name,
        "--skip",
        str(args.skip),
        "--turns",
        str(args.turns),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = {}
    for who, (r, w), second in (("without", (b_r, a_w), with_first), ("with", (a_r, b_w), not with_first)):
        cmd = (
            base
            + ["--baton", f"{r},{w},{turn},{int(second)}"]
            + ([] if control and who == "with" else ["--with-callback"] if who == "with" else [])
        )
        procs[who] = subprocess.Popen(
            cmd, env=env, pass_fds=(r, w), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=pin
        )
    for fd in (a_r, a_w, b_r, b_w):  # only the two processes hold the pipes: one's exit frees the other
        os.close(fd)
    outs = {who: p.communicate() for who, p in procs.items()}
    for who, p in procs.items():
        if p.returncode:
            raise RuntimeError(f"{name} ({who}): exit {p.returncode}\n{outs[who][1][-3000:]}")
    (times_w, away_w), (times_o, _) = (
        [[float(x) for x in line.split()] for line in out.splitlines()[-2:]]
        for out, _ in (outs["with"], outs["without"])
    )
    n = min(len(times_w), len(times_o)) - 1  # the last turn: the other may be finishing its fit meanwhile
    lo = args.skip
    moved = [0.0] * n
    if cpu is not None:  # the Monitor's CPU before turn i+1 of "with" was spent in the other's turn
        for i in range(lo, n):
            moved[i] = away_w[i] if i < len(away_w) else 0.0
    w = [times_w[i] + moved[i] for i in range(lo, n)]
    o = [times_o[i] - moved[i] for i in range(lo, n)]
    return {
        "with": sum(w),
        "without": sum(o),
        "steps": (n - lo) * turn,
        "moved": sum(moved[lo:n]),
        "turn_ratios": [a / b for a, b in zip(w, o)],
    }


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def summarize(runs: list[dict]) -> dict:
    ratios = [r["with"] / r["without"] for r in runs]
    return {
        "ratio": statistics.median(ratios),
        "range": (min(ratios), max(ratios)),
        "turns": quartiles([t for r in runs for t in r["turn_ratios"]]),
        "step_ms": statistics.median(r["without"] / r["steps"] for r in runs) * 1e3,
        "moved_us": statistics.median(r["moved"] / r["steps"] for r in runs) * 1e6,
    }


def run_config(name: str, args: argparse.Namespace) -> dict:
    runs, controls = [], []
    order = []  # runs and controls interleaved: with, control, with, control, with, with ...
    for i in range(max(args.repeats, args.controls)):
        if i < args.repeats:
            order.append(False)
        if i < args.controls:
            order.append(True)
    for i, control in enumerate(order):
        r = lockstep(name, args, with_first=i % 2 == 0, control=control)
        (controls if control else runs).append(r)
        ratio = r["with"] / r["without"]
        print(
            f"  {name} {'control' if control else 'run'} {i + 1}/{len(order)}: "
            f"{'without 2' if control else 'with'} {r['with'] / r['steps'] * 1e3:.3f} ms/step, "
            f"without {r['without'] / r['steps'] * 1e3:.3f}, ratio {ratio:.3f}"
            + ("" if control else f", Monitor thread moved {r['moved'] / r['steps'] * 1e6:.1f} µs/step"),
            flush=True,
        )
    out = {"name": name, "runs": summarize(runs)}
    if controls:
        out["controls"] = summarize(controls)
    return out


def table(results: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"| configuration | step without | with / without ({args.repeats} runs: median, range) | turn by turn: "
        f"median (IQR) | the Monitor thread's share | control ({args.controls} runs: median, range) | "
        "control turn by turn |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        s, c = r["runs"], r.get("controls")
        ctl = (
            (
                f"{c['ratio']:.3f}× ({c['range'][0]:.3f}–{c['range'][1]:.3f}) | {c['turns'][1]:.3f}× "
                f"({c['turns'][0]:.3f}–{c['turns'][2]:.3f})"
            )
            if c
            else "| "
        )
        lines.append(
            f"| {r['name']} | {s['step_ms']:.2f} ms | {s['ratio']:.3f}× ({s['range'][0]:.3f}–{s['range'][1]:.3f}) | "
            f"{s['turns'][1]:.3f}× ({s['turns'][0]:.3f}–{s['turns'][2]:.3f}) | {s['moved_us']:.1f} µs/step | {ctl} |"
        )
    return "\n".join(lines)


HOOKS = {
    "lightning": ("on_train_batch_start", "on_train_batch_end", "on_train_epoch_start", "on_train_epoch_end"),
    "hf": ("on_step_end", "on_log"),
}


def inside(name: str, args: argparse.Namespace) -> dict:
    """One fit with the callback, each of its per-step hooks timed (wall, and this thread's CPU time),
    and the Monitor thread's CPU time: what the callback adds to a step, measured where it is spent,
    which a loaded machine disturbs far less than whole steps. The timer itself costs about 2 µs wall
    and 0.9 µs CPU per hook call; it is not taken off. Lightning's dispatch of its other, empty hooks to
    one more callback is not in it (the lockstep runs have it)."""
    import torch

    torch.set_num_threads(1)
    framework, model, every, turn = CONFIGS[name]
    quiet(framework)
    if framework == "hf":
        from tuitrain.integrations.transformers import TuitrainCallback
    else:
        from tuitrain.integrations.lightning import TuitrainCallback
    spent = {h: [0.0, 0.0] for h in HOOKS[framework]}
    saved = {h: getattr(TuitrainCallback, h) for h in HOOKS[framework]}

    def timed(hook, fn):
        def wrapper(self, *a, **k):
            w, c = time.perf_counter(), time.thread_time()
            try:
                return fn(self, *a, **k)
            finally:
                spent[hook][1] += time.thread_time() - c
                spent[hook][0] += time.perf_counter() - w

        return wrapper

    steps = turn * (args.skip + args.turns)
    warm = turn * args.skip
    marks: dict[str, tuple] = {}
    clock: list[int] = []

    def at_step_end() -> None:
        state["n"] += 1
        if not clock:
            clock.extend(
                time.pthread_getcpuclockid(t.ident)
                for t in threading.enumerate()
                if t.name == MONITOR_THREAD and t.ident is not None
            )
        if state["n"] in (warm, steps - 1):
            mon = time.clock_gettime(clock[0]) if clock else 0.0
            marks[str(state["n"])] = (
                time.perf_counter(),
                time.thread_time(),
                mon,
                {h: list(v) for h, v in spent.items()},
            )

    state = {"n": 0}
    for h in HOOKS[framework]:
        setattr(TuitrainCallback, h, timed(h, saved[h]))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-integrations-") as tmp:
            FITS[framework](model, every, steps, Path(tmp), True, at_step_end)
    finally:
        for h, fn in saved.items():
            setattr(TuitrainCallback, h, fn)
    (t0, c0, m0, s0), (t1, c1, m1, s1) = marks[str(warm)], marks[str(steps - 1)]
    n = steps - 1 - warm
    hooks_wall = sum(s1[h][0] - s0[h][0] for h in spent) / n
    hooks_cpu = sum(s1[h][1] - s0[h][1] for h in spent) / n
    step = (t1 - t0) / n
    step_cpu = (c1 - c0) / n + (m1 - m0) / n  # the loop's thread and the Monitor's: all of the step's CPU
    return {
        "name": name,
        "step_ms": step * 1e3,
        "step_cpu_ms": step_cpu * 1e3,
        "hooks_wall_us": hooks_wall * 1e6,
        "hooks_cpu_us": hooks_cpu * 1e6,
        "monitor_us": (m1 - m0) / n * 1e6,
        "by_hook": {h: (s1[h][1] - s0[h][1]) / n * 1e6 for h in spent},
        # CPU times: a hook's wall time also holds waits for the GIL while the Monitor's thread runs
        "ratio": step_cpu / (step_cpu - hooks_cpu - (m1 - m0) / n),
    }


def inside_table(results: list[dict]) -> str:
    lines = [
        "| configuration | step with the callback, wall (CPU) | the callback's hooks, wall (CPU), µs/step | by hook, CPU µs/step "
        "| the Monitor thread's CPU, µs/step | estimate, in CPU time: step / (step − hooks − the thread) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        by = ", ".join(f"{h} {v:.1f}" for h, v in r["by_hook"].items() if v >= 0.05)
        lines.append(
            f"| {r['name']} | {r['step_ms']:.2f} ms ({r['step_cpu_ms']:.2f}) | {r['hooks_wall_us']:.1f} ({r['hooks_cpu_us']:.1f}) | {by} | "
            f"{r['monitor_us']:.1f} | {r['ratio']:.3f}× |"
        )
    return "\n".join(lines)


def profile(name: str) -> None:
    """cProfile one fit with the callback: tuitrain's functions, by cumulative time (the loop's thread
    only: cProfile does not follow the Monitor's thread)."""
    import cProfile
    import pstats

    import torch

    torch.set_num_threads(1)
    framework, model, every, turn = CONFIGS[name]
    quiet(framework)
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="bench-integrations-") as tmp:
        FITS[framework](model, every, turn * 20, Path(tmp), True, lambda: None, profile=prof)
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).sort_stats("cumulative")
    stats.print_stats(r"tuitrain/", 40)
    print(buf.getvalue())


def main(argv=None) -> int:
    args = parse(argv)
    if args.worker:
        worker(args)
        return 0
    if args.inside_one:
        print(json.dumps(inside(args.inside_one, args)))
        return 0
    if args.profile:
        profile(args.profile)
        return 0
    names = [n for n in args.only.split(",") if n] or list(CONFIGS)
    for n in names:
        if n not in CONFIGS:
            raise SystemExit(f"unknown configuration {n!r}: one of {', '.join(CONFIGS)}")
    print(f"cpu {args.cpu}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    t0 = time.time()
    if args.inside:
        if args.cpu != "none":
            os.sched_setaffinity(0, {int(args.cpu)})
        results = []
        for n in names:  # one process per configuration: the two frameworks' imports kept apart
            out = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--inside-one",
                    n,
                    "--cpu",
                    args.cpu,
                    "--skip",
                    str(args.skip),
                    "--turns",
                    str(args.turns),
                ],
                capture_output=True,
                text=True,
                env=dict(os.environ, OMP_NUM_THREADS="1"),
            )
            if out.returncode:
                raise RuntimeError(f"{n}: exit {out.returncode}\n{out.stderr[-3000:]}")
            results.append(json.loads(out.stdout.splitlines()[-1]))
            print(f"  {n}: {results[-1]}", flush=True)
        print()
        print(inside_table(results))
        print(f"\n{time.time() - t0:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0
    results = [run_config(n, args) for n in names]
    print()
    print(table(results, args))
    print(f"\n{time.time() - t0:.0f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
