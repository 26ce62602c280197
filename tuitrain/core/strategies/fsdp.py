"""What runs inside each rank of an FSDP run: the model sharded with FSDP2 (`fully_shard`), its strategy,
validation that keeps the ranks in step, and sharded checkpoints.

Everything else is the DDP machinery of ddp.py and launch.py: spawning or torchrun, the event queue to
the parent, the agreed control flags (SyncedInterrupter), data sharding, metrics summed over ranks,
every rank's RNG state in each checkpoint (`FSDPStrategy` extends `DDPStrategy`). What FSDP changes:

- `shard_model` shards the parameters in place before the optimizer is built (build.py), so the
  optimizer holds the shards (DTensors) and each rank keeps 1/N of parameters, gradients and
  optimizer state. Units: see `fsdp_units`.
- Accumulation: micro-batches that do not step call `set_requires_gradient_sync(False)` (gradients
  accumulate unsharded; the stepping micro-batch reduce-scatters them).
- Validation: every forward all-gathers parameters, so every rank must run the same number of
  forwards. Validation stays split exactly (no item counted twice); a rank with fewer batches then
  repeats its last batch's forward, its results dropped (`_EvenValidation`).
- Checkpoints are directories (`checkpoint/epoch-0003-step-00000012/`): the DCP shards of model and
  optimizer (every rank writes its own) and `state.pt` with everything else (rank 0). They are written
  synchronously on the training thread: DCP's save is a collective of every rank, and running it in
  the Checkpointer's background thread would interleave its collectives with training's on the same
  group. Rank 0 then renames the directory into place and indexes it.
- `model.pt` is the full state_dict, gathered to rank 0: a plain model loads it.
Must not import textual.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from .. import checkpoint as ckpt
from .. import fsutil
from ..batches import move_to
from ..data import ResumableLoader
from ..events import CheckpointStarted
from ..state import CancelStep
from .base import Learner, Loaders
from .ddp import DDPStrategy, DistContext
from .sharded import FAILURES, save_shards


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The submodules sharded as units of their own (all-gathered for their forward, freed after).

    The model's own `fsdp_units()` when it defines one; otherwise each direct child that has
    parameters, where a ModuleList or ModuleDict (never called itself) stands for its elements: the
    blocks of a transformer, the Sequential of an MLP. The root is sharded last and holds the rest.
    Units that share a parameter (tied weights) give [] instead: the root then holds everything."""
    own = getattr(model, "fsdp_units", None)
    if callable(own):
        return list(own())
    units: list[nn.Module] = []
    for child in model.children():
        if isinstance(child, nn.ModuleDict):
            kids = list(child.values())
        elif isinstance(child, nn.ModuleList):
            kids = list(child)
        else:
            kids = [child]
        units.extend(k for k in kids if next(k.parameters(), None) is not None)
    seen: set[int] = set()
    for unit in units:
        ids = {id(p) for p in unit.parameters()}
        if ids & seen:
            return []
        seen |= ids
    return units


def shard_model(model: nn.Module, ctx: DistContext) -> None:
    """Shard `model` in place over all ranks (FSDP2): each unit, then the root."""
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    for unit in fsdp_units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)


class _EvenValidation(ResumableLoader):
    """This rank's validation batches, then its last batch's forward repeated until it has run as many
    forwards as the rank with the most batches (each FSDP forward is a collective of every rank)."""

    def __init__(self, inner: ResumableLoader, learner: Learner, most: int) -> None:
        super().__init__(inner.loader, inner.sampler, inner.seed)
        self.learner, self.most = learner, most

    def epoch_iter(self, epoch: int, skip_batches: int = 0) -> Iterator[Any]:
        return self._padded(super().epoch_iter(epoch, skip_batches))

    def _padded(self, batches: Iterable[Any]) -> Iterator[Any]:
        last = None
        for last in batches:
            yield last
        extra = self.most - self.batches_per_epoch()
        if extra > 0 and last is not None:
            repeat_valid_forward(self.learner, last, extra)


def repeat_valid_forward(learner: Learner, batch: Any, times: int) -> None:
    """Run the validation step on `batch` `times` times, dropping the results: this rank's share of
    the forwards that ranks with more validation batches run."""
    if learner.move_batches:
        batch = move_to(batch, learner.device, learner.non_blocking)
    with torch.no_grad():
        for _ in range(times):
            try:
                with learner.autocast():
                    learner.valid_phase.step(learner, batch)
            except CancelStep:
                pass


