"""Run directories: where a new run goes, which runs an experiment holds, and `tuitrain ls`.

A run directory is `<experiment.dir>/<experiment.name>/<YYYYmmdd-HHMMSS>`, or a folder the user names
(`--run-dir`, `run_dir=`): one run per folder, a named folder that holds a run already gets a sibling
(`claim_run_dir`). Listing reads run.json with plain json (`tuitrain.sinks.run_status`), so `ls` stays
fast; other tools' runs are found by their readers (`tuitrain.sources.registry`) and summed up from their
logs' ends (`registry.summary`). Must not import torch or textual.
"""

from __future__ import annotations

import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from tuitrain.core.text import safe_name
from tuitrain.sinks.run_status import live_status, read_run
from tuitrain.sources import registry
from tuitrain.sources.refs import RunRef
from tuitrain.sources.sweep_files import is_sweep_dir


def new_run_dir(cfg: Any) -> Path:
    """A fresh `<dir>/<name>/<timestamp>` for `cfg.experiment` (suffixed -1, -2 ... when taken)."""
    return fresh_run_dir(Path(cfg.experiment.dir) / cfg.experiment.name)


def fresh_run_dir(root: Path) -> Path:
    """`root/<YYYYmmdd-HHMMSS>`, suffixed -1, -2 ... when that folder is taken."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / stamp
    n = 1
    while path.exists():
        path = root / f"{stamp}-{n}"
        n += 1
    return path


def holds_run(folder: Path) -> bool:
    """Whether a run has written `folder` (its run.json or events.jsonl is there)."""
    folder = Path(folder)
    return (folder / "run.json").exists() or (folder / "events.jsonl").exists()


def claim_run_dir(folder: str | os.PathLike) -> Path:
    """Where a new run asked to go to `folder` goes: `folder` itself, unless a run is there already
    (one run per folder: a new run never appends to another); then the first of `folder-2`,
    `folder-3` ... that is missing or empty, as Lightning's version_N."""
    folder = Path(folder)
    if not holds_run(folder):
        return folder
    n = 2
    while True:
        candidate = folder.with_name(f"{folder.name}-{n}")
        if not candidate.exists() or (candidate.is_dir() and not any(candidate.iterdir())):
            return candidate
        n += 1


def claimed_runs(folder: str | os.PathLike) -> list[Path]:
    """The runs that `claim_run_dir(folder)` placed: `folder`, `folder-2`, ... that hold one, oldest first."""
    folder = Path(folder)
    found = [(1, folder)] if holds_run(folder) else []
    if folder.parent.is_dir():
        prefix = folder.name + "-"
        for p in folder.parent.iterdir():
            rest = p.name[len(prefix) :] if p.name.startswith(prefix) else ""
            if rest.isdigit() and int(rest) >= 2 and p.is_dir() and holds_run(p):
                found.append((int(rest), p))
    return [p for _, p in sorted(found)]


def find_runs(root: Path) -> list[Path]:
    """Run directories (with run.json or a checkpoint folder) under `root`, newest name first."""
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and ((p / "run.json").exists() or (p / "checkpoint").is_dir())]
    return sorted(runs, key=lambda p: p.name, reverse=True)


def _timestamp(value: Any) -> float | None:
    """run.json times may be seconds since the epoch or ISO strings; None when unreadable."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _row(run_dir: Path, root: Path) -> dict:
    info = read_run(run_dir) or {}
    status = live_status(run_dir)
    started = _timestamp(info.get("started"))
    if started is None:
        try:
            started = (run_dir / "run.json").stat().st_mtime
        except OSError:
            started = 0.0
    experiment = info.get("experiment") or run_dir.parent.name or run_dir.name
    best = info.get("best") if isinstance(info.get("best"), dict) else {}
    # a sweep's trial (SWEEP_DIR/trial-NNNN, beside sweep.json) is named with its sweep
    name = f"{run_dir.parent.name}/{run_dir.name}" if is_sweep_dir(run_dir.parent) else run_dir.name
    status = "pruned" if status == "interrupted" and info.get("reason") == "pruned" else status
    return {
        "path": run_dir,
        "name": f"{experiment}/{name}",
        "started": started,
        "status": status,
        "exit_code": info.get("exit_code"),
        "epoch": info.get("epoch"),
        "step": info.get("step"),
        "best": best,
    }


def _foreign_row(ref: RunRef, name: str) -> dict:
    """Another tool's run as `ls` lists it: `name` (registry.shown_names: a W&B run's display name, as the
    run list has it) with the tool's name after it; its start, status, epoch and step as its reader reads
    them cheaply (registry.summary: the tool's recorded start and end, the last step from a file's end or
    one query; "-" where the log cannot say it cheaply), the status as `watch` says it; its start, where
    the log records none, its files' time."""
    info = registry.summary(ref)
    started = info.get("started")
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        started = ref.info.get("started")
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        try:
            started = Path(ref.path).stat().st_mtime
        except OSError:
            started = 0.0
    return {
        "path": Path(ref.path),
        "name": f"{name} ({registry.label(ref.tool)})",
        "started": float(started),
        "status": info.get("status") or "log ended",
        "exit_code": None,
        "epoch": info.get("epoch"),
        "step": info.get("step"),
        "best": {},
    }


def list_runs(root: Path = Path("runs"), others: bool = True) -> list[dict]:
    """Every run directory under `root` (or `root` itself), newest first; with `others`, every other
    tool's run there too (tuitrain/sources/registry.py: a TensorBoard folder, an MLflow store ...).

    Each row: path, name ("experiment/timestamp"), started (epoch seconds), status (a running
    run whose process is gone reads "killed"), exit_code, epoch, step, best ({file, monitor, value}).
    """
    root = Path(root)
    rows = []
    if root.is_dir():
        dirs = {p.parent for p in root.rglob("run.json") if p.is_file()}
        rows = [_row(d, root) for d in dirs]
    if others and root.exists():
        refs = [ref for ref in registry.find([root]).runs if not registry.is_own(ref)]
        rows += [_foreign_row(ref, name) for ref, name in zip(refs, registry.shown_names(refs))]
    rows.sort(key=lambda r: (r["started"], str(r["path"])), reverse=True)
    return rows


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.4g}"
    return str(v)


def format_runs(rows: list[dict]) -> str:
    """One aligned line per run: name, started, status, epoch/step, best monitored value."""
    if not rows:
        return "no runs found"
    table = []
    for r in rows:
        started = datetime.fromtimestamp(r["started"]).strftime("%Y-%m-%d %H:%M:%S") if r["started"] else "-"
        epoch = "-" if r.get("epoch") is None else str(r["epoch"])
        step = "-" if r.get("step") is None else str(r["step"])
        best = r.get("best") or {}
        if best.get("value") is not None:
            best_txt = f"{best.get('monitor') or 'best'}={_fmt_value(best['value'])}"
        else:
            best_txt = "-"
        # run.json's strings are shown, never obeyed by the terminal (safe_name: one row, no escapes)
        table.append(
            (
                safe_name(r["name"], 80),
                started,
                safe_name(r["status"], 16),
                safe_name(f"epoch {epoch} step {step}", 40),
                safe_name(best_txt, 60),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = []
    for row in table:
        cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
