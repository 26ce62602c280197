"""Data order and seeding: a resumable sampler, DataLoader building, and RNG state capture.

`EpochSampler` draws each epoch's order from (seed, epoch) alone, so a resumed run can start an epoch
at any batch by index, without loading and discarding the batches already seen. With loader workers,
each item is fetched under a seed of its own (`SeededItems`), so randomness in a Dataset's
`__getitem__` (augmentation) replays exactly when a run resumes mid-epoch. Must not import textual.
"""

from __future__ import annotations

import random
import warnings
from typing import Any, cast
from collections.abc import Callable, Iterator, Sized

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
)
from torch.utils.data._utils.collate import default_collate


def _mix(seed: int, epoch: int, salt: int = 0) -> int:
    # a distinct 63-bit seed per (seed, epoch, salt); plain arithmetic keeps it stable across versions
    return (seed * 1_000_003 + epoch * 7919 + salt * 104_729) & 0x7FFF_FFFF_FFFF_FFFF


class EpochSampler(Sampler[int]):
    """Shuffled (or sequential) indices of one epoch, starting at `start`; the order depends only on
    (seed, epoch). Call `set_epoch(e, start)` before iterating."""

    def __init__(self, length: int, shuffle: bool = True, seed: int = 0) -> None:
        self.length = length  # indices this sampler yields per epoch (this rank's share when sharded)
        self.dataset_length = length
        self.rank, self.world_size = 0, 1
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 1
        self.start = 0

    def shard(self, rank: int, world_size: int, mode: str = "pad") -> None:
        """Take this rank's slice (every `world_size`-th index from `rank`) of each epoch's order.
        "pad" wraps the order around and "drop" cuts its tail so every rank gets the same count (and
        runs the same number of steps); "uneven" splits it exactly (validation: no item counted twice)."""
        n = self.dataset_length
        self.rank, self.world_size = rank, world_size
        self._total = {"pad": -(-n // world_size) * world_size, "drop": n // world_size * world_size, "uneven": n}[mode]
        self.length = len(range(rank, self._total, world_size))

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch = epoch
        self.start = max(0, min(start, self.length))

    def order(self) -> list[int]:
        n = self.dataset_length
        if not self.shuffle:
            full = list(range(n))
        else:
            g = torch.Generator()
            g.manual_seed(_mix(self.seed, self.epoch))
            full = torch.randperm(n, generator=g).tolist()
        if self.world_size == 1:
            return full
        total = self._total
        while len(full) < total and n:
            full += full[: total - len(full)]
        return full[self.rank : total : self.world_size]

    #: yield (epoch, index) pairs, for a `SeededItems` dataset (loader workers)
    tag_epoch = False

    def __iter__(self) -> Iterator[int]:
        if self.tag_epoch:
            e = self.epoch
            # (epoch, index) keys for the resumable loader: not the ints a Sampler's type promises
            return iter([(e, i) for i in self.order()[self.start :]])  # type: ignore[misc]
        return iter(self.order()[self.start :])

    def __len__(self) -> int:
        return self.length - self.start


class SeededItems(Dataset[Any]):
    """The user's map-style Dataset, each item fetched under a seed of its own, from the run's seed, the
    epoch and the item's index: torch's, Python's and NumPy's global RNGs in the worker are seeded right
    before `__getitem__`. A loader worker's RNG otherwise runs on from the items it fetched before, so an
    epoch resumed at batch k (whose workers never fetched the first k batches) would augment differently.
    Keys come from an `EpochSampler` with `tag_epoch` (epoch, index). About 12 µs per item, in the
    worker (`torch.default_generator.manual_seed`: `torch.manual_seed` also visits every device backend,
    some 200 µs). Used with worker processes only: without them the items draw from the run's own RNG
    stream, which checkpoints hold, and resume replays it as it is."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        s = _mix(self.seed, epoch, index + 2)
        torch.default_generator.manual_seed(s)
        random.seed(s)
        try:
            import numpy as np

            np.random.seed(s % 2**32)
        except ImportError:
            pass
        return self.dataset[index]

    def __getattr__(self, name: str) -> Any:  # the user's dataset's own attributes (classes, vocab ...)
        if name in ("dataset", "seed"):
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _seeded(dataset: Any, sampler: EpochSampler, num_workers: int, seed: int) -> Any:
    """`dataset` wrapped in SeededItems when workers fetch it (the sampler then tags keys with epochs)."""
    if num_workers <= 0:
        return dataset
    sampler.tag_epoch = True
    return SeededItems(dataset, seed)


class _WorkerSeeder:
    """worker_init_fn: seeds NumPy in each worker from the seed torch gave it (picklable)."""

    def __init__(self, user_fn: Callable[[int], None] | None = None) -> None:
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        seed = torch.initial_seed() % 2**32
        random.seed(seed)
        try:
            import numpy as np

            np.random.seed(seed)
        except ImportError:
            pass
        if self.user_fn is not None:
            self.user_fn(worker_id)


def _stateful(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class ResumableLoader:
    """Wraps a DataLoader built on an EpochSampler: `epoch_iter(epoch, skip_batches)`.

    Streaming data without a sampler resumes mid-epoch when it keeps its own position: a loader with
    `state_dict()`/`load_state_dict()` (torchdata's StatefulDataLoader), or an IterableDataset with
    them read in this process (num_workers = 0). `state_dict()` is that position, checkpointed;
    `restore(state)` hands it back before the resumed epoch's first batch."""

    def __init__(self, loader: DataLoader[Any], sampler: EpochSampler | None, seed: int) -> None:
        self.loader = loader
        self.sampler = sampler
        self.seed = seed
        self.batch_size = loader.batch_size or 1
        self.stateful: Any = None  # what keeps the position of data without a sampler
        if sampler is None:
            if _stateful(loader) and type(loader) is not DataLoader:
                self.stateful = loader
            elif _stateful(loader.dataset) and isinstance(loader.dataset, IterableDataset) and loader.num_workers == 0:
                self.stateful = loader.dataset
        self._restore: Any = None
        self.limit = 0  # > 0: at most this many batches an epoch (limit_valid_batches)

    def state_dict(self) -> Any:
        """The position of streaming data that keeps one (None otherwise)."""
        return self.stateful.state_dict() if self.stateful is not None else None

    def restore(self, state: Any) -> None:
        """The next `epoch_iter` continues from `state` (a `state_dict()` of a checkpoint)."""
        self._restore = state

    def batches_per_epoch(self) -> int:
        n = self._batches_per_epoch()
        return min(n, self.limit) if self.limit and n else (self.limit if self.limit and not n else n)

    def _batches_per_epoch(self) -> int:
        if self.sampler is None:
            try:
                return len(self.loader)
            except TypeError:
                return 0
        n = self.sampler.length
        bs = self.batch_size
        return n // bs if self.loader.drop_last else -(-n // bs)

    def epoch_iter(self, epoch: int, skip_batches: int = 0) -> Iterator[Any]:
        restore, self._restore = self._restore, None
        if self.sampler is not None:
            self.sampler.set_epoch(epoch, skip_batches * self.batch_size)
        elif skip_batches and self.stateful is not None and restore is not None:
            self.stateful.load_state_dict(restore)  # it continues where the checkpoint left it
        elif skip_batches:
            warnings.warn(
                "this data cannot start mid-epoch (no sampler tuitrain can position, and no "
                "state_dict()/load_state_dict() of its own): the epoch restarts from its first batch",
                stacklevel=2,
            )
        gen = self.loader.generator
        if gen is not None:  # worker seeds follow (seed, epoch), not how many epochs ran before
            gen.manual_seed(_mix(self.seed, epoch, 1))
        if self.limit:
            import itertools

            return itertools.islice(iter(self.loader), self.limit)
        return iter(self.loader)


class WholeBatches(TensorDataset):
    """A TensorDataset whose batches are fetched whole: one `index_select` per tensor, where the
    default fetch takes `batch_size` items one by one and stacks them (default_collate). Same
    samples, same order, same values, dtypes and layout (a list of contiguous tensors, as
    default_collate makes of tuples); ~40 us instead of ~300 us for 128 rows of 784 floats, 8 us
    instead of 74 us for 32 rows of 32. Used only where nothing can tell the difference (`fits`).
    Still a TensorDataset, over the user's own (`.dataset`)."""

    def __init__(self, dataset: TensorDataset) -> None:  # no super().__init__: the tensors stay the user's
        self.dataset = dataset

    @property  # a view of the user's dataset's tensors, never set: TensorDataset's attribute made read-only
    def tensors(self) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        return self.dataset.tensors

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
        row: tuple[torch.Tensor, ...] = self.dataset[index]  # (TensorDataset's is unannotated)
        return row

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        rows = torch.as_tensor(indices, dtype=torch.long)
        return [t.index_select(0, rows) for t in self.dataset.tensors]

    @staticmethod
    def fits(data: Any, collate_fn: Callable[..., Any] | None, num_workers: int) -> bool:
        """A plain TensorDataset of plain, contiguous CPU tensors that need no gradient (a stacked
        batch's grad_fn would differ), the default collate_fn (None or default_collate), no worker
        processes (whose default_collate writes into shared memory)."""
        return (
            type(data) is TensorDataset
            and collate_fn in (None, default_collate)
            and num_workers == 0
            and len(data.tensors) > 0
            and all(
                type(t) is torch.Tensor
                and t.layout == torch.strided
                and t.device.type == "cpu"
                and not t.is_nested
                and not t.is_quantized
                and not t.requires_grad
                and t.is_contiguous()
                for t in data.tensors
            )
        )


def _whole_batch(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """collate_fn of a WholeBatches loader: the batch comes collated."""
    return batch


def _fetch(dataset: Any, collate_fn: Callable[..., Any] | None, num_workers: int) -> tuple[Any, Any]:
    """The dataset and collate_fn a loader is built on: a TensorDataset that `WholeBatches.fits`
    wrapped to fetch whole batches, anything else as given."""
    if WholeBatches.fits(dataset, collate_fn, num_workers):
        return WholeBatches(dataset), _whole_batch
    return dataset, collate_fn


def build_loader(
    data: Any,
    *,
    batch_size: int,
    shuffle: bool,
    num_workers: int = 0,
    seed: int = 0,
    drop_last: bool = False,
    pin_memory: bool = False,
) -> ResumableLoader | None:
    """A ResumableLoader from a Dataset or a DataLoader (rebuilt on an EpochSampler when its sampler is
    a plain Random/SequentialSampler); None passes through."""
    if data is None:
        return None
    if isinstance(data, ResumableLoader):
        return data
    if isinstance(data, DataLoader):
        return _adopt(data, seed)
    if isinstance(data, IterableDataset):
        loader = DataLoader(
            data,
            batch_size=batch_size,
            num_workers=num_workers,
            pin_memory=pin_memory,
            drop_last=drop_last,
            worker_init_fn=_WorkerSeeder(),
            generator=torch.Generator(),
        )
        return ResumableLoader(loader, None, seed)
    if not isinstance(data, Dataset) and not hasattr(data, "__getitem__"):
        raise TypeError(f"expected a Dataset or a DataLoader, got {type(data).__name__}")
    sampler = EpochSampler(len(data), shuffle=shuffle, seed=seed)
    data, collate = _fetch(data, None, num_workers)
    data = _seeded(data, sampler, num_workers, seed)
    loader = DataLoader(
        data,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate,
        drop_last=drop_last,
        pin_memory=pin_memory,
        worker_init_fn=_WorkerSeeder(),
        generator=torch.Generator(),
        persistent_workers=False,
    )
    return ResumableLoader(loader, sampler, seed)


def build_loaders(
    train: Any, valid: Any, data: Any, seed: int = 0
) -> tuple[ResumableLoader | None, ResumableLoader | None]:
    """The training and validation loaders from a `Data` section: the one place its fields reach a
    DataLoader, for `Learner.fit` and a config's run alike. Validation is never shuffled and keeps
    its last, short batch (every item is judged)."""
    d = data
    common = dict(batch_size=d.batch_size, num_workers=d.num_workers, pin_memory=d.pin_memory, seed=seed)
    return (
        build_loader(train, shuffle=d.shuffle, drop_last=d.drop_last, **common),
        build_loader(valid, shuffle=False, drop_last=False, **common),
    )


def _adopt(loader: DataLoader[Any], seed: int) -> ResumableLoader:
    plain = (
        type(loader.batch_sampler) is BatchSampler
        and loader.batch_size is not None  # not batch_sampler=
        and type(loader.sampler) in (RandomSampler, SequentialSampler)
        and not isinstance(loader.dataset, IterableDataset)
    )
    if not plain:
        return ResumableLoader(loader, None, seed)
    if isinstance(loader.sampler, RandomSampler) and (
        loader.sampler.replacement or loader.sampler._num_samples is not None
    ):
        return ResumableLoader(loader, None, seed)
    sampler = EpochSampler(
        len(cast(Sized, loader.dataset)), shuffle=isinstance(loader.sampler, RandomSampler), seed=seed
    )
    dataset, collate = _fetch(loader.dataset, loader.collate_fn, loader.num_workers)
    dataset = _seeded(dataset, sampler, loader.num_workers, seed)
    kwargs: dict[str, Any] = dict(
        batch_size=loader.batch_size,
        sampler=sampler,
        num_workers=loader.num_workers,
        collate_fn=collate,
        pin_memory=loader.pin_memory,
        drop_last=loader.drop_last,
        timeout=loader.timeout,
        worker_init_fn=_WorkerSeeder(loader.worker_init_fn),
        generator=torch.Generator(),
        persistent_workers=loader.persistent_workers,
    )
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
        kwargs["multiprocessing_context"] = loader.multiprocessing_context
    return ResumableLoader(DataLoader(dataset, **kwargs), sampler, seed)


# --- global RNG state ----------------------------------------------------------------------------


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def rng_state() -> dict[str, Any]:
    """Every global RNG state, in types that torch.load(weights_only=True) accepts."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"python": [version, list(internal), gauss], "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch: unannotated
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state()
        keys64 = keys.astype("int64")  # type: ignore[attr-defined]  # legacy get_state(): a tuple, keys an array
        state["numpy"] = [name, torch.from_numpy(keys64), int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
    if "numpy" in state:
        try:
            import numpy as np

            name, keys, pos, has_gauss, cached = state["numpy"]
            np.random.set_state((name, keys.numpy().astype("uint32"), pos, has_gauss, cached))
        except ImportError:
            pass
