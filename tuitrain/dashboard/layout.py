"""The dashboard's sizes and themes: its stylesheet (`DASHBOARD_TCSS`), the terminal sizes under
which the screen gives way (`COMPACT`, `TOO_SMALL`: `DashboardScreen` in tuitrain/dashboard/screens/screen.py
applies them), the theme helpers `default_theme` and `base_theme_of`, and the built-in
`HIGH_CONTRAST` theme.

Like the rest of the dashboard, this module must not import the run layer
(`tuitrain.config`, `tuitrain.run*`, `tuitrain.runner`, `tuitrain.build`, `tuitrain.runs`,
`tuitrain.cli`): only `tuitrain.core`, `tuitrain.sinks` and `tuitrain.dashboard`.
"""

from __future__ import annotations

import re
from pathlib import Path

from textual.theme import Theme


DASHBOARD_TCSS = Path(__file__).with_name("dashboard.tcss")
COMPACT = (100, 32)  # below this width or height the side panels shrink
TOO_SMALL = (50, 12)  # below this the dashboard gives way to a notice

# a theme file may name the Textual base theme (buttons, footer, dialogs) in a comment
_BASE_THEME = re.compile(r"textual-theme:\s*([A-Za-z0-9_-]+)")

HIGH_CONTRAST = Theme(
    name="tuitrain-high-contrast",
    primary="#ffff00",
    secondary="#00ffff",
    accent="#ff00ff",
    foreground="#ffffff",
    background="#000000",
    surface="#000000",
    panel="#000000",
    success="#00ff00",
    warning="#ffff00",
    error="#ff0000",
    dark=True,
)


def default_theme() -> Path | None:
    try:
        from tuitrain.dashboard.themes import find_theme
    except ImportError:
        find_theme = None
    if find_theme is not None:
        found = find_theme("dark")
        if found is not None:
            return found
    for folder in (Path(__file__).resolve().parents[2] / "themes", Path(__file__).resolve().parents[1] / "themes"):
        if (folder / "dark.tcss").is_file():
            return folder / "dark.tcss"
    return None


def base_theme_of(theme: Path | None) -> str:
    if theme is None:
        return "textual-dark"
    try:
        m = _BASE_THEME.search(Path(theme).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return "textual-dark"
    return m.group(1) if m else "textual-dark"
