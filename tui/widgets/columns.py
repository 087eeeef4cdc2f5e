"""The children table's columns: which fit a width, by priority, a cell's text fitted to its
column, and a line drawn from its cells (and the table's CSS)."""

from __future__ import annotations

from collections.abc import Sequence

from flightdeck.engine.model import ChildRow
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import Cell
from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

# The table's look: its header line, and the cursor's line focused and not.
TABLE_CSS = """
ChildrenTable {
    background: $surface;
    color: $foreground;
    overflow-x: hidden;
    overflow-y: auto;
    scrollbar-size-vertical: 1;
}
ChildrenTable > .children-table--header {
    text-style: bold;
    background: $panel;
    color: $foreground;
}
ChildrenTable > .children-table--cursor {
    background: $block-cursor-background;
    color: $block-cursor-foreground;
    text-style: $block-cursor-text-style;
}
ChildrenTable > .children-table--cursor-blurred {
    background: $block-cursor-blurred-background;
    color: $block-cursor-blurred-foreground;
    text-style: $block-cursor-blurred-text-style;
}
"""

DOING_CHARS = 60
TREE_MARK = "└ "  # before a delegate's id in the tree order, indented by its depth

COLUMNS: tuple[tuple[str, str, int], ...] = (
    # key, label, width (the goal column's width is recomputed from the table's width)
    ("mark", "", 2),
    ("id", "child", 16),
    ("goal", "goal", 30),
    ("route", "route", 10),
    ("calls", "calls", 5),
    ("doing", "doing", 20),
    ("last", "last", 7),
    ("tokens", "tok in/out", 11),
    ("cost", "cost", 9),  # "$0.0262+?": a pending turn's mark is never cut off
    ("retries", "rt", 3),
    ("steer", "steer", 15),  # "✓ delivered (2)"; "doing" gave 4: the same columns fit a width
)
COLUMN_KEYS = tuple(key for key, _, _ in COLUMNS)
Columns = Sequence[tuple[str, str, int]]  # the shown ones: key, label, width (fit_columns)
_SEP = " "  # between columns


# --- layout by priority -----------------------------------------------------------------------

# Dropped first to last when the screen is narrow; the mark (status), id, "doing" (activity) and
# cost stay. The goal shrinks to its floor before anything is dropped, and goes last.
DROP_ORDER = ("retries", "calls", "route", "last", "steer", "tokens", "goal")
GOAL_MIN = 11  # gave one cell to "cost": the same columns fit a width
DOING_MIN = 12
ID_MIN = 8
ID_MAX = 40  # a longer id is cut in its middle (fit_name)
DOING_MAX = DOING_CHARS  # the full text is in the detail line under the table


def fit_columns(width: int, id_need: int = 16) -> tuple[tuple[str, str, int], ...]:
    """The columns to show at `width` cells (one space between columns), with their widths.

    The id column is as wide as the longest id needs (`id_need`, with a tree's indent): extra
    width goes to it first, so delegates' ids are not cut while other columns stand blank.
    Beyond that, half goes to "doing" (up to what it can say) and the rest to the goal, so a
    wide screen does not spend it all on the goal.
    """
    widths = {key: w for key, _, w in COLUMNS}
    widths["goal"] = GOAL_MIN
    id_need = min(max(id_need, ID_MIN), ID_MAX)
    widths["id"] = min(widths["id"], id_need)
    keys = list(COLUMN_KEYS)

    def total() -> int:
        return sum(widths[k] for k in keys) + len(keys) - 1

    for key in DROP_ORDER:
        if total() <= width:
            break
        keys.remove(key)
    over = total() - width
    for key, floor in (("doing", DOING_MIN), ("id", ID_MIN)):
        cut = max(0, min(over, widths[key] - floor))
        widths[key] -= cut
        over -= cut
    extra = width - total()
    if extra > 0 and widths["id"] < id_need:
        grow = min(extra, id_need - widths["id"])
        widths["id"] += grow
        extra -= grow
    if extra > 0:
        to_doing = min(extra // 2 if "goal" in keys else extra, DOING_MAX - widths["doing"])
        widths["doing"] += max(0, to_doing)
        if "goal" in keys:
            widths["goal"] += extra - max(0, to_doing)
    return tuple((key, label, widths[key]) for key, label, _ in COLUMNS if key in keys)


def fit_text(text: str, width: int) -> str:
    """`text` in exactly `width` cells: padded, or cut with an ellipsis."""
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, width - 1) + "…"


def id_width(row: ChildRow) -> int:
    """The cells a row's id takes, indented as the tree order shows it."""
    return cell_len(one_line(row.id)) + 2 * row.depth


def fit_name(text: str, width: int) -> str:
    """A child's id in exactly `width` cells: cut in the middle, so what tells siblings apart
    stays (`summa…e-readme.2`, not `summarize-readm…` for every delegate of one parent); a
    tree's indent (`  └ `) is kept whole."""
    if width <= 0 or cell_len(text) <= width:
        return fit_text(text, width)
    body = text.lstrip(" ")
    indent = text[: len(text) - len(body)]
    if body.startswith(TREE_MARK):
        indent, body = indent + TREE_MARK, body[len(TREE_MARK) :]
    room = width - cell_len(indent) - 1  # the ellipsis takes one
    if room < 2:
        return fit_text(text, width)
    head = room // 3
    tail = _tail(body, room - head)
    return set_cell_size(indent + set_cell_size(body, head) + "…" + tail, width)


def _tail(text: str, width: int) -> str:
    """The end of `text` that fits in `width` cells."""
    out = ""
    for char in reversed(text):
        if cell_len(char + out) > width:
            break
        out = char + out
    return out


# --- lines ------------------------------------------------------------------------------------


def line_strip(columns: Columns, cells: tuple[Cell, ...], base: Style, width: int) -> Strip:
    """A child's line: each shown column's cell fitted to its width, in `base` and its style."""
    by_key = dict(zip(COLUMN_KEYS, cells, strict=True))
    sep = Segment(_SEP, base)
    segments: list[Segment] = []
    for key, _, col_width in columns:
        text, style = by_key[key]
        if segments:
            segments.append(sep)
        # Plain text, never markup: goals, ids and errors are untrusted.
        fit = fit_name if key == "id" else fit_text
        segments.append(Segment(fit(text, col_width), base + Style.parse(style)))
    return Strip(segments).adjust_cell_length(width, base)


def group_strip(cells: tuple[Cell, ...], base: Style, width: int) -> Strip:
    """A group's header: one plain text across the columns (the name is sanitized)."""
    text, style = cells[0]
    segment = Segment(fit_text(text, width), base + Style.parse(style))
    return Strip([segment]).adjust_cell_length(width, base)


def header_strip(columns: Columns, style: Style, width: int) -> Strip:
    """The column labels above the rows."""
    text = _SEP.join(fit_text(label, w) for _, label, w in columns)
    return Strip([Segment(text, style)]).adjust_cell_length(width, style)
