"""Atomic, durable file writes: temporary file in the same folder, fsync, os.replace, fsync folder.

A reader (or a process restarted after `kill -9`) sees the old file or the new one, never half of
one. A directory (a sharded checkpoint) is written the same way: filled under a temporary name, then
renamed into place (`replace_dir`). Must not import torch or textual.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, IO
from collections.abc import Callable

TMP_PREFIX = ".tmp-"


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> int:
    """Write `path` through `write(fileobj)`; returns the size in bytes. Nothing is left on failure."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)
    return size


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> int:
    return atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> int:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> int:
    return atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def remove(path: str | os.PathLike[str]) -> None:
    """Delete a file or a whole directory; nothing when it is already gone."""
    path = Path(path)
    try:
        path.unlink(missing_ok=True)
    except (IsADirectoryError, PermissionError):  # a directory (macOS says EPERM)
        if not path.is_dir():
            raise
        shutil.rmtree(path, ignore_errors=True)


#: what a failed write of the run directory means, said after the system's own words
WRITE_FAULTS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EIO: "the disk reported an I/O error",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "the folder cannot be written",
    errno.EPERM: "the folder cannot be written",
    errno.EFBIG: "the file is larger than the file system allows",
}


def write_fault(e: BaseException, path: str | os.PathLike[str] | None = None) -> str:
    """One line for a failed write: "cannot write PATH: No space left on device (the disk is full)"."""
    path = getattr(e, "filename", None) or path
    where = f" {path}" if path else ""
    words = getattr(e, "strerror", None) or str(e) or type(e).__name__
    why = WRITE_FAULTS.get(getattr(e, "errno", None) or 0)
    return f"cannot write{where}: {words}" + (f" ({why})" if why else "")


def overwrite_in_place(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` over the existing file `path` without a temporary file: its blocks are reused, so
    this works on a full disk where `atomic_write` cannot (a reader may see it half-written)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The file's sha256, hex (read in 1 MiB blocks; hashlib lets go of the GIL while it hashes)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def tree_sha256(path: str | os.PathLike[str]) -> str:
    """A file's sha256, or for a directory the sha256 of its files' relative paths and their sha256s
    (sorted), so that a changed, added or removed file changes it."""
    path = Path(path)
    if not path.is_dir():
        return file_sha256(path)
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(f"{p.relative_to(path).as_posix()}\0{file_sha256(p)}\n".encode())
    return h.hexdigest()


def tree_size(path: str | os.PathLike[str]) -> int:
    """Bytes of a file, or of every file under a directory."""
    path = Path(path)
    if not path.is_dir():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def replace_dir(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> int:
    """Rename the complete directory `tmp` to `path` (replacing an older one of that name); returns its
    size. os.replace cannot replace a non-empty directory, so an older one is first renamed aside."""
    tmp, path = Path(tmp), Path(path)
    fsync_dir(tmp)
    old = None
    if path.exists():
        old = path.with_name(f"{TMP_PREFIX}old-{path.name}")
        remove(old)
        os.replace(path, old)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    if old is not None:
        remove(old)
    return tree_size(path)


def remove_leftovers(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files and directories a killed writer left behind; returns what was removed."""
    removed: list[Path] = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for p in folder.iterdir():
        if p.name.startswith(TMP_PREFIX):
            try:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed.append(p)
            except OSError:
                pass
    return removed
