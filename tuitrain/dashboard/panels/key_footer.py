"""`KeyFooter`: Textual's `Footer`, built again only when the keys it shows have changed.

Textual's footer throws away and builds anew every key it shows each time the screen's bindings may have
changed: a dialog opened or closed over the screen, the focus moved, a key enabled. That is about 40 ms of
a core each time (a widget and two style updates a key), and most of those times the keys, their words and
which are enabled are what they were: the footer then stays as it is.

When it is built, each key is given the footer's `compact` before it is mounted: Textual's keys start
compact and are then bound to the footer's setting, two style updates of each key for nothing.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    """The screen's keys along its bottom line; built again only when they change (see the module)."""

    _shown: tuple[Any, ...] | None = None  # the keys the footer was last built with

    def _keys(self, screen: Screen[Any]) -> tuple[Any, ...]:
        """Everything the footer shows of `screen`'s keys: each key, how it is written, its words and
        group, whether it is shown and enabled, its tooltip; the command palette's key."""
        app = screen.app
        return (
            self.show_command_palette and app.ENABLE_COMMAND_PALETTE,
            self.compact,
            tuple(
                (key, app.get_key_display(b), b.description, b.action, b.show, b.group, enabled, tooltip)
                for key, (_node, b, enabled, tooltip) in screen.active_bindings.items()
            ),
        )

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._keys(self.screen)
        for widget in super().compose():
            compact = getattr(type(widget), "compact", None)
            if isinstance(compact, Reactive) and not widget.has_class("-command-palette"):
                # (the palette's key is not bound to the footer's setting: it keeps its own)
                widget.set_reactive(compact, self.compact)
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if self._shown is not None and self.is_attached and screen is self.screen and self._keys(screen) == self._shown:
            return  # the footer shows these keys already
        super().bindings_changed(screen)


__all__ = ["KeyFooter"]
