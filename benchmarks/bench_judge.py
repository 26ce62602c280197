"""What the `[watch]` rules cost per step on the CPU, part by part, timed per call in one process
(no subprocesses, no lockstep): the noise of these figures is far below the effect they measure.

- `calls`: `Health.loss` / `Health.grads` per call, spike rules on (the defaults) and off (what stays
  with them off: the non-finite check); the gradients' total norm of the tiny model (4 tensors) by
  `torch.nn.utils.get_total_norm` and by the same two kernels called directly.
- `inloop`: the same calls timed where they run, inside a fit of the tiny model (`judge_loss` every
  step, `judge_grads` every logged step, each wrapped in two perf_counter_ns reads): code run once
  a step between torch's kernels runs from cold caches and costs several times its `calls` figure.
- `steps`: the tiny model (benchproj.Net 32-64-10, batches of 32, AdamW) trained in this process by
  `CoreLearner.fit`, the settings alternating fit by fit, each fit timed from its `warmup`-th step to its
  last by the model's forward pass; the figure is the median per-step time of each setting, and the
  medians' ratio to the rules-off one.

    python benchmarks/bench_judge.py [--part calls|inloop|steps|all] [--repeats 12] [--steps 3000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

import benchproj  # noqa: E402
from tuitrain.core.health import Health, Watch  # noqa: E402

OFF = {"loss_spike": "off", "grad_spike": "off", "stall": ""}
SETTINGS = {
    "defaults": {},
    "off": OFF,
    "spikes only": {"stall": ""},
    "stall only": {"loss_spike": "off", "grad_spike": "off"},
}


def per_call(fn, n: int, rounds: int = 7) -> tuple[float, float, float]:
    """(min, median, max) ns per call of `fn()` over `rounds` rounds of `n` calls."""
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append((time.perf_counter_ns() - t0) / n)
    return min(out), statistics.median(out), max(out)


def show(name: str, r: tuple[float, float, float], unit: str = "ns") -> None:
    k = 1000.0 if unit == "us" else 1.0
    print(f"  {name:<46} {r[1] / k:8.2f} {unit}  (min {r[0] / k:.2f}, max {r[2] / k:.2f})")


def calls(n: int = 200_000) -> None:
    rng = random.Random(0)
    values = [2.3 + rng.random() * 0.01 for _ in range(4096)]
    print(f"per call, median of 7 rounds of {n} (in brackets: the rounds' spread)")
    for name, watch in (("defaults", {}), ("spikes off", OFF)):
        h = Health(Watch.of(watch))
        for i, v in enumerate(values[:1000]):
            h.loss(v, i)
            h.grads(v, i)
        it = iter(range(10**12))
        vs = values
        show(f"Health.loss, {name}", per_call(lambda: h.loss(vs[next(it) & 4095], 5), n))
        show(f"Health.grads, {name}", per_call(lambda: h.grads(vs[next(it) & 4095], 5), n))
    it = iter(range(10**12))
    show("the loop's own cost (lambda, next, index)", per_call(lambda: values[next(it) & 4095], n))

    torch.set_num_threads(1)
    model = benchproj.Net(32, 64, 10)
    x, y = torch.randn(32, 32), torch.randint(0, 10, (32,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    params = list(model.parameters())
    norm, stack, foreach_norm = torch.linalg.vector_norm, torch.stack, torch._foreach_norm

    def total_norm():
        return float(torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None]))

    def direct():
        return float(norm(stack(foreach_norm([p.grad for p in params if p.grad is not None], 2.0)), 2.0))

    assert total_norm() == direct()
    m = max(n // 20, 1000)
    show("grads' norm, get_total_norm (tiny: 4 tensors)", per_call(total_norm, m), "us")
    show("grads' norm, _foreach_norm + stack + vector_norm", per_call(direct, m), "us")


def tiny_learner(watch: dict, model=None):
    from tuitrain.core.learner import CoreLearner

    torch.manual_seed(0)
    model = benchproj.Net(32, 64, 10) if model is None else model
    return CoreLearner(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-3),
        loss_fn=torch.nn.CrossEntropyLoss(),
        train_metrics=("loss",),
        valid_metrics=(),
        epochs=1,
        device="cpu",
        log_every_n_steps=10,
        batch_size=32,
        seed=0,
        watch=watch,
    )


def inloop(repeats: int, n_steps: int) -> None:
    from tuitrain.core import learner_health

    torch.set_num_threads(1)
    # the class whose judge_loss / judge_grads the loop calls (HealthGuard; HealthMixin before issue 26 item 3)
    mixin = getattr(learner_health, "HealthGuard", None) or learner_health.HealthMixin
    plain = {"judge_loss": mixin.judge_loss, "judge_grads": mixin.judge_grads}
    clock = time.perf_counter_ns
    spent: dict[str, list[int]] = {}

    def timed(name):
        fn, out = plain[name], spent.setdefault(name, [])

        def wrapper(*args):
            t0 = clock()
            r = fn(*args)
            out.append(clock() - t0)
            return r

        return wrapper

    data, _ = benchproj.datasets(n=32 * n_steps, d_in=32)
    figures: dict[tuple[str, str], list[float]] = {}
    try:
        for name in plain:
            setattr(mixin, name, timed(name))
        for r in range(repeats):
            for setting in ("defaults", "off") if r % 2 == 0 else ("off", "defaults"):
                for ns in spent.values():
                    ns.clear()
                learner = tiny_learner(SETTINGS[setting])
                assert learner.fit(data).status == "completed"
                for name, ns in spent.items():
                    figures.setdefault((setting, name), []).append(statistics.median(ns[len(ns) // 10 :]))
    finally:
        for name, fn in plain.items():
            setattr(mixin, name, fn)
    t0 = clock()
    timer = statistics.median([-t0 + (t0 := clock()) for _ in range(10000)])
    print(
        f"inside a fit of {n_steps} steps ({repeats} fits a setting): median ns per call, the fits' medians "
        f"(the two clock reads, about {timer:.0f} ns, included)"
    )
    per_step = {}
    for (setting, name), v in figures.items():
        med = statistics.median(v)
        every = 10 if name == "judge_grads" else 1
        per_step[setting] = per_step.get(setting, 0.0) + med / every
        print(
            f"  {setting:<9} {name:<12} {med / 1000:7.2f} us a call (fits {min(v) / 1000:.2f}-{max(v) / 1000:.2f}),"
            f" {med / every / 1000:5.2f} us a step"
        )
    for setting, ns in per_step.items():
        print(f"  {setting:<9} both         {ns / 1000:7.2f} us a step")


def steps(repeats: int, n_steps: int, warmup: int = 300) -> None:
    torch.set_num_threads(1)

    class Timed(benchproj.Net):
        def __init__(self):
            super().__init__(32, 64, 10)
            self.calls = 0
            self.t0 = self.t1 = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == warmup:
                self.t0 = time.perf_counter_ns()
            elif self.calls == n_steps:
                self.t1 = time.perf_counter_ns()
            return self.body(x)

    data, _ = benchproj.datasets(n=32 * n_steps, d_in=32)

    def fit(watch: dict) -> float:
        torch.manual_seed(0)
        model = Timed()
        result = tiny_learner(watch, model).fit(data)
        assert result.status == "completed", result
        return (model.t1 - model.t0) / (n_steps - warmup) / 1000

    names = list(SETTINGS)
    times: dict[str, list[float]] = {k: [] for k in names}
    fit({})  # warm: imports, allocator
    rng = random.Random(1)
    for r in range(repeats):
        order = names[:]
        rng.shuffle(order)  # no setting always next to another
        for name in order:
            times[name].append(fit(SETTINGS[name]))
    off = statistics.median(times["off"])
    print(f"per step, {n_steps} steps a fit (timed from step {warmup}), {repeats} fits a setting, alternating")
    for name in names:
        t = times[name]
        med = statistics.median(t)
        print(f"  {name:<12} {med:8.2f} us/step  x{med / off:.4f}  (fits {min(t):.2f}-{max(t):.2f})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["calls", "inloop", "steps", "all"], default="all")
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--cpu", default="last", help="the CPU to pin to (default: the last one), or none")
    args = ap.parse_args(argv)
    if args.cpu != "none":
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0)) if args.cpu == "last" else int(args.cpu)})
    if args.part in ("calls", "all"):
        calls()
    if args.part in ("inloop", "all"):
        inloop(max(args.repeats // 3, 2), args.steps)
    if args.part in ("steps", "all"):
        steps(args.repeats, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
