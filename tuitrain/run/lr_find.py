"""`tuitrain lr-find CONFIG.toml`: a learning-rate range test.

The model, data and optimizer are built from the config as `tuitrain run` builds them, in a
temporary folder that is removed afterwards (no run directory, nothing written but the CSV). The
learning rate grows exponentially from `--min-lr` to `--max-lr` over `--steps` optimizer steps, one
training batch each; the sweep stops early when the smoothed loss diverges. The suggestion is the lr
where the smoothed loss falls fastest against log(lr), as Lightning's finder suggests. Must not
import textual.
"""

from __future__ import annotations

import csv
import math
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

SMOOTHING = 0.98  # the loss's exponential moving average (bias-corrected), as fastai's and Lightning's
DIVERGED = 4.0  # the sweep stops when the smoothed loss exceeds this many times its best
SKIP_BEGIN, SKIP_END = 10, 1  # points left out of the suggestion at either end (noisy, or diverging)


@dataclass
class Sweep:
    lrs: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    smoothed: list = field(default_factory=list)
    stopped: str = ""  # why the sweep ended before max_lr ("" when it ran its steps)

    def suggestion(self) -> float | None:
        """The lr at the steepest descent of the smoothed loss against log(lr); None when too short."""
        n = len(self.smoothed)
        lo, hi = (SKIP_BEGIN, n - SKIP_END) if n > SKIP_BEGIN + SKIP_END + 2 else (0, n)
        if hi - lo < 3:
            return None
        best, at = math.inf, None
        for i in range(lo + 1, hi - 1):  # central differences over log(lr)
            slope = (self.smoothed[i + 1] - self.smoothed[i - 1]) / (
                math.log(self.lrs[i + 1]) - math.log(self.lrs[i - 1])
            )
            if slope < best:
                best, at = slope, i
        return self.lrs[at] if at is not None else None


def sweep(learner, loader, min_lr: float, max_lr: float, steps: int) -> Sweep:
    """Train `learner`'s model for up to `steps` optimizer steps, one batch each, the lr growing from
    `min_lr` to `max_lr`; the loss of each step, raw and smoothed."""
    import torch

    from tuitrain.core.state import StepOutput
    from tuitrain.core.loop import bound_step
    from tuitrain.core.batches import move_to

    phase = learner.train_phase
    manual = getattr(phase, "manual_optimization", False)
    step_fn = bound_step(phase, learner)
    groups = [g for opt in learner.optimizers.values() for g in opt.param_groups]
    base = [float(g["lr"]) or 1.0 for g in groups]  # groups keep their ratios to the first one
    learner.model.train()
    out, avg, best = Sweep(), 0.0, math.inf
    epoch = 1
    batches = iter(loader.epoch_iter(epoch, 0))
    for i in range(steps):
        lr = min_lr * (max_lr / min_lr) ** (i / (steps - 1))
        for g, b in zip(groups, base):
            g["lr"] = lr * b / base[0]
        try:
            batch = next(batches)
        except StopIteration:  # fewer batches than steps: the next epoch
            epoch += 1
            batches = iter(loader.epoch_iter(epoch, 0))
            batch = next(batches)
        if learner.move_batches:
            batch = move_to(batch, learner.device, learner.non_blocking)
        with learner.autocast():
            result = phase.step(learner, batch) if manual else step_fn(batch)
        loss = StepOutput.of(result).loss
        if manual:
            learner.end_manual_step()
        else:
            learner.backward(loss)
            learner.optimizer_step()
        value = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        if not math.isfinite(value):
            out.stopped = f"the loss became {value} at lr {lr:.3g}"
            break
        avg = SMOOTHING * avg + (1 - SMOOTHING) * value
        smooth = avg / (1 - SMOOTHING ** (i + 1))
        out.lrs.append(lr)
        out.losses.append(value)
        out.smoothed.append(smooth)
        best = min(best, smooth)
        if i > SKIP_BEGIN and smooth > DIVERGED * best:
            out.stopped = f"the loss diverged at lr {lr:.3g}"
            break
    return out


def plot(result: Sweep, suggested: float | None, width: int, height: int, color: bool = True) -> str:
    """The sweep as a plotext chart: loss against lr on a log axis (decades marked), the suggestion
    marked; losses far above the starting one (the divergence) are left out so the descent shows."""
    import plotext as plt

    top = 1.5 * max(result.smoothed[0], min(result.losses))
    shown = [(lr, raw, smooth) for lr, raw, smooth in zip(result.lrs, result.losses, result.smoothed) if raw <= top]
    lrs, raw, smooth = (list(t) for t in zip(*shown)) if shown else ([], [], [])
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.xscale("log")
    plt.scatter(lrs, raw, marker="dot", label="loss")
    plt.plot(lrs, [min(v, top) for v in smooth], label="smoothed")
    if suggested is not None:
        plt.vline(suggested)
    low, high = math.floor(math.log10(result.lrs[0])), math.ceil(math.log10(result.lrs[-1]))
    decades = [10.0**k for k in range(low, high + 1)]
    plt.xticks(decades, [f"{d:g}" for d in decades])
    plt.title("loss against learning rate" + (f" (suggested {suggested:.3g})" if suggested else ""))
    plt.xlabel("learning rate")
    text = plt.build()
    return text if color else plt.uncolorize(text)


