"""What runs inside each rank of a DDP run: the process group, the DDP Learner and the agreed control flags.

- `DistContext`: rank, world size, device and backend (gloo on CPU, NCCL with one GPU per rank), the
  strategy ("ddp", or "fsdp": fsdp.py builds on this file), and how each rank shards its data
  (`EpochSampler.shard`).
- the loop's control flags are a `SyncedInterrupter` (agreement.py): every rank stops, pauses and
  checkpoints at the same step boundary.
- `DDPLearner`: the Learner with the model wrapped in DistributedDataParallel, metrics summed over
  ranks when read, `no_sync` on micro-batches that do not step, checkpoints written by rank 0 with
  every rank's RNG state.
Must not import textual.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..control import Interrupter
from ..data import ResumableLoader, rng_state, set_rng_state
from ..learner import Learner
from ..metrics import _Ratio
from .agreement import DEFAULT_TIMEOUT, SyncedInterrupter, dist_timeout  # noqa: F401



@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str
    control_group: Any = None  # CPU (gloo) group for control flags and RNG states; None: the default group
    strategy: str = "ddp"  # or "fsdp"

    @property
    def learner(self):
        """The Learner class to build, with this context bound (what `Run.build` calls)."""
        ctx = self
        if self.strategy == "fsdp":
            from .fsdp import FSDPLearner as cls
        else:
            cls = DDPLearner

        def make(*args, **kwargs):
            return cls(*args, dist_ctx=ctx, **kwargs)

        return make

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Before the optimizer is built: FSDP shards the parameters in place (the optimizer must hold
        the shards); DDP wraps the model later, in its Learner."""
        if self.strategy == "fsdp":
            from .fsdp import shard_model

            shard_model(model, self)

    def shard(self, loader: ResumableLoader | None, split: str) -> None:
        """Give this rank its share of each epoch: training padded to equal length (every rank runs the
        same number of steps), validation split exactly (no item counted twice)."""
        if loader is None:
            return
        s = loader.sampler
        if s is None:
            import warnings

            warnings.warn(f"the {split} data's sampler cannot be sharded (an IterableDataset or a custom "
                          "sampler): every rank reads all of it, and ranks may run different step counts",
                          stacklevel=2)
            return
        if s.world_size == self.world_size:
            return
        mode = "uneven" if split == "valid" else ("drop" if loader.loader.drop_last else "pad")
        if mode == "uneven" and self.strategy == "fsdp" and s.dataset_length < self.world_size:
            import warnings  # every FSDP forward needs every rank: each needs at least one item

            warnings.warn(f"the {split} data has {s.dataset_length} item(s) for {self.world_size} processes: "
                          "items are repeated so that every rank has one, and counted more than once",
                          stacklevel=2)
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


def init_distributed(rank: int, world_size: int, local_rank: int, device_spec: str,
                     init_method: str | None = None, strategy: str = "ddp") -> DistContext:
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


class _Schedule:
    """What ranks other than 0 keep of the Checkpointer: when checkpoints are due (they join the RNG
    gather), never a file."""

    background = False
    has_events = False
    last_error = None

    def __init__(self, real) -> None:
        self.every_n_steps = real.every_n_steps
        self.every_n_epochs = real.every_n_epochs
        self.monitor = real.monitor

    def prepare(self) -> list:
        return []

    def take_events(self) -> list:
        return []

    def wait(self) -> None:
        pass

    def best(self):
        return None


class _EventsAtLogSteps:
    """Rank 0's Checkpointer, except that a finished background write never asks for a step boundary
    (rank 0 would enter it alone, and boundaries are collective): its events go out at log steps."""

    has_events = False

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name: str):
        return getattr(self._real, name)


