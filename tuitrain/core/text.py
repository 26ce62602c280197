"""Text from the user's code (metric names, prints, phase and file names, errors) made safe for a
screen: shown, never obeyed. The one place that decides what reaches a terminal; the console sink,
experiment.log and every dashboard widget call it. Must not import torch, textual or rich.

- `safe_text`: escape sequences (CSI, OSC, DCS, SOS, PM, APC and the rest, 7- and 8-bit) and C0/C1
  controls removed, `\\r` redraws collapsed to what a terminal would end up showing, tabs as spaces,
  bidi overrides and lone surrogates gone; SGR colour kept only when asked (for `Text.from_ansi`).
- `safe_name`: the same on one row, shortened in the middle to a width in cells.
- `collapse_redraws`: only the `\\r` part (a progress bar's redraws), for text kept as printed.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# CSI: ESC [ (or 8-bit 0x9b), parameters, intermediates, a final byte (absent when the text was cut)
_CSI = r"(?:\x1b\[|\x9b)([0-?]*)[ -/]*([@-~]?)"
# OSC, DCS, SOS, PM, APC: a string up to BEL or ST; unterminated, to the end of its line
_STRING = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
# any other escape: ESC, intermediates, one final byte (ESC c resets the terminal, ESC ( 0 draws lines)
_OTHER = r"\x1b[ -/]*[0-~]?"
_SEQUENCE = re.compile(f"{_CSI}|{_STRING}|{_OTHER}")
# what is left that a terminal acts on or that reorders a line: C0 but \t \n, DEL, C1, bidi controls
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # a str from surrogateescape'd bytes: not printable
_SEPARATOR = re.compile("[\u2028\u2029]")  # line breaks to some readers, not to a terminal


def collapse_redraws(text: str) -> str:
    """Each line as a terminal would end up showing it after `\\r` redraws: the last part that is not
    empty (a progress bar redraws its whole line, so the last part is its newest state)."""
    if "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    out = []
    for line in text.split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p]
            line = parts[-1] if parts else ""
        out.append(line)
    return "\n".join(out)


def _sgr(match: re.Match[str]) -> str:
    """The colour a sequence sets, as a clean SGR ("" for any other sequence)."""
    params, final = match.group(1), match.group(2)
    if final == "m" and params is not None and _SGR_PARAMS.fullmatch(params):
        return "\x1b[" + params + "m"
    return ""


_SGR_PARAMS = re.compile(r"[0-9;:]*")


def _clean(text: str, tab: int) -> str:
    if "\t" in text:
        text = "\n".join(line.expandtabs(tab) for line in text.split("\n"))
    text = _CONTROL.sub("", text)
    text = _SURROGATE.sub("\ufffd", text)
    return _SEPARATOR.sub(" ", text)


def safe_text(text: object, *, lines: bool = True, colour: bool = False, tab: int = 4) -> str:
    """`text` as it may be put on a screen or in a log: nothing in it is obeyed by a terminal.

    lines: keep newlines (False: one row, newlines as spaces). colour: keep SGR colour sequences,
    for a caller that turns them into styles through `Text.from_ansi` (never written raw)."""
    if not isinstance(text, str):
        text = str(text)
    if text.isprintable() and text.isascii():  # the common case: nothing to do
        return text
    text = collapse_redraws(text)
    if colour:
        parts, at = [], 0
        for match in _SEQUENCE.finditer(text):
            parts.append(_clean(text[at : match.start()], tab))
            parts.append(_sgr(match))
            at = match.end()
        parts.append(_clean(text[at:], tab))
        text = "".join(parts)
    else:
        text = _clean(_SEQUENCE.sub("", text), tab)
    if not lines:
        text = text.replace("\n", " ")
    return text


def cell_width(text: str) -> int:
    """Columns `text` takes on a terminal: wide East Asian characters two, combining marks none."""
    if text.isascii():
        return len(text)
    return sum(_char_width(c) for c in text)


def _char_width(c: str) -> int:
    if unicodedata.combining(c) or c == "\u200d":
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def shorten_middle(text: str, width: int, mark: str = "…") -> str:
    """`text` in at most `width` cells: the middle replaced by `mark` when longer (both ends of a
    name usually tell it: `model.layers.0…attn.norm`)."""
    if width <= 0:
        return ""
    if cell_width(text) <= width:
        return text
    if width <= cell_width(mark):
        return mark[:width]
    room = width - cell_width(mark)
    head_room = (room + 1) // 2
    head, used = [], 0
    for c in text:
        w = _char_width(c)
        if used + w > head_room:
            break
        head.append(c)
        used += w
    tail_room = room - used
    tail, used = [], 0
    for c in reversed(text):
        w = _char_width(c)
        if used + w > tail_room:
            break
        tail.append(c)
        used += w
    return "".join(head) + mark + "".join(reversed(tail))


NAME_WIDTH = 48  # cells a metric, phase or run name may take on screen before its middle goes


@functools.lru_cache(maxsize=4096)
def safe_name(name: object, width: int = NAME_WIDTH) -> str:
    """A name (a metric's, a phase's, a run's) on one row of a screen: safe, at most `width` cells."""
    return shorten_middle(safe_text(name, lines=False), width)


def alert_line(title: object, text: object) -> str:
    """An alert's title and text in one line ("my alert: what was seen"), each made safe (`safe_text`); the
    title once where the text is the title (`mon.alert("title")` alone). The headless line, experiment.log
    and the dashboard's output panel say an alert so."""
    title, text = safe_text(title, lines=False), safe_text(text, lines=False)
    return f"{title}: {text}" if title and text != title else text or title


__all__ = ["NAME_WIDTH", "alert_line", "cell_width", "collapse_redraws", "safe_name", "safe_text", "shorten_middle"]