def write_csv(result: Sweep, path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["lr", "loss", "smoothed_loss"])
        for row in zip(result.lrs, result.losses, result.smoothed):
            w.writerow([repr(float(v)) for v in row])


#: schedulers that set the lr themselves, from keys of their own: under them optimizer.lr changes nothing
SETS_LR = {
    "OneCycleLR": "OneCycleLR sets the lr from its max_lr",
    "CyclicLR": "CyclicLR cycles the lr between its base_lr and max_lr",
}


def _lr_setter(cfg) -> tuple[str, str, bool] | None:
    """(key, class name, settable by --set) of the config's scheduler that sets the lr itself, if any."""
    from tuitrain.config import chain_parts

    if cfg.scheduler is None:
        return None
    tables = [(f"scheduler.{k}", v) for k, v in cfg.scheduler.named.items()] or [("scheduler", cfg.scheduler)]
    for key, sched in tables:
        parts = [(k, part) for k, part, _, _ in chain_parts(sched, key)] if sched.chain else [(key, sched)]
        for k, part in parts:
            name = part.name or part.target.rpartition(":")[2].rpartition(".")[2]
            if name in SETS_LR:
                return k, name, not sched.chain
    return None


def advice(config: str, cfg, lr: float) -> str:
    """The line that says how to train with `lr`: the key that sets the lr in this config."""
    found = _lr_setter(cfg)
    if found is None:
        return f"use it: tuitrain run {config} --set optimizer.lr={lr:.3g}"
    key, name, settable = found
    why = f"{SETS_LR[name]}; optimizer.lr would change nothing"
    sets = [f"{key}.max_lr={lr:.3g}"] + ([f"{key}.base_lr={lr / 10:.3g}"] if name == "CyclicLR" else [])
    if not settable:
        return f"use it: set {' and '.join(sets)} in {config} ({why})"
    return f"use it: tuitrain run {config} {' '.join('--set ' + s for s in sets)} ({why})"


def _error(message: str, code: int = 2) -> int:
    print(f"tuitrain: error: {message}", file=sys.stderr)
    return code


def lr_find_command(args) -> int:
    from tuitrain.config import ConfigError, load_config
    from tuitrain.run.preflight import preflight

    if not (0 < args.min_lr < args.max_lr) or not math.isfinite(args.max_lr):
        return _error(f"--min-lr {args.min_lr:g} and --max-lr {args.max_lr:g}: need 0 < min-lr < max-lr")
    if args.steps < 5:
        return _error(f"--steps {args.steps}: a sweep needs at least 5 steps (about 100 is usual)")
    try:
        cfg = load_config(args.config, args.overrides)
        preflight(cfg)
    except ConfigError as e:
        return _error(str(e))
    if cfg.model.named or cfg.optimizer.named:
        return _error(f"{args.config}: lr-find sweeps one model's optimizer; this config has several")
    if cfg.train.strategy != "single":
        return _error(f"{args.config}: train.strategy: lr-find runs in one process; use --set train.strategy=single")
    csv_path = Path(args.csv) if args.csv else Path(f"lr-find-{cfg.experiment.name}.csv")
    if not csv_path.parent.is_dir():
        return _error(f"--csv {csv_path}: no such folder {csv_path.parent}")
    result = _run_sweep(cfg, args)
    if isinstance(result, int):
        return result
    suggested = result.suggestion()
    if not result.lrs:
        return _error(f"lr-find: no step gave a finite loss ({result.stopped})", 1)
    size = shutil.get_terminal_size((100, 30))
    print(plot(result, suggested, min(size.columns, 120), max(15, min(size.lines - 8, 30)), sys.stdout.isatty()))
    write_csv(result, csv_path)
    end = result.stopped or f"reached --max-lr {args.max_lr:g}"
    print(f"swept {len(result.lrs)} steps from lr {result.lrs[0]:.3g} to {result.lrs[-1]:.3g} ({end})")
    if suggested is None:
        print("no suggestion: too few steps before the loss diverged; lower --min-lr or raise --steps")
    else:
        print(
            f"suggested lr: {suggested:.3g} (where the smoothed loss falls fastest; a tenth of the lr where "
            "it is lowest is another common choice)"
        )
        print(advice(args.config, cfg, suggested))
    if cfg.scheduler is not None:
        print("[scheduler] was not used during the sweep (the sweep sets the lr itself)")
    print(f"sweep: {csv_path}")
    return 0


def _run_sweep(cfg, args) -> Sweep | int:
    """Build the run's parts in a temporary folder and sweep; exit code 1 when the user's code fails."""
    from tuitrain.core.callbacks import EventBus
    from tuitrain.run.runner import Run

    with tempfile.TemporaryDirectory(prefix="tuitrain-lr-find-") as tmp:
        run = Run(cfg, Path(tmp) / "run", headless=True)
        try:
            learner, train, _ = run.build(EventBus())
            learner.schedulers.clear()  # the sweep sets the lr itself
            return sweep(learner, train, args.min_lr, args.max_lr, args.steps)
        except Exception as e:
            from tuitrain.config import ConfigError

            if isinstance(e, ConfigError):
                return _error(str(e))
            traceback.print_exc()
            return _error(f"lr-find failed: {type(e).__name__}: {e}", 1)
