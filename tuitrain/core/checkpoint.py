"""Checkpoints: capture the training state to CPU, write it atomically in the background, keep an index.

The loop only waits while the state is copied to CPU memory (`snapshot`); a single writer thread does
the disk work (never two writes at once), then applies the retention policy and rewrites
`checkpoint/index.json`, which lists complete files only. Loading is always `weights_only=True`.

A sharded checkpoint (strategy "fsdp") is a directory instead of a file: the ranks' shards written by
torch.distributed.checkpoint, and `state.pt` with everything else. Its writer fills a temporary
directory, then `save_dir` renames it into place and indexes it (strategies/fsdp.py).
Must not import textual.
"""

from __future__ import annotations

import json
import os
import pickle
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import torch

from . import fsutil
from .events import CheckpointDeleted, CheckpointFailed, CheckpointSaved, Event
from .retention import Entry, KeepAny, KeepBest, KeepLast, KeepRequested, Split, best_entry, decide

FORMAT = "tuitrain-checkpoint"
VERSION = 1
INDEX = "index.json"
STATE_FILE = "state.pt"  # in a sharded checkpoint's directory: all but the model and optimizer


class CheckpointError(Exception):
    """A checkpoint that cannot be used: missing, not a tuitrain checkpoint, or not weights-only."""


def snapshot(obj: Any, reuse: Any = None) -> Any:
    """A deep copy with every tensor detached and copied to CPU memory (the loop's only stall).

    `reuse`, an earlier snapshot of the same structure that nothing reads any more, lends its tensors:
    a tensor of the same shape and dtype is copied into, not allocated, so the copy causes no page
    faults (fresh memory is zeroed by the kernel page by page, which costs as much as the copy)."""
    if isinstance(obj, torch.Tensor):
        if (
            isinstance(reuse, torch.Tensor)
            and reuse.shape == obj.shape
            and reuse.dtype == obj.dtype
            and reuse.device.type == "cpu"
            and reuse.is_contiguous()
            and obj.layout == torch.strided
        ):
            return reuse.copy_(obj.detach())
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):  # keeps OrderedDict (state_dict) as it is: weights_only allows it
        out = type(obj)() if type(obj) in (dict, OrderedDict) else {}
        prev = reuse if isinstance(reuse, dict) else {}
        for k, v in obj.items():
            out[k] = snapshot(v, prev.get(k))
        return out
    if isinstance(obj, (list, tuple)):
        prev = reuse if isinstance(reuse, (list, tuple)) and len(reuse) == len(obj) else [None] * len(obj)
        out = [snapshot(v, p) for v, p in zip(obj, prev)]
        return out if isinstance(obj, list) else tuple(out)
    return obj


def _refusal(e: Exception) -> str:
    """Why torch refused a file, without torch's advice to retry with weights_only=False."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    why = next((ln for ln in lines if "Unsupported global" in ln or "Unsupported operand" in ln), "")
    why = why or next((ln for ln in lines if "weights_only" not in ln), "unsupported content")
    return f"it is not loadable with weights_only=True and could run code ({why})"


def checkpoint_name(epoch: int, step: int) -> str:
    """A checkpoint's name without suffix: a file adds ".pt", a sharded checkpoint's directory is this."""
    return f"epoch-{epoch:04d}-step-{step:08d}"


def is_sharded_checkpoint(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / STATE_FILE).is_file()


def _complete(path: Path) -> bool:
    return path.is_file() or is_sharded_checkpoint(path)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a tuitrain checkpoint with weights_only=True; CheckpointError on anything else.

    For a sharded checkpoint (a directory) this reads its `state.pt`; `data["sharded_dir"]` then names
    the directory whose shards `Learner.load_state_dict` reads into the model and optimizer."""
    path = Path(path)
    if path.is_dir():
        if not is_sharded_checkpoint(path):
            raise CheckpointError(f"{path}: a directory without {STATE_FILE}: not a sharded checkpoint")
        data = load_checkpoint(path / STATE_FILE)
        data["sharded_dir"] = str(path)
        return data
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    damage = damaged(path)
    if damage:
        raise CheckpointError(f"{path}: damaged: {damage}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path}: refused: {_refusal(e)}") from None
    except Exception as e:  # torn or foreign file
        raise CheckpointError(f"{path}: cannot read checkpoint: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a tuitrain checkpoint (use [checkpoint] init_from for bare weights)")
    return data


