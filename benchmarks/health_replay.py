"""Candidate spike rules tried on the health corpus's saved values (bench_health_corpus.py --replay).

For each rule: the spike episodes it finds on the healthy runs (before the fault, on the fault runs) and
the faults it catches at their step. The rules are replayed as an alert-only rule runs (every finite
value enters the window), each series (loss, grad norm) on its own; an episode is a run of consecutive
spikes. The candidates:
- `mean+sd`: the rule before the corpus (value > mean + k sd of the window);
- `med+iqr`: value > median + k x IQR/1.349 and value > median + (r - 1) x |median|;
- `med+upper`: the spread from the upper side only, (q90 - median)/1.2816 (a right-skewed loss's own
  tail), with the same relative part;
- `tuitrain`: `tuitrain.core.health.Spike` itself at the given `[watch]` keys.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
from collections import deque
from pathlib import Path


def load(folder: Path) -> list[dict]:
    runs = []
    for p in sorted(folder.glob("*.json.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            runs.append(json.load(f))
    return runs


class Candidate:
    def __init__(self, kind: str, sigmas: float, ratio: float = 1.0, window: int = 128, top: float = 1.0) -> None:
        self.kind, self.sigmas, self.ratio, self.window, self.top = kind, sigmas, ratio, window, top
        self.values: deque = deque()
        self.ordered: list = []

    def limit(self) -> float | None:
        n = len(self.ordered)
        if n < self.window // 2:
            return None
        o = self.ordered
        if self.kind == "mean+sd":
            mean = sum(o) / n
            sd = math.sqrt(max(0.0, sum(x * x for x in o) / n - mean * mean))
            return mean + self.sigmas * max(sd, 1e-6 * abs(mean))
        med = o[n // 2] if n % 2 else 0.5 * (o[n // 2 - 1] + o[n // 2])
        if self.kind == "med+iqr":
            spread = (o[(3 * n) // 4] - o[n // 4]) / 1.349
        elif self.kind == "log":
            logs = [math.log(max(x, 1e-30)) for x in o]
            lmed = logs[n // 2]
            return math.exp(lmed + max(self.sigmas * (logs[int(0.9 * n)] - lmed) / 1.2816, math.log(self.ratio)))
        else:
            spread = (o[min(n - 1, int(0.9 * n))] - med) / 1.2816
        if self.kind == "top":
            hi = o[min(n - 1, int(self.top * n))]
            return max(med + self.sigmas * spread, hi + (self.ratio - 1) * abs(hi))
        return med + max(self.sigmas * spread, (self.ratio - 1) * abs(med), 1e-12)

    def push(self, v: float) -> None:
        self.values.append(v)
        bisect.insort(self.ordered, v)
        if len(self.values) > self.window:
            old = self.values.popleft()
            del self.ordered[bisect.bisect_left(self.ordered, old)]


def spikes_of(series: list[tuple[int, float]], make) -> list[int]:
    """The first step of each spike episode."""
    rule, out, inside = make(), [], False
    for step, v in series:
        if not math.isfinite(v):
            continue
        lim = rule.limit()
        spike = lim is not None and v > lim
        if spike and not inside:
            out.append(step)
        inside = spike
        rule.push(v)
    return out


def judge(runs: list[dict], make) -> tuple[int, int, int, int, list[str]]:
    """(healthy runs with an episode, episodes on them, faults to catch, caught at their step, where)."""
    bad_runs = episodes = to_catch = caught = 0
    where = []
    for run in runs:
        found = []
        for what in ("loss", "grads"):
            series = [(s, v) for w, s, v in run["values"] if w == what]
            found += [(what, s) for s in spikes_of(series, make)]
        fault = run["fault_step"] if run["fault"] else None
        false = [(w, s) for w, s in found if fault is None or s < fault]
        if run["fault"] and run["expect"] == "none":  # the drift: nothing at or after it either
            false = found
        if false:
            bad_runs += 1
            episodes += len(false)
            where.append(f"{run['name']}:" + ",".join(f"{w[0]}{s}" for w, s in false[:4]))
        if run["fault"] and run["expect"] != "none":
            hit = any(s == fault for _, s in found)
            if run["expect"] == "caught":
                to_catch += 1
                caught += hit
            else:
                where.append(f"{run['name']} {'caught' if hit else 'missed'}")
    return bad_runs, episodes, to_catch, caught, where


def margin(runs: list[dict]) -> None:
    """How far each value is above the largest of the window before it: the healthy values' worst, and
    each fault's (what spike_ratio must fall between)."""
    worst: dict[str, tuple[float, str]] = {}
    faults: dict[str, list[str]] = {"loss": [], "grads": []}
    for run in runs:
        fault = run["fault_step"] if run["fault"] else None
        for what in ("loss", "grads"):
            window: deque = deque()
            ordered: list = []
            for _, step, v in ((w, s, v) for w, s, v in run["values"] if w == what and math.isfinite(v)):
                if len(ordered) >= 64 and ordered[-1] > 0:
                    r = v / ordered[-1]
                    if fault is None or step < fault:
                        if r > worst.get(what, (0.0, ""))[0]:
                            worst[what] = (r, f"{run['name']}@{step}")
                    elif step == fault and run["expect"] != "none":
                        faults[what].append(f"{r:.3g}")
                window.append(v)
                bisect.insort(ordered, v)
                if len(window) > 128:
                    del ordered[bisect.bisect_left(ordered, window.popleft())]
    for what in ("loss", "grads"):
        w, where = worst.get(what, (0.0, "-"))
        print(
            f"{what}: healthy values at most {w:.3g} times the largest of the 128 before them ({where}); "
            f"the faults at their step: {', '.join(sorted(faults[what], key=float))}"
        )
    print()


