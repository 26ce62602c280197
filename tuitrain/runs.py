"""`tuitrain ls`: find run directories (folders holding run.json) and format one line per run.

Reads run.json with plain json so that listing runs stays fast. Must not import torch or textual.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime
from pathlib import Path
from typing import Any


def pid_alive(pid: Any) -> bool:
    """True when a process with this pid exists (on this machine)."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def read_run_json(run_dir: Path) -> dict:
    """run.json as a dict; {} when missing or half-written."""
    try:
        data = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_status(run_dir: Path, info: dict | None = None) -> str:
    """run.json's status, "killed" for a running run whose process is gone."""
    try:  # the sinks' reader also knows about runs started on another host
        from tuitrain.sinks.run_status import live_status
    except ImportError:
        live_status = None
    if live_status is not None:
        return live_status(run_dir)
    info = read_run_json(run_dir) if info is None else info
    status = str(info.get("status") or "unknown")
    if status == "running" and not pid_alive(info.get("pid")):
        return "killed"
    return status


def run_is_live(run_dir: Path) -> bool:
    """A run still training: run.json says running and its process exists."""
    return run_status(run_dir) == "running"


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
    info = read_run_json(run_dir)
    status = run_status(run_dir, info)
    started = _timestamp(info.get("started"))
    if started is None:
        try:
            started = (run_dir / "run.json").stat().st_mtime
        except OSError:
            started = 0.0
    experiment = info.get("experiment") or run_dir.parent.name or run_dir.name
    best = info.get("best") if isinstance(info.get("best"), dict) else {}
    return {
        "path": run_dir,
        "name": f"{experiment}/{run_dir.name}",
        "started": started,
        "status": status,
        "exit_code": info.get("exit_code"),
        "epoch": info.get("epoch"),
        "step": info.get("step"),
        "best": best,
    }


def list_runs(root: Path = Path("runs")) -> list[dict]:
    """Every run directory under `root` (or `root` itself), newest first.

    Each row: path, name ("experiment/timestamp"), started (epoch seconds), status (a running
    run whose process is gone reads "killed"), exit_code, epoch, step, best ({file, monitor, value}).
    """
    root = Path(root)
    if not root.is_dir():
        return []
    dirs = {p.parent for p in root.rglob("run.json") if p.is_file()}
    rows = [_row(d, root) for d in dirs]
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
        table.append((r["name"], started, r["status"], f"epoch {epoch} step {step}", best_txt))
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    lines = []
    for row in table:
        cells = [row[i].ljust(widths[i]) for i in range(4)] + [row[4]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
