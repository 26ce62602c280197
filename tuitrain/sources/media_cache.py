"""Where a reader of another tool's logs puts a picture or a long text it found inside that tool's files
(a PNG in a TensorBoard event file, an image in a W&B record), so that the dashboard's samples panel can
read it as a file: `MediaLogged.path` is joined to the run's folder, and an absolute path stays itself.

Never the tool's folder (tuitrain only reads other tools' logs): a per-user cache,
`$TUITRAIN_CACHE/media`, else `$XDG_CACHE_HOME/tuitrain/media`, else `~/.cache/tuitrain/media`, and where
none of those can be written, `<tempdir>/tuitrain-<uid>/media`. A file is named by a hash of its bytes:
the same picture read again (the run opened twice, a live file read on) is written once, and two readers
at once write the same name (each through its own temporary file, then a rename: never half a file).
Files not used for `KEEP_DAYS` days are removed, at most once a day, by the first store of a process.

    path = media_cache.store(png_bytes, ".png")  # an absolute Path, or None when nothing can be written
    width, height = media_cache.png_size(png_bytes)
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import time
from pathlib import Path

KEEP_DAYS = 30  # a cached file not read or stored again this long is removed
_SWEEP_EVERY = 86_400.0  # seconds between two sweeps of old files
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_lock = threading.Lock()
_root: Path | None = None  # the folder found writable, once found
_failed = False  # no folder could be written: store() says None from then on
_swept = False


def candidates() -> list[Path]:
    """The folders tried, in order."""
    out = []
    if os.environ.get("TUITRAIN_CACHE"):
        out.append(Path(os.environ["TUITRAIN_CACHE"]) / "media")
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        out.append(Path(xdg) / "tuitrain" / "media")
    try:
        out.append(Path.home() / ".cache" / "tuitrain" / "media")
    except RuntimeError:  # no home directory to be found
        pass
    uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
    out.append(Path(tempfile.gettempdir()) / f"tuitrain-{uid}" / "media")
    return out


def root() -> Path | None:
    """The cache folder (made, owner-only), or None when none of `candidates()` can be written."""
    global _root, _failed
    with _lock:
        if _root is not None or _failed:
            return _root
        for folder in candidates():
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                probe = folder / f".probe-{os.getpid()}"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError:
                continue
            _root = folder
            return _root
        _failed = True
        return None


def reset() -> None:
    """Forget the folder found (tests that change the environment)."""
    global _root, _failed, _swept
    with _lock:
        _root, _failed, _swept = None, False, False


def store(data: bytes, suffix: str = ".png") -> Path | None:
    """`data` as a file of the cache, named by its hash (`suffix` such as ".png" or ".txt"): its absolute
    path, or None when no cache folder can be written (the caller then says the item without a file)."""
    folder = root()
    if folder is None:
        return None
    name = hashlib.blake2b(data, digest_size=16).hexdigest()
    path = folder / name[:2] / f"{name}{suffix}"
    try:
        st = path.stat()
        if st.st_size == len(data):
            if time.time() - st.st_mtime > _SWEEP_EVERY:
                os.utime(path)  # in use: kept by the sweep
            return path
    except OSError:
        pass
    try:
        path.parent.mkdir(exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return None
    _sweep_once(folder)
    return path


def _sweep_once(folder: Path) -> None:
    """Old files out, at most once a process and once a day (a stamp file says when it last ran)."""
    global _swept
    if _swept:
        return
    _swept = True
    stamp = folder / ".swept"
    now = time.time()
    try:
        if now - stamp.stat().st_mtime < _SWEEP_EVERY:
            return
    except OSError:
        pass
    try:
        stamp.touch()
        cutoff = now - KEEP_DAYS * 86_400
        for sub in folder.iterdir():
            if not sub.is_dir():
                continue
            for f in sub.iterdir():
                try:
                    if f.stat().st_mtime < cutoff:
                        f.unlink()
                except OSError:
                    pass
    except OSError:
        pass


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's (width, height) from its header, or (0, 0) when `data` is no PNG."""
    if len(data) < 24 or not data.startswith(_PNG_MAGIC) or data[12:16] != b"IHDR":
        return 0, 0
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


__all__ = ["KEEP_DAYS", "candidates", "png_size", "reset", "root", "store"]