class _StepDispatch(torch.nn.Module):
    """DDP's module: its forward runs the user's model, or its train_step, so DDP sees every forward."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args, _tuitrain_step=None, **kwargs):
        if _tuitrain_step is not None:
            return _tuitrain_step(*args, **kwargs)
        return self.module(*args, **kwargs)


class DDPLearner(Learner):
    """A Learner that trains one rank of a DistributedDataParallel run (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, dist_ctx: DistContext,
                 interrupter: Interrupter | None = None, checkpointer=None, model_path=None, seed=None,
                 sync_every: int | None = None, **kwargs) -> None:
        ctx = dist_ctx
        self.dist = ctx
        self.rank = ctx.rank
        self.world_size = ctx.world_size
        self._ddp: DistributedDataParallel | None = None
        if checkpointer is not None:
            checkpointer = _Schedule(checkpointer) if ctx.rank != 0 else _EventsAtLogSteps(checkpointer)
        if ctx.rank != 0:
            model_path = None
        if sync_every is None:  # control flags every K optimizer steps; 0: about every 50 ms
            sync_every = int(os.environ.get("TUITRAIN_DDP_SYNC_EVERY", "0"))
        kwargs["device"] = ctx.device
        synced = SyncedInterrupter(ctx.rank, ctx.control_group, interrupter or Interrupter(), lambda: self.state.stage,
                                   sync_every)
        super().__init__(model, optimizer, interrupter=synced, checkpointer=checkpointer, model_path=model_path,
                         seed=None if seed is None else seed + ctx.rank, **kwargs)
        self.inbox = synced.inbox
        if ctx.rank != 0:  # rank 0 writes the run's files
            self.model_path = None
        for ms in self.metric_sets.values():
            ms.reducer = ctx.all_sum
        self._rank_rngs: list | None = None
        self._train_total = 0
        self.env_extra.setdefault("strategy", ctx.strategy)
        self.env_extra.setdefault("world_size", ctx.world_size)
        self._wrap_model()

    def _wrap_model(self) -> None:
        """Wrap the model in DDP for training (FSDPLearner: already sharded, nothing to wrap)."""
        ctx = self.dist
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self._ddp = DistributedDataParallel(_StepDispatch(self.raw_model), device_ids=device_ids)
        own = getattr(type(self.raw_model), "train_step", None)
        if own is not None:  # route the user's train_step through DDP's forward (gradient hooks)
            bound = own.__get__(self.raw_model)
            ddp = self._ddp
            self.raw_model.train_step = lambda *a, **k: ddp(*a, _tuitrain_step=bound, **k)

    # the model the phases call: DDP while training; the plain module in validation, where ranks may run
    # different batch counts and DDP's per-forward buffer broadcast would wait for a peer forever
    @property
    def model(self) -> torch.nn.Module:
        if self._ddp is not None and self.state.stage == "train":
            return self._ddp
        return self._model

    @model.setter
    def model(self, value: torch.nn.Module) -> None:
        self._model = value

    def autocast(self):
        if self.grad_accumulation > 1 and self._ddp is not None and self.state.stage == "train":
            b = self.state.batch + 1  # this micro-batch; gradients are all-reduced only when it steps
            self._ddp.require_backward_grad_sync = b % self.grad_accumulation == 0 or b == self._train_total
        return super().autocast()

    def fit(self, train_data, valid_data=None, resume=None, resumed_from=None):
        train = self._loader(train_data, self.shuffle)
        valid = self._loader(valid_data, False)
        self.dist.shard(train, "train")
        self.dist.shard(valid, "valid")
        self._train_total = train.batches_per_epoch()
        return super().fit(train, valid, resume, resumed_from)

    # --- control and checkpoints: entered by every rank at the same point -----------------------

    def log_step(self, metrics, split, state, batch, total) -> None:
        self._flush_checkpoint_events()
        super().log_step(metrics, split, state, batch, total)

    def at_boundary(self, state) -> None:
        self.interrupter.sync()
        super().at_boundary(state)

    def save_checkpoint(self, reason: str) -> None:
        if self.checkpointer is None:
            return
        s = self.state
        if self._last_ckpt_step == (s.epoch, s.step, s.stage):
            return
        mine = self._valid_rng if s.stage == "valid" and self._valid_rng is not None else rng_state()
        rngs: list = [None] * self.world_size
        dist.all_gather_object(rngs, mine, group=self.dist.control_group)
        if self.rank != 0:
            self._last_ckpt_step = (s.epoch, s.step, s.stage)
            return
        self._rank_rngs = rngs
        super().save_checkpoint(reason)

    def state_dict(self) -> dict:
        d = super().state_dict()
        d["world_size"] = self.world_size
        if self._rank_rngs is not None:
            d["rng_ranks"] = self._rank_rngs
        return d

    def load_state_dict(self, data: dict) -> None:
        super().load_state_dict(data)
        ranks = data.get("rng_ranks")
        if int(data.get("world_size", 1)) == self.world_size and ranks and len(ranks) == self.world_size:
            set_rng_state(ranks[self.rank])
        if self.rank != 0:  # the unread metric window in the file is rank 0's own; count it once
            for ms in self.metric_sets.values():
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

    def loop():
        while True:
            time.sleep(interval)
            if os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=loop, name="tuitrain-parent-watch", daemon=True).start()
