"""What runs inside each rank of a DDP run: the process group and the DDP strategy.

- `DistContext`: rank, world size, device and backend (gloo on CPU, NCCL with one GPU per rank), the
  strategy's name ("ddp", or "fsdp": fsdp.py builds on this file), and how each rank shards its data
  (`EpochSampler.shard`).
- `DDPStrategy` (a `Strategy`, base.py): the model wrapped in DistributedDataParallel, metrics summed
  over ranks when read, `no_sync` on micro-batches that do not step, control flags agreed by every rank
  (a `SyncedInterrupter`, agreement.py), checkpoints written by rank 0 with every rank's RNG state.
Must not import textual.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..control import Interrupter
from ..data import ResumableLoader, rng_state, set_rng_state
from ..metrics import _Ratio
from .agreement import SyncedInterrupter, dist_timeout
from .base import Learner, Loaders, Strategy


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    control_group: Any = None  # CPU (gloo) group for control flags and RNG states; None: the default group
    strategy: str = "ddp"  # or "fsdp"

    def shard(self, loader: ResumableLoader | None, split: str) -> None:
        """Give this rank its share of each epoch: training padded to equal length (every rank runs the
        same number of steps), validation split exactly (no item counted twice)."""
        if loader is None:
            return
        s = loader.sampler
        if s is None:
            import warnings

            warnings.warn(
                f"the {split} data's sampler cannot be sharded (an IterableDataset or a custom "
                "sampler): every rank reads all of it, and ranks may run different step counts",
                stacklevel=2,
            )
            return
        if s.world_size == self.world_size:
            return
        mode = "uneven" if split == "valid" else ("drop" if loader.loader.drop_last else "pad")
        if mode == "uneven" and self.strategy == "fsdp" and s.dataset_length < self.world_size:
            import warnings  # every FSDP forward needs every rank: each needs at least one item

            warnings.warn(
                f"the {split} data has {s.dataset_length} item(s) for {self.world_size} processes: "
                "items are repeated so that every rank has one, and counted more than once",
                stacklevel=2,
            )
            mode = "pad"
        s.shard(self.rank, self.world_size, mode)

    def all_sum(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.comm_device)
        dist.all_reduce(t)
        return t.tolist()

    @property
    def comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")


def pick_device(spec: str, local_rank: int) -> tuple[torch.device, str]:
    """(device, backend) of one rank: one GPU per rank with NCCL, else the CPU with gloo."""
    if spec.startswith("cuda") or (spec == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {spec!r} requested but CUDA is not available")
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def init_distributed(
    rank: int, world_size: int, local_rank: int, device_spec: str, init_method: str | None = None, strategy: str = "ddp"
) -> DistContext:
    """Join the process group (`init_method` None: torchrun's env:// variables)."""
    device, backend = pick_device(device_spec, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs: dict[str, Any] = {"backend": backend, "timeout": dist_timeout()}
    if init_method is not None:
        kwargs.update(init_method=init_method, rank=rank, world_size=world_size)
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    # with NCCL, the small host-side exchanges go through a gloo group: no device sync per step
    control = dist.new_group(backend="gloo", timeout=dist_timeout()) if backend == "nccl" else None
    return DistContext(rank, world_size, local_rank, device, backend, control, strategy)


def shutdown_distributed(ended_well: bool = True) -> None:
    """Leave the process group; after a normal end, together (a rank tearing down gloo while a peer still
    talks to it can abort the peer)."""
    if dist.is_available() and dist.is_initialized():
        import gc

        gc.collect()  # the DDP module (in a reference cycle) goes before its process group
        try:
            if ended_well:
                dist.barrier()
            dist.destroy_process_group()
        except Exception:  # a peer already gone: nothing left to tidy
            pass


class _StepDispatch(torch.nn.Module):
    """DDP's module: its forward runs the user's model, or its train_step, so DDP sees every forward."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, _tuitrain_step: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
        if _tuitrain_step is not None:
            return _tuitrain_step(*args, **kwargs)
        return self.module(*args, **kwargs)


class DDPStrategy(Strategy):
    """One rank of a DistributedDataParallel run (see the module docstring)."""

    name = "ddp"

    def __init__(self, ctx: DistContext, sync_every: int | None = None) -> None:
        self.ctx = ctx
        self.rank, self.world_size, self.device = ctx.rank, ctx.world_size, ctx.device
        self.writes = ctx.rank == 0  # rank 0 writes the run's files
        self.solo_boundaries = False  # boundaries are collective: every rank enters them together
        if sync_every is None:  # control flags every K optimizer steps; 0: about every 50 ms
            sync_every = int(os.environ.get("TUITRAIN_DDP_SYNC_EVERY", "0"))
        self.sync_every = sync_every
        self._rank_rngs: list[Any] | None = None
        self._train_total = 0
        self._ddp: DistributedDataParallel | None = None

    def prepare_model(self, model: torch.nn.Module) -> None:
        pass  # wrapped once the Learner is built (`bind`)

    def interrupter(self, inbox: Interrupter, stage: Callable[[], str]) -> Interrupter:
        return SyncedInterrupter(self.rank, self.ctx.control_group, inbox, stage, self.sync_every)

    def bind(self, learner: Learner) -> None:
        for ms in learner.metric_sets.values():
            ms.reducer = self.ctx.all_sum
        learner.env_extra.setdefault("strategy", self.name)
        learner.env_extra.setdefault("world_size", self.world_size)
        if learner.grad_accumulation > 1:
            learner.before_micro_batch = self.before_micro_batch
        self._wrap(learner)

    def _wrap(self, learner: Learner) -> None:
        """Wrap the model in DDP for training; the phases call it there (`Learner.model`)."""
        ctx = self.ctx
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self._ddp = ddp = DistributedDataParallel(_StepDispatch(learner.raw_model), device_ids=device_ids)
        learner.train_model = ddp
        own = getattr(type(learner.raw_model), "train_step", None)
        if own is not None:  # route the user's train_step through DDP's forward (gradient hooks)
            bound = own.__get__(learner.raw_model)
            learner.raw_model.train_step = lambda *a, **k: ddp(*a, _tuitrain_step=bound, **k)

    def before_micro_batch(self, learner: Learner) -> None:
        if self._ddp is not None and learner.state.stage == "train":
            b = learner.state.batch + 1  # this micro-batch; gradients are all-reduced only when it steps
            self._ddp.require_backward_grad_sync = b % learner.grad_accumulation == 0 or b == self._train_total

    def loaders(self, learner: Learner, train: ResumableLoader | None, valid: ResumableLoader | None) -> Loaders:
        self.ctx.shard(train, "train")
        self.ctx.shard(valid, "valid")
        self._train_total = train.batches_per_epoch() if train is not None else 0
        return train, valid

    # --- checkpoints: entered by every rank at the same point -----------------------------------

    def gather_rngs(self, learner: Learner) -> None:
        s = learner.state
        mine = s.valid_rng if s.stage == "valid" and s.valid_rng is not None else rng_state()
        rngs: list[Any] = [None] * self.world_size
        dist.all_gather_object(rngs, mine, group=self.ctx.control_group)
        self._rank_rngs = rngs

    def save_checkpoint(self, learner: Learner, reason: str) -> bool:
        self.gather_rngs(learner)
        if self.writes:
            return False  # rank 0 writes the one file, with every rank's RNG state
        learner.ckpt_io.mark_saved()
        return True

    def extra_state(self, learner: Learner, d: dict[str, Any]) -> dict[str, Any]:
        d["world_size"] = self.world_size
        if self._rank_rngs is not None:
            d["rng_ranks"] = self._rank_rngs
        return d

    def after_load(self, learner: Learner, data: dict[str, Any]) -> None:
        ranks = data.get("rng_ranks")
        if int(data.get("world_size", 1)) == self.world_size and ranks and len(ranks) == self.world_size:
            set_rng_state(ranks[self.rank])
        if self.rank != 0:  # the unread metric window in the file is rank 0's own; count it once
            for ms in learner.metric_sets.values():
                for m in ms.metrics:
                    if isinstance(m, _Ratio):
                        m._acc, m._count = None, 0
                ms.ctx.window_items = ms.ctx.window_steps = 0


def watch_parent(parent_pid: int = 0, interval: float = 0.5) -> None:
    """End this process if its parent dies (a spawned rank must never outlive the run). `parent_pid`:
    the launcher's pid, as it told the rank; a parent killed while the rank was still importing torch
    is caught too (the rank was handed to init by then)."""
    ppid = parent_pid or os.getppid()
    if os.getppid() != ppid:
        os._exit(1)

    def loop() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=loop, name="tuitrain-parent-watch", daemon=True).start()
