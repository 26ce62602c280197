"""Every reader of runs, in one list: given paths, the runs of every tool they hold (`find`), a run's
`Source` (`open_source`) and whether it is live (`is_live`). `tuitrain watch`, `ls`, `serve`, the notebook's
picture and the compare view find and open runs through here, whatever tool wrote them.

A reader module (refs.py's contract) is imported by name when first asked for, so a module that is not
there is skipped and none costs anything before it is needed. A tool whose reader needs an extra that is
not installed still has its runs listed where the reader can find them; the one line saying which extra
to install (`pip install 'tuitrain[tensorboard]'`) comes with them (`Found.missing`). A folder that is a
run of tuitrain is that run: what other tools wrote inside it (its TensorBoard sink's files) is not a run
of its own.

Adding a tool: its reader module under tuitrain/sources/ and one line in `READERS` (docs/architecture.md,
"Adding a source"). Must not import textual.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tuitrain.sources.refs import RunRef, Summary


@dataclass(frozen=True)
class Reader:
    """A reader module, by name, and what the registry says of it before it is imported: the tool's name
    in lines, the extra it needs and the module whose absence means that extra is missing."""

    module: str
    label: str  # "TensorBoard"
    extra: str | None = None  # pip install 'tuitrain[EXTRA]'
    needs: str | None = None  # the package the extra brings (importlib.util.find_spec of it)


#: the readers, tuitrain's own first; a run's tool is its module's TOOL
READERS = (
    Reader("tuitrain.sources.own_runs", "tuitrain"),
    Reader("tuitrain.sources.tensorboard", "TensorBoard", "tensorboard", "tensorboard"),
    Reader("tuitrain.sources.lightning_csv", "Lightning CSVLogger"),
    Reader("tuitrain.sources.mlflow", "MLflow"),
    Reader("tuitrain.sources.trackio", "trackio"),
    Reader("tuitrain.sources.wandb", "W&B", "wandb", "wandb"),
)

_modules: dict[str, ModuleType | None] = {}  # module name -> the module, or None: not there


def module(reader: Reader) -> ModuleType | None:
    """The reader's module, imported once; None when it is not there (a reader not written yet, or one
    whose own imports fail: a dependency the extra would bring)."""
    if reader.module not in _modules:
        try:
            _modules[reader.module] = importlib.import_module(reader.module)
        except ImportError:
            _modules[reader.module] = None
    return _modules[reader.module]


def readers() -> list[tuple[Reader, ModuleType]]:
    """The readers whose module is there."""
    return [(r, m) for r in READERS if (m := module(r)) is not None]


def _reader_of(tool: str) -> tuple[Reader, ModuleType]:
    for reader, mod in readers():
        if getattr(mod, "TOOL", None) == tool:
            return reader, mod
    raise LookupError(f"no reader of {tool} runs")


def label(tool: str) -> str:
    """The tool's name as lines write it ("TensorBoard" for "tensorboard")."""
    for reader, mod in readers():
        if getattr(mod, "TOOL", None) == tool:
            return reader.label
    return tool


def extra_missing(reader: Reader) -> bool:
    return reader.needs is not None and importlib.util.find_spec(reader.needs) is None


def install_line(reader: Reader) -> str:
    return f"{reader.label} runs need an extra: pip install 'tuitrain[{reader.extra}]'"


@dataclass
class Found:
    """What `find` found: the runs, in the order of the paths asked for (each path's runs by tool, the
    tool's own order within); `missing`: one line per extra those runs need that is not installed;
    `empty`: the paths that hold no run of any tool; `unreadable`: a reader that failed on a path, one
    line each (the others' runs still found)."""

    runs: list[RunRef] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def find(paths: Sequence[str | os.PathLike[str]]) -> Found:
    """The runs of every tool at or under each path; a run named twice is listed once."""
    out = Found()
    seen: set[tuple[str, str, str]] = set()
    for path in paths:
        here = _find_one(Path(path), out)
        if not here:
            out.empty.append(str(path))
        for ref in here:
            key = (ref.tool, str(Path(ref.path).resolve()), ref.key)
            if key not in seen:
                seen.add(key)
                out.runs.append(ref)
    return out


def _find_one(path: Path, out: Found) -> list[RunRef]:
    own: list[Path] = []
    found: list[RunRef] = []
    for reader, mod in readers():
        try:
            refs = list(mod.find_runs(path))
        except Exception as e:  # a reader's own failure on odd files: one line, the other readers go on
            out.unreadable.append(f"{path}: the {reader.label} reader failed ({type(e).__name__}: {e})")
            continue
        if mod.TOOL == "tuitrain":
            own = [Path(r.path).resolve() for r in refs]
        else:  # what tuitrain's own runs hold (their TensorBoard sink's files) is theirs
            refs = [r for r in refs if not _inside(Path(r.path).resolve(), own)]
        if refs and extra_missing(reader):
            line = install_line(reader)
            if line not in out.missing:
                out.missing.append(line)
        found += refs
    return found


