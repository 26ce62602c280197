"""The terminal's own graphics for logged images (Kitty's graphics protocol, Sixel), through the
optional `textual-image` package (`pip install tuitrain[images]`), or none: the samples panel then
draws images in coloured half-blocks, which every terminal, tmux and the browser (`serve`) show.

`textual-image` asks the terminal what it can draw when it is imported, writing a query and reading
the answer from the terminal: that has to happen before the app starts reading the keys, so the
entry points call `probe()` first. It is only asked where an answer can be had and used: the
package installed, a terminal on both stdin and stdout, not under tmux or screen (they pass no
graphics on without being set up to), not in a browser (`serve` runs the app on a web driver), and
not turned off (TUITRAIN_GRAPHICS=0). Must not import textual before `probe()` is called.
"""

from __future__ import annotations

import importlib.util
import os
import sys

#: the textual-image widget class for this terminal's graphics (None: half-blocks), once probed
IMAGE_WIDGET = None
_probed = False


def worth_asking(environ=os.environ, stdin=None, stdout=None) -> bool:
    """Whether to ask the terminal at all (see the module's docstring)."""
    stdin, stdout = stdin or sys.__stdin__, stdout or sys.__stdout__
    if environ.get("TUITRAIN_GRAPHICS", "").strip().lower() in ("0", "no", "off", "false"):
        return False
    if environ.get("TMUX") or environ.get("STY") or environ.get("TERM", "").startswith(("screen", "tmux")):
        return False
    if environ.get("TEXTUAL_DRIVER"):  # textual-serve's web driver: a browser, not a terminal
        return False
    try:
        if not (stdin and stdout and stdin.isatty() and stdout.isatty()):
            return False
    except (ValueError, OSError):  # closed
        return False
    return importlib.util.find_spec("textual_image") is not None


def probe() -> None:
    """Finds the graphics this terminal draws (once; call before the app starts): sets IMAGE_WIDGET."""
    global IMAGE_WIDGET, _probed
    if _probed:
        return
    _probed = True
    if not worth_asking():
        return
    try:  # a third party's probe of the terminal: whatever it raises, half-blocks it is
        from textual_image import renderable, widget

        if renderable.Image is renderable.SixelImage:
            IMAGE_WIDGET = widget.SixelImage
        elif renderable.Image is renderable.TGPImage:
            IMAGE_WIDGET = widget.TGPImage
    except Exception:
        IMAGE_WIDGET = None


def image_widget():
    """The widget class that draws an image with the terminal's graphics, or None (half-blocks)."""
    return IMAGE_WIDGET


__all__ = ["IMAGE_WIDGET", "image_widget", "probe", "worth_asking"]
