"""The Textual dashboard. Nothing here imports textual until a dashboard opens: `run_live` and
`run_watch` import `tuitrain.dashboard.app` when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_live(run: Any, theme: Path | None = None) -> int:
    from tuitrain.dashboard.entry import run_live as _run_live

    return _run_live(run, theme)


def run_watch(run_dir: Path, theme: Path | None = None) -> int:
    from tuitrain.dashboard.entry import run_watch as _run_watch

    return _run_watch(run_dir, theme)


__all__ = ["run_live", "run_watch"]