def damaged(path: str | os.PathLike[str]) -> str:
    """Why the checkpoint file at `path` cannot be trusted ("" when sound): its sha256 differs from
    the one its folder's index.json lists. A file the index does not list, or lists without a hash (a
    checkpoint written before hashes), passes."""
    path = Path(path)
    listed = {e.file: e.sha256 for e in read_index(path.parent)}.get(path.name, "")
    if not listed or not path.is_file():
        return ""
    if fsutil.file_sha256(path) != listed:
        return f"its sha256 differs from the one in {path.parent / INDEX} (bytes changed after it was written)"
    return ""


def read_index(folder: str | os.PathLike[str]) -> list[Entry]:
    p = Path(folder) / INDEX
    try:
        rows = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError):  # missing, torn, not JSON, nested past the stack
        return []
    out = []
    for r in rows if isinstance(rows, list) else []:
        try:
            out.append(
                Entry(
                    file=r["file"],
                    epoch=int(r["epoch"]),
                    step=int(r["step"]),
                    metrics=dict(r.get("metrics") or {}),
                    time=float(r.get("time", 0.0)),
                    bytes=int(r.get("bytes", 0)),
                    best=bool(r.get("best", False)),
                    reason=str(r.get("reason", "")),
                    sha256=str(r.get("sha256", "")),
                    requested=_requested(r),
                    library=bool(r.get("library", False)),
                )
            )
        except (KeyError, TypeError, ValueError):
            continue
    return out


def _in_run_dir(file: str) -> str:
    """An index row's file as events name it: relative to the run directory (a library's folder elsewhere:
    its absolute path)."""
    return file if os.path.isabs(file) else f"checkpoint/{file}"


def _requested(row: dict[str, Any]) -> str:
    """Who asked for an index row's checkpoint ("" for the run's own, and in an index written before)."""
    if not row.get("requested"):
        return ""
    return str(row.get("requested_by") or "") or "request"


def latest_checkpoint(folder: str | os.PathLike[str], passed_over: list[tuple[Path, str]] | None = None) -> Path | None:
    """The newest complete, sound checkpoint listed in the index whose file (or directory) is present;
    each newer one found damaged is added to `passed_over` as (path, why)."""
    folder = Path(folder)
    for e in sorted(read_index(folder), key=lambda e: (e.step, e.epoch, e.time), reverse=True):
        p = folder / e.file
        if _complete(p):
            why = damaged(p)
            if not why:
                return p
            if passed_over is not None:
                passed_over.append((p, why))
    return None