def main(folder: Path) -> int:
    runs = load(folder)
    if not runs:
        print(f"no saved values in {folder}: run bench_health_corpus.py first")
        return 1
    print(
        f"{len(runs)} runs: {sum(1 for r in runs if not r['fault'])} healthy, "
        f"{sum(1 for r in runs if r['fault'])} with a fault\n"
    )
    margin(runs)
    print(
        f"{'rule':<34} {'runs falsely alarmed':>20} {'false episodes':>14} {'x10+ caught':>11}  recall of the others; where"
    )
    grid = [("mean+sd", 6.0, 1.0, 1.0)]
    grid += [(k, s, r, 1.0) for k in ("med+iqr", "med+upper", "log") for s in (6.0, 10.0) for r in (1.0, 4.0)]
    grid += [("top", s, r, t) for s in (6.0, 8.0) for r in (2.0, 3.0, 4.0, 5.0) for t in (0.95, 0.98, 1.0)]
    for kind, sigmas, ratio, top in grid:
        make = lambda: Candidate(kind, sigmas, ratio, top=top)  # noqa: E731
        bad, eps, n, hit, where = judge(runs, make)
        name = (
            f"{kind} k={sigmas:g}"
            + (f" r={ratio:g}" if kind != "mean+sd" else "")
            + (f" q={top:g}" if kind == "top" else "")
        )
        print(f"{name:<34} {bad:>20} {eps:>14} {f'{hit}/{n}':>11}  {'; '.join(where)[:200]}")
    try:
        from tuitrain.core.health import Spike, Watch

        w = Watch()

        class Ours:
            def __init__(self):
                self.rule = Spike(w.spike_window, w.spike_sigmas, w.spike_ratio)

            def limit(self):
                return self.rule.limit

            def push(self, v):
                self.rule.push(v)

        bad, eps, n, hit, where = judge(runs, Ours)
        name = f"tuitrain defaults k={w.spike_sigmas:g} r={w.spike_ratio:g}"
        print(f"{name:<34} {bad:>20} {eps:>14} {f'{hit}/{n}':>11}  {'; '.join(where)[:200]}")
    except (ImportError, AttributeError, TypeError):
        pass
    return 0
