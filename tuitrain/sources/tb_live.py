"""Whether a TensorBoard run is still being written (tensorboard.py's `is_live`).

A run is live while a process of this machine has one of its event files open for writing (/proc; a
TensorBoard server reading it does not count: tensorboardX holds its file), or the process its file's
name names still runs and the file changed in the last `LIVE_SECONDS` (torch's writer opens the file at
each flush only, and names it `<time>.<host>.<pid>.<n>`; a notebook's kernel lives on after its writer
is done); a file whose name says it was written on this machine is otherwise not being written. Where
that cannot be seen (no /proc, a file written on another machine onto a shared disk): while its newest
file changed in the last `LIVE_SECONDS` (SummaryWriter flushes every 120 s).
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

LIVE_SECONDS = 150.0
PREFIX = "events.out.tfevents."
TIMESTAMP = re.compile(r"^events\.out\.tfevents\.(\d+)")


def writing(files: list[Path]) -> bool:
    """Whether a run whose event files are `files` is still being written (see the module's docstring)."""
    if not files:
        return False
    held = _held_for_writing()
    if held is not None:
        if any(_inode(f) in held for f in files):
            return True
        here = socket.gethostname()
        remote = []
        for f in files:
            written_here, pid, stamp = _name_parts(f.name, here)
            if not written_here:
                remote.append(f)
            elif pid and _running_since(pid, stamp) and _changed_within(f, LIVE_SECONDS):
                return True  # torch's writer opens its file at each flush only
        if not remote:  # written on this machine, and no process of it is writing
            return False
        files = remote
    try:
        newest = max(f.stat().st_mtime for f in files)
    except OSError:
        return False
    return time.time() - newest < LIVE_SECONDS


def _changed_within(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime < seconds
    except OSError:
        return False


_PID = re.compile(r"^\.(\d+)\.\d+")


def _name_parts(name: str, host: str) -> tuple[bool, int, int]:
    """(written on this machine, the writer's pid or 0, the name's timestamp) of an event file's name:
    torch names its files `events.out.tfevents.<time>.<host>.<pid>.<n>`, tensorboardX `...<time>.<host>`."""
    m = TIMESTAMP.match(name)
    if not m or not host:
        return False, 0, 0
    rest = name[m.end() + 1 :]
    if not rest.startswith(host):
        return False, 0, 0
    pid = _PID.match(rest[len(host) :])
    return True, int(pid.group(1)) if pid else 0, int(m.group(1))


def _running_since(pid: int, stamp: int) -> bool:
    """Whether process `pid` runs and began before the file named at `stamp` (not a later process that
    was given the same number)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
        began = boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return began <= stamp + 2


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


_held_cache: tuple[float, set[tuple[int, int]] | None] = (0.0, None)
_held_lock = threading.Lock()


def _held_for_writing() -> set[tuple[int, int]] | None:
    """(device, inode) of the event files this machine's processes (those /proc lets us see) hold open
    for writing; None without /proc. Kept a second (a folder of many runs asks once)."""
    global _held_cache
    with _held_lock:
        at, held = _held_cache
        if time.monotonic() - at < 1.0:
            return held
        held = _scan_proc()
        _held_cache = (time.monotonic(), held)
        return held


def _scan_proc() -> set[tuple[int, int]] | None:
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return None
    held: set[tuple[int, int]] = set()
    me = os.getpid()
    for pid in os.listdir(proc):
        if not pid.isdigit() or int(pid) == me:
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if PREFIX not in target:
                continue
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    flags = next((int(line.split()[1], 8) for line in f if line.startswith("flags:")), 0)
                if flags & 0o3:  # O_WRONLY or O_RDWR
                    st = os.stat(f"{fd_dir}/{fd}")
                    held.add((st.st_dev, st.st_ino))
            except (OSError, ValueError, IndexError):
                continue
    return held
