"""Sharded checkpoints through torch.distributed.checkpoint (DCP): the model and optimizer of a
checkpoint directory, written by every rank, read back by any number of processes.

`save_shards` is a collective: each rank writes its own shard file and rank 0 the `.metadata`.
`load_shards` reads them into this process's model and optimizer, resharding when the world size
differs (a plain, unsharded model gathers full tensors; no process group is needed then).

DCP itself unpickles `.metadata` with `pickle.load` and its non-tensor values with
`torch.load(weights_only=False)`; tuitrain promises that a checkpoint never runs code, so reading
goes through `_SafeReader` (an allow-list of DCP's metadata classes) and `_SafePlanner`
(`weights_only=True`). Must not import textual.
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load  # (dcp.load: its home)
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save  # (dcp.save)

from ..checkpoint import CheckpointError

# what a failed DCP read or write raises: CheckpointException (a BaseException) gathers every rank's error
FAILURES = (Exception, CheckpointException)

_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
_ALLOWED = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


def _parts(
    model: torch.nn.Module, optimizers: dict[str, torch.optim.Optimizer]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and the one optimizer's state dicts in DCP's form (DTensor shards under FSDP)."""
    if len(optimizers) != 1:
        raise ValueError(
            f"a sharded checkpoint holds one model and one optimizer; this run has "
            f"{len(optimizers)} optimizers ({', '.join(optimizers)})"
        )
    return get_state_dict(model, next(iter(optimizers.values())))


def save_shards(
    model: torch.nn.Module, optimizers: dict[str, torch.optim.Optimizer], folder: str | os.PathLike[str]
) -> None:
    """Write this rank's shards of the model and optimizer into `folder` (every rank calls it)."""
    msd, osd = _parts(model, optimizers)
    dcp_save({"model": msd, "optimizer": osd}, storage_writer=FileSystemWriter(folder))


def load_shards(
    model: torch.nn.Module, optimizers: dict[str, torch.optim.Optimizer], folder: str | os.PathLike[str]
) -> None:
    """Read a sharded checkpoint's model and optimizer into this process's (every rank calls it)."""
    msd, osd = _parts(model, optimizers)
    state = {"model": msd, "optimizer": osd}
    single = not (dist.is_available() and dist.is_initialized())
    try:
        with warnings.catch_warnings():  # one process reading shards is what we mean: no warning for it
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp_load(state, storage_reader=_SafeReader(folder), planner=_SafePlanner(), no_dist=single)
    except FAILURES as e:
        raise CheckpointError(f"{folder}: cannot read the sharded model and optimizer: {_why(e)}") from None
    set_state_dict(
        model, next(iter(optimizers.values())), model_state_dict=state["model"], optim_state_dict=state["optimizer"]
    )


def _why(e: BaseException) -> str:
    text = str(e)
    if "Unsupported global" in text or "weights_only" in text:
        return "it holds objects that could run code when loaded (refused)"
    return f"{type(e).__name__}: {text.strip().splitlines()[-1] if text.strip() else ''}"


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's `.metadata` pickle, restricted to the classes DCP writes there."""

    def find_class(self, module: str, name: str) -> Any:
        if module == _METADATA_MODULE or (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"Unsupported global: {module}.{name}")


class _SafeReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        name = ".metadata" if rank is None else f"__{rank}.metadata"
        with open(Path(self.path) / name, "rb") as f:
            metadata: Metadata = _MetadataUnpickler(f).load()
        meta: StorageMeta | None = getattr(metadata, "storage_meta", None)  # (None or absent in the file)
        if meta is None:
            meta = metadata.storage_meta = StorageMeta()
        meta.load_id = getattr(self, "load_id", None)
        return metadata


class _SafePlanner(DefaultLoadPlanner):
    """Non-tensor values (the optimizer's hyperparameters) loaded with weights_only=True; otherwise
    DefaultLoadPlanner.load_bytes."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj
