"""The main screen's keys: their bindings, the command palette's names for them, and when each
applies (`applies`: the screen's check_action, which hides or disables what does not; and
`refusals.refused`: hidden where it would send nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from flightdeck.engine.model import BatchStatus, Snapshot
from flightdeck.tui.screens import targets
from flightdeck.tui.screens.batch import waiting_for_waves
from flightdeck.tui.widgets import ChildrenTable
from flightdeck.tui.widgets.filter import FilterInput
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.widget import Widget

# The keys that open a box to type in. Their bindings have priority: they run as the app reads
# the key, so the keys read with it in one burst (a lagging ssh link, a paste, tmux send-keys)
# reach the box they open, not the table's keys (`s` then `please…` paused, tagged, sorted).
TYPED_AFTER = frozenset({"steer", "filter", "search"})

MAIN_BINDINGS: list[BindingType] = [
    Binding(  # priority: see TYPED_AFTER
        "s",
        "steer",
        "Steer",
        priority=True,
        id="child.steer",
        tooltip="Send a message to the selected or tagged children; with a filter on and none "
        "tagged, to every child it keeps",
    ),
    Binding(
        "x",
        "stop",
        "Stop",
        id="child.stop",
        tooltip="Stop the selected or tagged children; with a filter on and none tagged, every "
        "child it keeps (confirm, or press x twice)",
    ),
    Binding(
        "n",
        "nudge",
        "Nudge loop",
        id="child.nudge",
        tooltip="Send the canned steer ([steer.canned] loop) to the selected or tagged children "
        "flagged as looping; with a filter on and none tagged, to every looping child it keeps",
    ),
    Binding(
        "p",
        "pause",
        "Pause",
        show=False,  # the footer is full; help (?) and the palette list it
        id="child.pause",
        tooltip="Pause the selected or tagged children (with a filter on and none tagged, every "
        "child it keeps): each holds at its next turn and frees its slot; over children all "
        "paused, continue them (confirm, or press p twice)",
    ),
    Binding(
        "P",
        "pause_admission",
        "Pause batch",
        show=False,
        id="batch.pause",
        tooltip="Pause the batch's admission (no new child starts; the running go on), or "
        "continue it",
    ),
    Binding(
        "X",
        "stop_all",
        "Stop all",
        id="batch.stop-all",
        tooltip="Stop every running and queued child (confirm)",
    ),
    Binding(
        "R",
        "retry",
        "Retry",
        show=False,
        id="child.retry",
        tooltip="Run the selected or tagged children that failed, stopped, timed out, stalled "
        "or ended unknown again (a group header: its members; a filter on: all it keeps): "
        "fresh or continuing; the earlier attempt is kept",
    ),
    Binding(
        "D",
        "diff",
        "Diff",
        show=False,
        id="child.diff",
        tooltip="The selected child's changes in its own worktree: coloured, one file or all",
    ),
    Binding(
        "M",
        "merge",
        "Merge",
        show=False,
        id="child.merge",
        tooltip="Accept the targets' pending changes: commit each on its own branch and merge "
        "them all into a branch you name (at a conflict, none)",
    ),
    Binding(
        "delete,backspace",  # a Mac's delete key sends backspace
        "discard",
        "Discard",
        show=False,
        key_display="del",
        id="child.discard",
        tooltip="Discard the targets' pending changes: worktrees and branches removed (confirm; "
        "backspace too)",
    ),
    Binding(
        "j",
        "row_down",
        "Down",
        show=False,
        id="view.row-down",
        tooltip="Move down a row (as the down arrow does)",
    ),
    Binding(
        "k",
        "row_up",
        "Up",
        show=False,
        id="view.row-up",
        tooltip="Move up a row (as the up arrow does)",
    ),
    # The table binds them too (ChildrenTable.BINDINGS), so they reach it before any container's
    # scrolling; not priority bindings, which the app runs as they arrive, ahead of keys typed
    # before them still on their way to the table ("j j j Home" left the cursor on row 3, "G
    # Home" on a child in the middle of the groups). The filter box and the transcript, when
    # focused, have theirs.
    Binding(
        "home",
        "first_row",
        "First row",
        show=False,
        id="view.first-row",
        tooltip="Go to the first row",
    ),
    Binding(
        "end",
        "last_row",
        "Last row",
        show=False,
        id="view.last-row",
        tooltip="Go to the last row",
    ),
    Binding(
        "space",
        "tag",
        "Tag",
        show=False,
        id="child.tag",
        tooltip="Tag or untag the selected child and move down",
    ),
    Binding(
        "t",
        "tag_visible",
        "Tag visible",
        show=False,
        id="view.tag-visible",
        tooltip="Tag every visible child; again to untag them",
    ),
    Binding(
        "g",
        "tag_group",
        "Tag group",
        show=False,
        id="view.tag-group",
        tooltip="Tag every child of the selected child's group (steer and stop then act on it)",
    ),
    Binding(
        "enter",
        "fold",
        "Fold",
        show=False,
        id="view.fold",
        tooltip="Grouped (G): fold or unfold the group under the cursor",
    ),
    Binding(
        "exclamation_mark",
        "needs",
        "Needs you",
        show=False,  # the footer is full; the status bar's count says "(!)"
        id="view.needs",
        tooltip="What needs you, oldest first with the reason: questions to answer (a), tools "
        "denied, loops, failures a retry may fix, the soft budget's hold; c clears an entry",
    ),
    Binding(  # priority: see TYPED_AFTER; the box takes the focus at once
        "slash",
        "filter",
        "Filter",
        priority=True,
        id="view.filter",
        tooltip="Filter rows by a query: words, status:failed, cost>0.50, idle>5m (see help)",
    ),
    Binding(  # priority: see TYPED_AFTER
        "F",
        "search",
        "Search",
        show=False,
        priority=True,
        id="view.search",
        tooltip="Search every transcript for words (or a regex): the children that match, each "
        "with its first matching line; enter opens the transcript there",
    ),
    Binding(
        "o",
        "sort",
        "Sort",
        show=False,
        id="view.sort",
        tooltip="Cycle the order: attention, recent, cost, tokens, id, batch, tree",
    ),
    Binding(
        "G",
        "group_by",
        "Group by",
        show=False,
        id="view.group-by",
        tooltip="Group rows under foldable headers by group, status, route, tool, error "
        "signature, then not at all; s and x on a header act on its members",
    ),
    Binding(
        "f",
        "follow",
        "Follow",
        show=False,
        id="view.follow",
        tooltip="Keep the cursor on the most recently active child",
    ),
    Binding(
        "z",
        "freeze",
        "Freeze",
        show=False,
        id="view.freeze",
        tooltip="Pause or resume live updates",
    ),
    Binding(
        "r",
        "routes",
        "Routes",
        show=False,
        id="view.routes",
        tooltip="Route gauges: in flight/cap, pause, 429s, cache ratio, rpm/tpm",
    ),
    Binding(
        "d",
        "digest",
        "Digest",
        show=False,
        id="view.digest",
        tooltip="Since you last looked: finished, failed (top errors), stalled, looped, spent, "
        "steers; d or escape again to dismiss",
    ),
    Binding(
        "L",
        "limits",
        "Limits",
        show=False,
        id="batch.limits",
        tooltip="Change the pool size, a route's max_concurrent/rpm/tpm or the soft budget live",
    ),
    Binding(
        "question_mark",
        "help",
        "Help",
        id="app.help",
        tooltip="Every key, the filter language and the status glyphs",
    ),
    Binding(
        "q",
        "quit",
        "Quit",
        id="app.quit",
        tooltip="Quit; asks first while children still run",
    ),
]

# Listed by help (?) after the screen's own keys.
HELP = [
    *(b for b in MAIN_BINDINGS if isinstance(b, Binding)),
    Binding("ctrl+p", "command_palette", "Commands", tooltip="Every command by name"),
]

# Command palette titles, "noun: verb", keyed by action.
PALETTE = {
    "steer": "child: steer",
    "stop": "child: stop",
    "nudge": "child: nudge out of its loop",
    "stop_all": "batch: stop all",
    "retry": "child: retry",
    "diff": "child: show its diff",
    "merge": "child: accept (merge) its changes",
    "discard": "child: discard its changes",
    "pause": "child: pause / continue",
    "pause_admission": "batch: pause / continue admission",
    "tag": "child: tag / untag",
    "tag_visible": "view: tag all visible",
    "tag_group": "view: tag the selected child's group",
    "fold": "view: fold / unfold the group",
    "filter": "view: filter",
    "search": "view: search every transcript",
    "needs": "view: what needs you",
    "sort": "view: next sort order",
    "group_by": "view: group by the next field",
    "follow": "view: follow most active",
    "freeze": "view: freeze / unfreeze",
    "routes": "view: route gauges",
    "digest": "view: since you last looked",
    "limits": "batch: live limits",
    "help": "app: help",
    "quit": "app: quit",
}


def palette_commands(screen: Widget) -> Iterator[SystemCommand]:
    """Every action of `screen` with a palette title that applies right now."""
    for binding in screen.BINDINGS:
        if not isinstance(binding, Binding) or binding.action not in PALETTE:
            continue
        if not screen.check_action(binding.action, ()):  # None: shown in the footer, disabled
            continue
        yield SystemCommand(
            PALETTE[binding.action],
            binding.tooltip,
            partial(screen.run_action, binding.action),
        )


_ROW_MOVES = frozenset({"row_down", "row_up", "first_row", "last_row"})
# The actions whose `applies` depends on the rows (and `refused` on the view, which a poll may
# find ended or abandoned): the screen asks again after each poll.
ROW_ACTIONS = ("steer", "stop", "nudge", "stop_all", "pause", "pause_admission", "tag", "fold")


def applies(
    action: str, table: ChildrenTable, snap: Snapshot | None, *, focused: Widget | None
) -> bool | None:
    """Whether `action` applies to what the table shows: False hides it; None shows it
    disabled (the screen's on_key says why it does nothing)."""
    table_focused = focused is table
    if action in TYPED_AFTER and isinstance(focused, FilterInput):
        return False  # typed into the filter box, the key is text
    if action in ("steer", "stop", "pause"):
        aim = targets.aim(table)
        if aim.live:
            return True
        return None if aim.ids else False  # over finished children
    if action == "nudge":
        if targets.aim(table).looping:
            return True
        # Shown dimmed elsewhere while any child loops, hidden when none does: a key shown
        # and hidden as the cursor moved made the footer mount its keys again and the whole
        # screen lay out, 30-130 ms that the next key waited behind (issue 31).
        looping = any(r.loop is not None and r.status.live for r in table.rows_by_id.values())
        return None if looping else False
    if action == "stop_all":  # a scheduled batch between two waves has none live
        live = any(row.status.live for row in table.rows_by_id.values())
        return live or waiting_for_waves(snap)
    if action == "pause_admission":
        return snap is None or snap.status is BatchStatus.RUNNING
    if action in ("tag", "tag_group"):
        return bool(table.shown) or table.selected_header is not None
    if action == "tag_visible":
        return bool(table.shown)
    if action == "fold":  # enter elsewhere (the filter box, the transcript) is theirs
        return table_focused and table.group_under_cursor() is not None
    if action in _ROW_MOVES:
        return table_focused
    return True
