"""The help screen: every key, the filter language and the status glyphs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from flightdeck.tui.fmt import GLYPHS, LEFT_RUNNING, LEFT_RUNNING_TEXT
from flightdeck.tui.widgets.columns import COLUMNS
from flightdeck.tui.widgets.rows import (
    COLUMN_HELP,
    LOOPING_GLYPH,
    OUTLIER_MARK,
    RETRYING_GLYPH,
    STATUS_ALIASES,
    TAG_MARK,
)
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

FILTER_HELP = (
    ('words, "a phrase"', "all must appear in the id, goal, group, activity, error or model"),
    ("status:failed,running", "any of these statuses; also " + ", ".join(STATUS_ALIASES)),
    ("route:sim  group:NAME", "children on this route / in this group"),
    ("tool:read_file", "children running this tool now"),
    ('error:"rate limit"', "children whose error says this"),
    (
        "cost>0.50  tokens>20k",
        "compare with > < >= <=: dollars ($ optional), tokens with the cached (k, m)",
    ),
    ("idle>5m  depth>0", "since its last activity (s, m, h); a delegate's depth"),
    ("is:looping", "children flagged as looping (n sends them the canned steer)"),
    ("is:needs-you", "children in the needs-you queue (!)"),
    ("is:tagged  is:outlier", "only tagged children / outliers (▲); every term must hold (AND)"),
)


class HelpScreen(ModalScreen[None]):
    """Lists every key with what it does."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close", id="help.close", tooltip="Close help"),
    ]

    def __init__(self, keys: Sequence[tuple[str, str, str]]) -> None:
        super().__init__()
        self.keys = list(keys)  # (key, name, what it does)

    def compose(self) -> ComposeResult:
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column(style="bold", no_wrap=True)
        keys.add_column()
        for key, name, tooltip in self.keys:
            keys.add_row(Text(key), Text(name), Text(tooltip))
        filters = Table.grid(padding=(0, 2))
        filters.add_column(style="bold cyan", no_wrap=True)
        filters.add_column()
        for term, meaning in FILTER_HELP:
            filters.add_row(Text(term), Text(meaning))
        legend = Text()
        for status, (glyph, style) in GLYPHS.items():
            legend.append(f"{glyph} ", style=style)
            legend.append(f"{status.value}   ")
        legend.append(f"{LEFT_RUNNING[0]} ", style=LEFT_RUNNING[1])
        legend.append(f"{LEFT_RUNNING_TEXT} (its owner died: nobody watches it)   ")
        legend.append(f"{RETRYING_GLYPH[0]} ", style=RETRYING_GLYPH[1])
        legend.append("retrying   ")
        legend.append(f"{LOOPING_GLYPH[0]} ", style=LOOPING_GLYPH[1])
        legend.append("looping   ")
        legend.append(f"{TAG_MARK} ", style="bold magenta")
        legend.append("tagged   ")
        legend.append(f"{OUTLIER_MARK} ", style="bold yellow")
        legend.append("outlier (before the tokens)")
        columns = Table.grid(padding=(0, 2))
        columns.add_column(style="bold cyan", no_wrap=True)
        columns.add_column()
        for key, label, _ in COLUMNS:
            if label:
                columns.add_row(Text(label), Text(COLUMN_HELP[key]))
        body = Group(
            Text("Keys", style="bold underline"),
            keys,
            Text(""),
            Text("Filter (/)", style="bold underline"),
            filters,
            Text(""),
            Text("Status", style="bold underline"),
            legend,
            Text(""),
            Text("Columns", style="bold underline"),
            columns,
            Text(
                "A narrow screen leaves columns out (rt, calls, route, last, steer, tokens, then "
                "the goal); the line under the table shows the selected child's whole doing, "
                "error, steer and goal. After a key press rows keep their places for a few "
                "seconds: the status bar says 're-sort pending' until they move.",
                style="dim",
            ),
            Text(""),
            Text(
                "G groups the rows by task group, status, route, running tool or error "
                "signature (ids and numbers as <id>, <n>: the same failure under one header), "
                "then not at all; the sort order applies within each group. A header leads each "
                "group: ▾, its name (no tool, no error: those with none), its children counted "
                "by status and their cost. enter folds it to its header (▸) or unfolds it; on a "
                "header, s and x act on the group's live members and space tags them.",
            ),
            Text(""),
            Text(
                f"{OUTLIER_MARK} before the tokens: an outlier, its tokens over 3 times the "
                "batch's median among children that used any, or its run time over 3 times the "
                "median among children that started; the line under the table says which. "
                "is:outlier keeps them.",
                style="dim",
            ),
            Text(""),
            Text(
                "L shows the live limits (pool size, each route's max_concurrent, rpm and tpm, "
                "the soft budget) to change while the batch runs; off removes one. Lowering "
                "stops nothing: admission waits until under it. When the soft budget is "
                "reached, admission holds and a dialog asks: raise it, continue without it, or "
                "stop all.",
                style="dim",
            ),
            Text(""),
            Text("Also in the command palette (ctrl+p). Esc closes.", style="dim"),
        )
        with VerticalScroll(classes="help"):
            yield Static(body)

    def action_close(self) -> None:
        self.dismiss(None)
