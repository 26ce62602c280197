"""Text that fits its row, shortened rather than cut: the title bar (`title_line`), the footer's key
words (`footer_bindings`), and text ellipsised at a word boundary (`words_within`). 80x24 is a
size the dashboard is made for: a word is shortened or left out whole, never torn.

Pure functions of text and widths (the footer's need Textual's `Binding` only). Like the rest of the
dashboard, this module must not import the run layer (`tuitrain.config`, `tuitrain.run*`,
`tuitrain.cli`).
"""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Callable

from rich.cells import cell_len
from rich.text import Text

#: the ellipsised text of an alert keeps at least this many cells before the run's folder is shortened
MIN_TAIL = 16

#: the footer's words, shorter, for a narrow terminal
SHORT_WORDS = {"Stop now": "Stop", "Checkpoint": "Ckpt", "X axis": "Axis", "Window": "Win"}
#: the keys the footer leaves out first when even the short words do not fit (the help screen `?` lists
#: them all): Ctrl+C (q asks the same), the samples' [ and ] (the samples panel's border names them), then
#: the chart keys used least
DROP_FIRST = ("ctrl+c", "right_square_bracket", "left_square_bracket", "w", "x", "e", "s", "l", "i", "slash", "R", "P")


def words_within(text: str, room: int) -> str:
    """`text` if it fits `room` cells, else its first whole words and "…"; "" when not even a word fits."""
    if cell_len(text) <= room:
        return text
    kept = ""
    for word in text.split(" "):
        longer = f"{kept} {word}" if kept else word
        if cell_len(longer) + 1 > room:
            break
        kept = longer
    kept = kept.rstrip(" ,;:·-–(")
    return f"{kept}…" if kept else ""


def shorter_paths(where: str) -> list[str]:
    """'runs/charlm/2026' -> ['runs/charlm/2026', '…/charlm/2026', '…/2026', '']: the folder shown, then
    with its leading parts left out, then not at all."""
    if not where:
        return [""]
    parts = where.rstrip("/").split("/")
    out = [where] + [f"…/{'/'.join(parts[i:])}" for i in range(1, len(parts))]
    return out + [""]


def title_line(
    name: str, where: str, mode: str, width: int, head: str = "", tail: str = "", style: str = "", sep: str = ": "
) -> Text:
    """The title bar in `width` cells: " NAME  WHERE  [MODE]  HEAD: TAIL". TAIL (the newest alert) is
    ellipsised at a word boundary; once it would keep fewer than `MIN_TAIL` cells, WHERE (the run's
    folder) gives way first, from the left. `head`, `sep` and `tail` are shown in `style`."""

    def line(folder: str, end: str) -> Text:
        text = Text.assemble((f" {name}", "bold"), f"  {folder}" if folder else "", f"  [{mode}]")
        if end:
            text.append(f"  {end}", style=style)
        return text

    folders = shorter_paths(where)
    if not head:
        for folder in folders:
            text = line(folder, "")
            if text.cell_len <= width:
                return text
        return _cut(line("", ""), width)
    best: Text | None = None
    for folder in folders:
        room = width - line(folder, "").cell_len - 2 - cell_len(head)
        if not tail:
            if room >= 0:
                return line(folder, head)
            continue
        shown = words_within(tail, room - cell_len(sep))
        if shown == tail or cell_len(shown) >= MIN_TAIL:
            return line(folder, f"{head}{sep}{shown}")
        if best is None and shown:  # a few words of it, should the folder's leaving not make room
            best = line(folder, f"{head}{sep}{shown}")
    if best is not None:
        return best
    text = line("", head)
    return text if text.cell_len <= width else _cut(text, width)


def _cut(text: Text, width: int) -> Text:
    """The last resort, on a terminal narrower than the name itself: "…" at the end."""
    text.truncate(width, overflow="ellipsis")
    return text


def footer_width(shown: list[tuple[str, str]]) -> int:
    """Cells Textual's `Footer` takes for (key as displayed, description) pairs: " key desc " each."""
    return sum(cell_len(key) + 2 + cell_len(desc) + 1 for key, desc in shown)


def footer_bindings(bindings: dict, width: int, key_display: Callable) -> dict:
    """The screen's active bindings (key -> `ActiveBinding`) as the footer shows them in `width`
    cells: their own words when they fit, else the short words (`SHORT_WORDS`), else without the keys
    of `DROP_FIRST`, one after another (they still act; `?` lists them). The keys and their order stay."""

    def shown(items: dict) -> list[tuple[str, str]]:
        seen: set[str] = set()
        out = []
        for active in items.values():
            b = active.binding
            if b.show and b.action not in seen:  # the footer shows an action once
                seen.add(b.action)
                out.append((key_display(b), b.description))
        return out

    if footer_width(shown(bindings)) <= width:
        return bindings
    fitted = {
        key: active._replace(
            binding=replace(
                active.binding, description=SHORT_WORDS.get(active.binding.description, active.binding.description)
            )
        )
        for key, active in bindings.items()
    }
    for drop in DROP_FIRST:
        if footer_width(shown(fitted)) <= width:
            break
        if drop in fitted and fitted[drop].binding.show:
            fitted[drop] = fitted[drop]._replace(binding=replace(fitted[drop].binding, show=False))
    return fitted


__all__ = ["footer_bindings", "footer_width", "shorter_paths", "title_line", "words_within"]
