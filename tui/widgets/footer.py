"""The main screen's footer: Textual's, but keys that only turn enabled or disabled are
restyled in place.

Textual's Footer composes itself again whenever the screen's bindings change. On the main
screen they change with the row under the cursor (steer, stop and pause are disabled over
children that have ended): each time, every key was removed and mounted again, 60-100 ms of the
main thread with the layout that follows, which a key pressed meanwhile waited behind."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

# FooterKey and the two private attributes used below are Textual 8's (pyproject pins <9):
# tests/tui/test_app.py fails if they move.
from textual.widgets._footer import FooterKey


class KeysFooter(Footer):
    """A Footer that composes itself again only when the keys it shows change."""

    def bindings_changed(self, screen: Screen[object]) -> None:
        if not self._restyled(screen):
            super().bindings_changed(screen)  # composes them again after the next refresh

    async def recompose(self) -> None:
        # Each change before that refresh asked for one more: the first composes the keys as
        # they are by then, and the others find them in place (one layout, not several).
        if not self._restyled(self.screen):
            await super().recompose()

    def _restyled(self, screen: Screen[object]) -> bool:
        """Bring each key's enabled state up to date in place; False when the keys shown (or
        their order or words) differ, for Textual's footer to compose them."""
        if not (self._bindings_ready and self.is_attached and screen is self.screen):
            return False
        shown: dict[str, tuple[Binding, bool]] = {}  # as Footer.compose: an action's first
        for _node, binding, enabled, _tooltip in screen.active_bindings.values():
            if binding.show:
                shown.setdefault(binding.action, (binding, enabled))
        keys = [k for k in self.query(FooterKey) if not k.has_class("-command-palette")]
        wanted = [(b.action, b.key, b.description) for b, _ in shown.values()]
        if [(k.action, k.key, k.description) for k in keys] != wanted:
            return False
        for key, (_, enabled) in zip(keys, shown.values(), strict=True):
            key._disabled = not enabled  # what a click on it does (a bell, when disabled)
            key.set_class(not enabled, "-disabled")
        return True