class FSDPStrategy(DDPStrategy):
    """One rank of an FSDP2 run (see the module docstring): DDP's ranks, data and agreement, with the
    model sharded in place instead of wrapped, and checkpoints as directories of shards."""

    name = "fsdp"

    def __init__(self, ctx: DistContext, sync_every: int | None = None) -> None:
        super().__init__(ctx, sync_every)
        self._grad_sync = True

    def prepare_model(self, model: nn.Module) -> None:
        """Before the optimizer is built: the optimizer must hold the shards."""
        shard_model(model, self.ctx)

    def _wrap(self, learner: Learner) -> None:
        if not isinstance(learner.raw_model, FSDPModule):
            raise TypeError(
                "FSDP needs the model sharded by shard_model(model, ctx) (Strategy.prepare_model) "
                "before its optimizer is built"
            )
        # sharded in place; the phases call the FSDP module itself, in training and validation

    def before_micro_batch(self, learner: Learner) -> None:
        if learner.state.stage == "train":
            b = learner.state.batch + 1  # this micro-batch; gradients are reduce-scattered only when it steps
            sync = b % learner.grad_accumulation == 0 or b == self._train_total
            if sync is not self._grad_sync:
                learner.raw_model.set_requires_gradient_sync(sync)
                self._grad_sync = sync

    def loaders(self, learner: Learner, train: ResumableLoader | None, valid: ResumableLoader | None) -> Loaders:
        train, valid = super().loaders(learner, train, valid)
        if valid is not None and valid.sampler is not None:  # without a sampler every rank reads it all
            valid = _EvenValidation(valid, learner, self._most(valid.batches_per_epoch()))
        return train, valid

    def _most(self, n: int) -> int:
        t = torch.tensor([n], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.ctx.control_group)
        return int(t.item())

    # --- checkpoints: a directory of shards, entered by every rank at the same point -------------

    def save_checkpoint(self, learner: Learner, reason: str) -> bool:
        s = learner.state
        self.gather_rngs(learner)
        name = ckpt.checkpoint_name(s.epoch, s.step)
        checkpointer = learner.checkpointer  # every rank writes its shards into its folder
        tmp = checkpointer.temp_dir(name)
        t0 = time.perf_counter()
        if self.writes:  # no stale `tmp` here: prepare() and a failed save remove theirs
            learner.bus.emit(CheckpointStarted(epoch=s.epoch, step=s.step, reason=reason))
        error = None
        try:
            save_shards(learner.raw_model, learner.optimizers, tmp)
        except FAILURES as e:  # DCP raises on every rank when one rank's write fails
            error = e
        learner.ckpt_io.mark_saved()
        if not self.writes:
            return True
        where = dict(epoch=s.epoch, step=s.step, reason=reason)
        if error is not None:
            fsutil.remove(tmp)
            checkpointer.failed(error, **where)
        else:
            rest = ckpt.snapshot(learner.state_dict())
            checkpointer.save_dir(
                name,
                lambda d: fsutil.atomic_write(d / ckpt.STATE_FILE, lambda f: torch.save(rest, f)),
                metrics=learner.ckpt_io.metrics(),
                started=t0,
                **where,
            )
        learner.ckpt_io.flush_events()
        return True

    def extra_state(self, learner: Learner, d: dict[str, Any]) -> dict[str, Any]:
        """What state.pt holds: all but the model and optimizer, which are in the shards."""
        d = super().extra_state(learner, d)
        del d["model"], d["optimizers"]
        d["sharded"] = True
        return d

    def check_resume(self, data: dict[str, Any]) -> None:
        if not data.get("sharded_dir"):
            raise ckpt.CheckpointError(
                'strategy "fsdp" resumes from its own sharded checkpoints (directories); '
                "this one is a single file: start a new run with [checkpoint] init_from = "
                "that run's model.pt"
            )

    def save_model(self, learner: Learner) -> bool:
        """model.pt: the full state_dict, gathered on every rank (a collective) and written by rank 0."""
        full = get_model_state_dict(learner.raw_model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if learner.ckpt_io.model_path is not None:
            fsutil.atomic_write(learner.ckpt_io.model_path, lambda f: torch.save(full, f))
        return True
