"""The "since you last looked" panel: what ended, failed (by error signature), stalled, looped;
what was spent; steers delivered and missed. Hidden until the screen shows a digest."""

from __future__ import annotations

from typing import ClassVar

from flightdeck.engine.sanitize import one_line
from flightdeck.tui.digest import Digest
from flightdeck.tui.fmt import fmt_cost, fmt_span
from rich.text import Text
from textual.widgets import Static

SIGNATURE_CHARS = 100


def digest_text(d: Digest) -> Text:
    """The panel's lines. Error signatures come from error messages: sanitized, never markup."""
    text = Text()
    text.append("Since you last looked", style="bold")
    text.append(f" ({fmt_span(d.until - d.since)} ago)", style="dim")
    text.append("   d or esc: dismiss\n", style="dim")
    if d.empty:
        text.append("  nothing new: no child ended, nothing spent, no steer settled")
        return text
    counts = [
        (d.completed, "finished", ""),
        (d.failed, "failed", "red"),
        (d.stalled, "stalled", "yellow"),
        (d.stopped, "stopped", ""),
        (d.looped, "looped", "yellow"),
    ]
    text.append("  ")
    for i, (n, word, style) in enumerate(counts):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{n} {word}", style=style if n else "dim")
    text.append(f"\n  spent {fmt_cost(d.spent_usd)}")
    text.append(f" · steers {d.steers_delivered} delivered, {d.steers_missed} missed")
    for signature, n in d.signatures:
        text.append(f"\n  {n}× ", style="red")
        text.append(one_line(signature, SIGNATURE_CHARS))
    if d.other_failures:
        text.append(f"\n  {d.other_failures}× other errors", style="dim")
    return text


class DigestPanel(Static):
    """Shows one `Digest`; takes no space while none is shown."""

    DEFAULT_CSS: ClassVar[str] = """
    DigestPanel {
        display: none;
        text-wrap: nowrap;  /* a line too long is cut, not wrapped */
        text-overflow: ellipsis;
        height: auto;
        max-height: 30%;
        padding: 0 1;
        background: $boost;
        border-left: thick $accent;
    }
    DigestPanel.-shown {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self.digest: Digest | None = None

    @property
    def shown(self) -> bool:
        return self.digest is not None

    def show(self, d: Digest | None) -> None:
        if d == self.digest:
            return
        self.digest = d
        self.update(digest_text(d) if d is not None else "")
        self.set_class(d is not None, "-shown")
