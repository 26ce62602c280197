"""`KeyFooter`: Textual's `Footer`, built again only when the keys it shows have changed.

Textual's footer throws away and builds anew every key it shows each time the screen's bindings may have
changed: a dialog opened or closed over the screen, the focus moved, a key enabled. That is about 40 ms of
a core each time (a widget and two style updates a key), and most of those times the keys, their words and
which are enabled are what they were: the footer then stays as it is. Keys the footer hides, and which
action a shown key calls (the focus moved into the chart grid: its chart keys replace the screen's), change
nothing it draws: its keys are then only told their new actions. A screen opening tells the footer several
times that its keys may have changed before the rebuild it asked for the first time begins: that one rebuild
shows the keys as they are then (Textual's footer rebuilt itself once for each).

When it is built, each key is given the footer's `compact` before it is mounted: Textual's keys start
compact and are then bound to the footer's setting, two style updates of each key for nothing.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.reactive import Reactive
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey


class KeyFooter(Footer):
    """The screen's keys along its bottom line; built again only when they change (see the module)."""

    _shown: tuple[Any, ...] | None = None  # the keys the footer was last built with
    _rebuilding = False  # a rebuild asked for and not begun: it shows the keys as they are when it begins

    def _keys(self, screen: Screen[Any]) -> tuple[tuple[Any, ...], list[str]]:
        """Everything the footer shows of `screen`'s keys: each shown key, how it is written, its words and
        group, whether it is enabled, its tooltip, which of the actions before it it shares (the footer
        shows an action once); the command palette's key. Then the action of each key the footer shows.
        Keys hidden from the footer, and which action a shown key calls, change nothing it draws (the
        chart keys are the screen's with the focus outside the chart grid, the grid's inside it)."""
        app = screen.app
        active = screen.active_bindings
        actions: dict[str, int] = {}  # each action shown, in the footer's order
        keys = []
        for key, (_node, b, enabled, tooltip) in active.items():
            if b.show:
                same = actions.setdefault(b.action, len(actions))
                keys.append((key, app.get_key_display(b), b.description, same, b.group, enabled, tooltip))
        palette = self.show_command_palette and app.ENABLE_COMMAND_PALETTE
        palette_key = active.get(app.COMMAND_PALETTE_BINDING) if palette else None
        if palette_key is not None:
            _node, b, enabled, _tooltip = palette_key
            palette_key = (b.key, app.get_key_display(b), b.description, b.action, enabled, b.tooltip)
        return (palette, palette_key, self.compact, tuple(keys)), list(actions)

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._shown = self._keys(self.screen)[0]
        for widget in super().compose():
            compact = getattr(type(widget), "compact", None)
            if isinstance(compact, Reactive) and not widget.has_class("-command-palette"):
                # (the palette's key is not bound to the footer's setting: it keeps its own)
                widget.set_reactive(compact, self.compact)
                widget.set_class(self.compact, "-compact", update=False)
            yield widget

    async def recompose(self) -> None:
        self._rebuilding = False  # this one reads the keys: a change from now on asks again
        await super().recompose()

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if self._rebuilding and self._bindings_ready and self.is_attached and screen is self.screen:
            return  # the rebuild on its way shows the keys as they will be (a screen opening asks several times)
        if self._shown is not None and self.is_attached and screen is self.screen:
            shown, actions = self._keys(screen)
            if shown == self._shown:  # the footer shows these keys already: each calls its action now
                for footer_key, action in zip(self.query(FooterKey).exclude(".-command-palette"), actions):
                    footer_key.action = action
                return
        super().bindings_changed(screen)
        # Footer's condition for the rebuild it asked for (`call_after_refresh(self.recompose)`)
        self._rebuilding = screen.app.app_focus and self.is_attached and screen is self.screen


__all__ = ["KeyFooter"]
