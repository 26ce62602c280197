"""Where dashboard themes (.tcss files) live, and how a theme name or path becomes a file.

A theme is `themes/<name>.tcss` (shipped) or any `.tcss` path. Must not import textual or torch:
the config validation and `tuitrain --help` use this module.
"""

from __future__ import annotations

from pathlib import Path

SUFFIX = ".tcss"


def theme_dirs() -> list[Path]:
    """Folders holding the shipped themes, existing ones only, first match wins."""
    package = Path(__file__).resolve().parents[1]  # tuitrain/
    candidates = [
        package.parent / "themes",  # source checkout or editable install: top-level themes/
        package / "themes",  # installed wheel: package tuitrain.themes lands inside tuitrain/
    ]
    dirs: list[Path] = []
    for folder in candidates:
        if folder.is_dir() and folder not in dirs:
            dirs.append(folder)
    return dirs


def available_themes() -> list[str]:
    """Names of the shipped themes, sorted, without duplicates."""
    names = {p.stem for folder in theme_dirs() for p in folder.glob("*" + SUFFIX) if p.is_file()}
    return sorted(names)


def find_theme(name: str, base_dir: Path | None = None) -> Path | None:
    """The .tcss file for `name`: a shipped theme's name, or a path ending in .tcss.

    A relative path is looked up in `base_dir` (the config file's folder) first, then the current
    directory. Returns None when nothing matches.
    """
    if not name:
        return None
    if name.endswith(SUFFIX):
        path = Path(name).expanduser()
        if path.is_absolute():
            return path if path.is_file() else None
        for folder in ([Path(base_dir)] if base_dir is not None else []) + [Path.cwd()]:
            candidate = folder / path
            if candidate.is_file():
                return candidate.resolve()
        return None
    if "/" in name or "\\" in name:
        return None  # a name never holds a path separator; a path must end in .tcss
    for folder in theme_dirs():
        candidate = folder / (name + SUFFIX)
        if candidate.is_file():
            return candidate
    return None


class ThemeError(ValueError):
    """A theme name or path that names no theme; its message says what is available."""


def resolve_theme(name: str, base_dir: Path | None = None) -> Path:
    """The one theme resolver: `find_theme`, or ThemeError saying what is wrong and what exists (every
    front door uses it: the config's [dashboard] theme, --theme, fit(theme=), Monitor(theme=))."""
    found = find_theme(name, base_dir)
    if found is not None:
        return found
    if name.endswith(SUFFIX):
        where = f"{base_dir} and {Path.cwd()}" if base_dir is not None else str(Path.cwd())
        raise ThemeError(f"no such file {name!r} (looked in {where})")
    import difflib

    names = available_themes()
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ThemeError(
        f"unknown theme {name!r}{hint}; available: {', '.join(names) or 'none'}, or a path to a .tcss file"
    )
