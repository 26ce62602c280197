"""What runs inside each rank of an FSDP run: the model sharded with FSDP2 (`fully_shard`), its Learner,
validation that keeps the ranks in step, and sharded checkpoints.

Everything else is the DDP machinery of ddp.py and launch.py: spawning or torchrun, the event queue to
the parent, the agreed control flags (SyncedInterrupter), data sharding, metrics summed over ranks,
every rank's RNG state in each checkpoint. What FSDP changes:

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

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard

from .. import checkpoint as ckpt
from .. import fsutil
from ..data import ResumableLoader, rng_state
from ..events import CheckpointStarted
from ..learner import Learner
from ..phases import CancelStep, move_to
from .ddp import DDPLearner, DistContext
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

    def __init__(self, inner: ResumableLoader, learner: "FSDPLearner", most: int) -> None:
        super().__init__(inner.loader, inner.sampler, inner.seed)
        self.learner, self.most = learner, most

    def epoch_iter(self, epoch: int, skip_batches: int = 0):
        return self._padded(super().epoch_iter(epoch, skip_batches))

    def _padded(self, batches):
        last = None
        for last in batches:
            yield last
        extra = self.most - self.batches_per_epoch()
        if extra > 0 and last is not None:
            self.learner.repeat_valid_forward(last, extra)


class FSDPLearner(DDPLearner):
    """A Learner that trains one rank of an FSDP2 run (see the module docstring). `model` is already
    sharded by `shard_model` and `optimizer` built over its shards."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, *, dist_ctx: DistContext,
                 checkpointer=None, **kwargs) -> None:
        if not isinstance(model, FSDPModule):
            raise TypeError("FSDPLearner needs a model sharded by shard_model(model, ctx) before its optimizer "
                            "is built")
        self._shards_to = checkpointer  # every rank writes its shards into this Checkpointer's folder
        self._grad_sync = True
        super().__init__(model, optimizer, dist_ctx=dist_ctx, checkpointer=checkpointer, **kwargs)

    def _wrap_model(self) -> None:
        pass  # sharded in place; the phases call the FSDP module itself, in training and validation

    def autocast(self):
        if self.grad_accumulation > 1 and self.state.stage == "train":
            b = self.state.batch + 1  # this micro-batch; gradients are reduce-scattered only when it steps
            sync = b % self.grad_accumulation == 0 or b == self._train_total
            if sync is not self._grad_sync:
                self.raw_model.set_requires_gradient_sync(sync)
                self._grad_sync = sync
        return Learner.autocast(self)

    def fit(self, train_data, valid_data=None, resume=None, resumed_from=None):
        valid = self._loader(valid_data, False)
        self.dist.shard(valid, "valid")
        if valid is not None and valid.sampler is not None:  # without a sampler every rank reads it all
            valid = _EvenValidation(valid, self, self._most(valid.batches_per_epoch()))
        return super().fit(train_data, valid, resume, resumed_from)

    def _most(self, n: int) -> int:
        t = torch.tensor([n], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.dist.control_group)
        return int(t.item())

    def repeat_valid_forward(self, batch, times: int) -> None:
        """Run the validation step on `batch` `times` times, dropping the results: this rank's share of
        the forwards that ranks with more validation batches run."""
        if self.move_batches:
            batch = move_to(batch, self.device, self.non_blocking)
        with torch.no_grad():
            for _ in range(times):
                try:
                    with self.autocast():
                        self.valid_phase.step(self, batch)
                except CancelStep:
                    pass

    # --- checkpoints: a directory of shards, entered by every rank at the same point -------------

    def save_checkpoint(self, reason: str) -> None:
        if self.checkpointer is None:
            return
        s = self.state
        at = (s.epoch, s.step, s.stage)
        if self._last_ckpt_step == at:
            return
        mine = self._valid_rng if s.stage == "valid" and self._valid_rng is not None else rng_state()
        rngs: list = [None] * self.world_size
        dist.all_gather_object(rngs, mine, group=self.dist.control_group)
        self._rank_rngs = rngs
        name = ckpt.checkpoint_name(s.epoch, s.step)
        tmp = self._shards_to.temp_dir(name)
        t0 = time.perf_counter()
        if self.rank == 0:  # no stale `tmp` here: prepare() and a failed save remove theirs
            self.bus.emit(CheckpointStarted(epoch=s.epoch, step=s.step, reason=reason))
        error = None
        try:
            save_shards(self.raw_model, self.optimizers, tmp)
        except FAILURES as e:  # DCP raises on every rank when one rank's write fails
            error = e
        self._last_ckpt_step = at
        if self.rank != 0:
            return
        where = dict(epoch=s.epoch, step=s.step, reason=reason)
        if error is not None:
            fsutil.remove(tmp)
            self.checkpointer.failed(error, **where)
        else:
            rest = ckpt.snapshot(self.state_dict())
            self.checkpointer.save_dir(name, lambda d: fsutil.atomic_write(d / ckpt.STATE_FILE,
                                                                          lambda f: torch.save(rest, f)),
                                       metrics=self._checkpoint_metrics(), started=t0, **where)
        self._flush_checkpoint_events()

    def state_dict(self) -> dict:
        """What state.pt holds: all but the model and optimizer, which are in the shards."""
        d = super().state_dict()
        del d["model"], d["optimizers"]
        d["sharded"] = True
        return d

    def load_state_dict(self, data: dict) -> None:
        if not data.get("sharded_dir"):
            raise ckpt.CheckpointError("strategy \"fsdp\" resumes from its own sharded checkpoints (directories); "
                                       "this one is a single file: start a new run with [checkpoint] init_from = "
                                       "that run's model.pt")
        super().load_state_dict(data)

    def _save_model(self) -> None:
        """model.pt: the full state_dict, gathered on every rank (a collective) and written by rank 0."""
        full = get_model_state_dict(self.raw_model,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.model_path is not None:
            fsutil.atomic_write(self.model_path, lambda f: torch.save(full, f))