class Checkpointer:
    """Writes checkpoints for one run into `folder` (RUN_DIR/checkpoint), one at a time, in the background."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        keep_last: int = 2,
        keep_best: int = 1,
        monitor: str = "valid/loss",
        mode: str = "min",
        every_n_epochs: int = 1,
        every_n_steps: int = 0,
        background: bool = True,
        keep_requested: int = 0,
    ) -> None:
        self.folder = Path(folder)
        self.monitor, self.mode = monitor, mode
        self.every_n_epochs, self.every_n_steps = every_n_epochs, every_n_steps
        # keep_last and keep_best decide over the run's own checkpoints; keep_requested (0: all) over
        # those asked for (the c key, `tuitrain checkpoint`, a stop's), which the others never delete
        self.policy = Split(
            KeepAny((KeepLast(keep_last), KeepBest(keep_best, monitor, mode))), KeepRequested(keep_requested)
        )
        self._asked: dict[tuple[int, int], str] = {}  # (epoch, step) -> who asked for that state's checkpoint
        self.background = background
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done: list[Event] = []  # events of finished writes, emitted by the loop
        self._entries: list[Entry] | None = None
        self.last_error: str = ""
        self.last_exception: BaseException | None = None  # the last write's failure (None: it succeeded)
        #: hook for tests: replaces torch.save(obj, fileobj)
        self.save_fn: Callable[[Any, Any], None] = torch.save

    # --- setup ---------------------------------------------------------------------------------

    def prepare(self) -> list[Path]:
        """Create the folder, delete leftovers of a killed writer and files missing from the index."""
        self.folder.mkdir(parents=True, exist_ok=True)
        removed = fsutil.remove_leftovers(self.folder)
        listed = {e.file for e in self.entries()}
        indexed = (self.folder / INDEX).exists()  # without an index, nothing proves a file unwanted
        for p in self.folder.glob("epoch-*-step-*") if indexed else ():
            ours = p.name.endswith(".pt") or p.is_dir()
            if ours and p.name not in listed:  # written but never indexed: the process died in between
                fsutil.remove(p)
                removed.append(p)
        # drop index rows whose file vanished
        present = [e for e in self.entries() if _complete(self.folder / e.file)]
        if len(present) != len(self.entries()):
            self._write_index(present)
        return removed

    def entries(self) -> list[Entry]:
        if self._entries is None:
            self._entries = read_index(self.folder)
        return list(self._entries)

    # --- saving --------------------------------------------------------------------------------

    def ask(self, epoch: int, step: int, by: str) -> None:
        """The checkpoint of the state at (epoch, step) is asked for by `by` ("dashboard", "command",
        "stop"): kept apart from the run's own (`keep_requested`). One listed already (that state was
        saved) is marked now; otherwise the next one written at (epoch, step), whoever writes it."""
        if not by:
            return
        self.wait()  # a write of that state still under way lists it first
        with self._lock:
            self._asked[(epoch, step)] = by
        listed = {e.file for e in self.entries() if (e.epoch, e.step) == (epoch, step)}
        if not listed:
            return
        with self._lock:
            self._asked.pop((epoch, step), None)
        self._write_index([replace(e, requested=e.requested or by) if e.file in listed else e for e in self.entries()])
        # said again, marked: the screen's checkpoint list (and `watch`) show it as asked for
        marked = [
            CheckpointSaved(
                file=_in_run_dir(e.file),
                epoch=e.epoch,
                step=e.step,
                metrics=dict(e.metrics),
                bytes=e.bytes,
                best=e.best,
                reason=e.reason,
                stall=0.0,
                write=0.0,
                requested=e.requested,
            )
            for e in self.entries()
            if e.file in listed
        ]
        with self._lock:
            self._done.extend(marked)

    def save(
        self,
        state: dict[str, Any],
        *,
        epoch: int,
        step: int,
        metrics: dict[str, Any],
        reason: str,
        stall: float = 0.0,
        requested: str = "",
    ) -> None:
        """Queue a write of `state` (already a CPU snapshot). Waits for a write still running.
        `requested`: who asked for it (see `ask`); "": one of the run's own."""
        self.wait()
        if requested:
            with self._lock:
                self._asked[(epoch, step)] = requested
        name = checkpoint_name(epoch, step) + ".pt"
        args = (state, name, epoch, step, dict(metrics), reason, stall)
        if self.background:
            self._thread = threading.Thread(target=self._write, args=args, name="tuitrain-checkpoint", daemon=True)
            self._thread.start()
        else:
            self._write(*args)

    def wait(self) -> None:
        t = self._thread
        if t is not None:
            t.join()
            self._thread = None

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def has_events(self) -> bool:
        return bool(self._done)

    def take_events(self) -> list[Event]:
        with self._lock:
            out, self._done = self._done, []
            return out

    def temp_dir(self, name: str) -> Path:
        """Where the ranks write a sharded checkpoint's shards before `save_dir` renames it to `name`
        (the same path on every rank; `prepare` removes one a killed run left)."""
        return self.folder / f"{fsutil.TMP_PREFIX}{name}"

    def save_dir(
        self,
        name: str,
        finish: Callable[[Path], None],
        *,
        epoch: int,
        step: int,
        metrics: dict[str, Any],
        reason: str,
        started: float | None = None,
    ) -> None:
        """Complete a sharded checkpoint whose shards are already in `temp_dir(name)`: `finish(tmp)` adds
        the rest (state.pt), then the directory is renamed into place and indexed. Synchronous (the
        shards were a collective write of every rank on the training thread): the loop's stall is the
        whole write, from `started` (perf_counter) when the shards began."""
        self.wait()
        t0 = time.perf_counter() if started is None else started
        tmp = self.temp_dir(name)
        try:
            finish(tmp)
            size = fsutil.replace_dir(tmp, self.folder / name)
            self._commit(name, size, epoch, step, dict(metrics), reason, None, t0)
        except Exception as e:
            fsutil.remove(tmp)
            self.failed(e, epoch=epoch, step=step, reason=reason)

    def adopt(
        self,
        path: str | os.PathLike[str],
        *,
        epoch: int,
        step: int,
        metrics: dict[str, Any],
        reason: str,
        retain: bool = True,
        requested: str = "",
    ) -> None:
        """List a checkpoint another library wrote (Lightning's `.ckpt` file, a Hugging Face `checkpoint-N`
        folder) in the index, with its size and sha256, synchronously. `path` inside this folder is
        listed by name and falls under retention; elsewhere it is listed by its absolute path and never
        deleted here (`retain=False` too: the library keeps its own). `requested`: as `save`'s."""
        self.wait()
        if requested:
            with self._lock:
                self._asked[(epoch, step)] = requested
        t0 = time.perf_counter()
        p = Path(path).resolve()
        # a library's folders that it deleted since (its own retention: save_total_limit) leave the index
        gone = [e for e in self.entries() if os.path.isabs(e.file) and not os.path.exists(e.file)]
        if gone:
            self._write_index([e for e in self.entries() if e not in gone])
        try:
            inside = p.parent == self.folder.resolve()
            name = p.name if inside else str(p)
            self._commit(
                name,
                fsutil.tree_size(p),
                epoch,
                step,
                dict(metrics),
                reason,
                None,
                t0,
                fsutil.tree_sha256(p),
                retain=retain and inside,
            )
        except Exception as e:  # vanished before it could be hashed, unreadable
            self.failed(e, epoch=epoch, step=step, reason=reason)

    def failed(self, e: BaseException, *, epoch: int, step: int, reason: str) -> None:
        """Report a write that failed (disk full, permissions): training goes on."""
        self.last_error = f"{type(e).__name__}: {e}"
        self.last_exception = e
        with self._lock:
            self._asked.pop((epoch, step), None)  # not written: a later state at that step is not the one asked for
            self._done.append(CheckpointFailed(epoch=epoch, step=step, error=self.last_error, reason=reason))

    def _write(
        self, state: Any, name: str, epoch: int, step: int, metrics: dict[str, Any], reason: str, stall: float
    ) -> None:
        t0 = time.perf_counter()
        try:
            size = fsutil.atomic_write(self.folder / name, lambda f: self.save_fn(state, f))
            # read back on this thread, never the loop's: what is on disk is what the hash vouches for
            digest = fsutil.file_sha256(self.folder / name)
            self._commit(name, size, epoch, step, metrics, reason, stall, t0, digest)
        except Exception as e:  # disk full, permissions: reported, training goes on
            self.failed(e, epoch=epoch, step=step, reason=reason)

    def _commit(
        self,
        name: str,
        size: int,
        epoch: int,
        step: int,
        metrics: dict[str, Any],
        reason: str,
        stall: float | None,
        t0: float,
        sha256: str = "",
        retain: bool = True,
    ) -> None:
        """A complete checkpoint is in place: list it, apply retention, queue the events (`stall` None:
        the loop waited for the whole write)."""
        with self._lock:
            requested = self._asked.pop((epoch, step), "")
        # a file written again under its name (a rollback came back to that step) keeps its mark
        requested = requested or next((e.requested for e in self.entries() if e.file == name), "")
        entry = Entry(
            file=name,
            epoch=epoch,
            step=step,
            metrics=metrics,
            time=time.time(),
            bytes=size,
            reason=reason,
            sha256=sha256,
            requested=requested,
            library=not retain or os.path.isabs(name),
        )
        entries = [e for e in self.entries() if e.file != name] + [entry]
        keep, delete = decide(self.policy, entries)
        # a library's own checkpoint (outside this folder, or adopted with retain=False): listed, never
        # deleted by us, now or when a later checkpoint's retention runs
        kept_anyway = [e for e in delete if e.library or os.path.isabs(e.file)]
        keep, delete = keep + kept_anyway, [e for e in delete if e not in kept_anyway]
        best = best_entry(keep, self.monitor, self.mode)
        keep = [replace(e, best=best is not None and e.file == best.file) for e in keep]
        self._write_index(keep)  # the index first: a deleted file is never listed
        events: list[Event] = []
        for e in delete:
            try:
                fsutil.remove(self.folder / e.file)
                events.append(CheckpointDeleted(file=_in_run_dir(e.file)))
            except OSError:
                pass
        is_best = best is not None and best.file == name
        write = time.perf_counter() - t0
        saved = CheckpointSaved(
            file=_in_run_dir(name),
            epoch=epoch,
            step=step,
            metrics=metrics,
            bytes=size,
            best=is_best,
            reason=reason,
            stall=write if stall is None else stall,
            write=write,
            requested=requested,
        )
        with self._lock:
            self._done.append(saved)
            self._done.extend(events)
        self.last_error = ""
        self.last_exception = None

    def _write_index(self, entries: list[Entry]) -> None:
        entries = sorted(entries, key=lambda e: (e.step, e.epoch, e.time))
        fsutil.atomic_write_json(self.folder / INDEX, [e.to_dict() for e in entries])
        self._entries = entries

    def best(self) -> Entry | None:
        return best_entry(self.entries(), self.monitor, self.mode)

    def last_complete(self) -> Path | None:
        """The newest checkpoint in the index whose file (or directory) is in place."""
        for e in sorted(self.entries(), key=lambda e: (e.step, e.epoch, e.time), reverse=True):
            if _complete(self.folder / e.file):
                return self.folder / e.file
        return None


def check_weights_file(path: str | os.PathLike[str]) -> Any:
    """Load a weights file with weights_only=True; CheckpointError when missing, refused or torn."""
    path = Path(path)
    if is_sharded_checkpoint(path):
        raise CheckpointError(
            f"{path}: a sharded (fsdp) checkpoint directory; give a weights file such as the run's model.pt"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{path}: refused: {_refusal(e)}") from None
    except Exception as e:
        raise CheckpointError(f"{path}: cannot read weights: {type(e).__name__}: {e}") from None


def load_weights(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    *,
    strict: bool = True,
    revise_keys: Sequence[Sequence[str]] = (),
) -> tuple[list[str], list[str]]:
    """`[checkpoint] init_from`: load only model weights (a tuitrain checkpoint, a model.pt or any
    weights-only state_dict), renaming keys by (regex, replacement) pairs; returns (missing, unexpected)."""
    import re

    data = check_weights_file(path)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        data = data["model"]
    elif isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: holds no state_dict")
    for pattern, repl in revise_keys:
        data = {re.sub(pattern, repl, k): v for k, v in data.items()}
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    data = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in data.items()}
    result = model.load_state_dict(data, strict=strict)
    return list(result.missing_keys), list(result.unexpected_keys)
