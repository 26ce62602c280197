"""tuitrain's own run directories as a reader module (refs.py's contract, TOOL "tuitrain"): a folder with
run.json or events.jsonl is a run (its events.jsonl read by `FileSource`); a folder with a `checkpoint/`
folder and no run.json is one too (a run whose run.json was lost still lists). A sweep's folder holds its
trials, runs like any other (the views open a sweep's own dashboard before they ask the registry).

Runs are found at `path` or under it, a run's own folders never searched (its checkpoints, exports and
media are no runs), newest name first among a folder's runs (an experiment folder lists its runs as
`tuitrain watch runs/EXPERIMENT` always has), the folders below in their names' order. Must not import textual.
"""

from __future__ import annotations

import os
from pathlib import Path

from tuitrain.sinks.run_status import live_status
from tuitrain.sources.events_file import EVENTS_FILE
from tuitrain.sources.refs import RunRef
from tuitrain.sources.run_files import FileSource

TOOL = "tuitrain"
EXTRA = None
RUN_FILE = "run.json"
#: folders never searched for runs (a tool's caches, version control)
SKIP = {"__pycache__", "node_modules", ".git"}


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether a run has written `path` (its run.json or events.jsonl is there)."""
    p = Path(path)
    return (p / RUN_FILE).exists() or (p / EVENTS_FILE).exists()


def _holds_run(p: Path) -> bool:
    return is_run_dir(p) or (p / "checkpoint").is_dir()


def find_runs(path: str | os.PathLike[str]) -> list[RunRef]:
    """The run directories `path` is or holds (nested folders too), each named by its path under `path`."""
    root = Path(path)
    if is_run_dir(root):
        return [RunRef(TOOL, root, root.name or str(root))]
    if not root.is_dir():
        return []
    found: list[Path] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted((e for e in os.scandir(folder) if e.is_dir()), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        below = []
        for entry in entries:
            p = Path(entry.path)
            if _holds_run(p):
                found.append(p)
            elif entry.name not in SKIP and not entry.name.startswith("."):
                below.append(p)
        stack.extend(below)  # (reversed: the folders below searched in their names' order)
    return [RunRef(TOOL, p, p.relative_to(root).as_posix()) for p in found]


def open_source(ref: RunRef, live: bool | None = None) -> FileSource:
    """The run's events.jsonl, followed (`live`: from its run.json when None)."""
    return FileSource(ref.path, live=is_live(ref) if live is None else live)


def is_live(ref: RunRef) -> bool:
    """run.json says it runs and its process is there."""
    return live_status(ref.path) == "running"


__all__ = ["EXTRA", "TOOL", "find_runs", "is_live", "is_run_dir", "open_source"]