def _inside(path: Path, folders: list[Path]) -> bool:
    return any(path == f or f in path.parents for f in folders)


def open_source(ref: RunRef, live: bool | None = None) -> Any:
    """The run's Source (run_files.Source, with `problems`: refs.py); `live` None: its reader decides. A
    reader whose extra is missing when it opens: ImportError naming the extra."""
    reader, mod = _reader_of(ref.tool)
    try:
        source = mod.open_source(ref, live)
    except ImportError as e:
        raise ImportError(install_line(reader) if reader.extra else str(e)) from e
    if not hasattr(source, "run_dir"):  # the tuitrain run folder it reads: none (exports never go into it)
        source.run_dir = None
    if not hasattr(source, "problems"):
        source.problems = []
    return source


def is_live(ref: RunRef) -> bool:
    """Whether the run's writer is still writing (its reader says)."""
    _, mod = _reader_of(ref.tool)
    try:
        return bool(mod.is_live(ref))
    except OSError:
        return False


def summary(ref: RunRef) -> Summary:
    """What `tuitrain ls` shows of another tool's run, its reader's `summary` (refs.py) filled in: every
    field there (None where the log does not say it cheaply), the status the tool's own word on the run's
    end where it records one (as the dashboard says it), else "running" while the writer writes and "log
    ended" after."""
    _, mod = _reader_of(ref.tool)
    got: Summary = {}
    read = getattr(mod, "summary", None)
    if read is not None:
        try:
            got = read(ref)
        except Exception:  # a reader's failure on odd files: the row says what the names say, ls goes on
            got = {}
    out: Summary = {"started": None, "status": None, "epoch": None, "step": None}
    out.update(got)
    if out.get("status") is None:
        out["status"] = "running" if is_live(ref) else "log ended"
    return out


def is_own(ref: RunRef) -> bool:
    """A run tuitrain wrote (its keys may steer it while it is live); every other tool's is read only."""
    return ref.tool == "tuitrain"


def own(path: str | os.PathLike[str]) -> RunRef:
    """A tuitrain run directory as a RunRef (the compare view's runs given as folders)."""
    p = Path(path)
    return RunRef("tuitrain", p, p.name or str(p))


def shown_names(refs: list[RunRef]) -> list[str]:
    """Each run's name as its tool shows it: the display name its reader found (`info["display_name"]`: a
    W&B run's, as `watch` shows it alone) with its id after it where two runs of one tool share it ("alpha
    (1ob1nmxu)"), else the reader's name for it (`RunRef.name`)."""
    base = [str(r.info.get("display_name") or r.name) for r in refs]
    out = list(base)
    for i, r in enumerate(refs):
        twins = sum(1 for j, other in enumerate(refs) if other.tool == r.tool and base[j] == base[i])
        if r.info.get("display_name") and twins > 1:
            out[i] = f"{base[i]} ({r.info.get('run_id') or Path(r.path).name})"
    return out


def names(refs: list[RunRef]) -> list[str]:
    """How the run list and the legend name each run, all different: tuitrain's runs by their folder's
    name (with its parent's where two share one, as always), another tool's as `shown_names` says;
    a name two tools' runs share gets its tool's after it ("base (lightning)")."""
    folders = [Path(r.path).name for r in refs if is_own(r)]
    shown = shown_names(refs)
    out = []
    for r, name in zip(refs, shown):
        if is_own(r):
            p = Path(r.path)
            out.append(f"{p.parent.name}/{p.name}" if folders.count(p.name) > 1 else p.name)
        else:
            out.append(name)
    shared = {name for name in out if out.count(name) > 1}
    out = [f"{n} ({r.tool})" if n in shared and not is_own(r) else n for n, r in zip(out, refs)]
    n = 1
    while len(set(out)) < len(out):  # still two alike (one tool's runs of one name): numbered
        for i, name in enumerate(out):
            if out.index(name) != i:
                n += 1
                out[i] = f"{name} #{n}"
    return out


__all__ = [
    "READERS",
    "Found",
    "Reader",
    "find",
    "install_line",
    "is_live",
    "is_own",
    "label",
    "names",
    "open_source",
    "own",
    "readers",
    "shown_names",
    "summary",
]
