"""What a run prints: a completion line per child (headless), the summary table at the end."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.attached.hints import command_line, soft_lift
from flightdeck.engine.model import (
    ChildFinished,
    ChildRow,
    ChildStatus,
    GroupFinished,
    Snapshot,
    Totals,
    UnitStatus,
)
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.fmt import (
    GLYPHS,
    fmt_cost,
    fmt_counted,
    fmt_row_cost,
    fmt_spent,
    fmt_spent_compact,
    fmt_tokens,
    forecast_label,
)
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from flightdeck.engine.api import Engine


def report_hint(engine: Engine) -> str:
    """The command that shows this batch's report, to paste back into a shell."""
    return command_line(engine.state_dir, "report", engine.batch_id)


def soft_hold_hint(engine: Engine, held: str) -> str:
    """The one line a headless run prints when the soft budget holds admission: why, and the
    commands that raise it, drop it, or stop the batch."""
    where, b = engine.state_dir, engine.batch_id
    return (
        f"held: {sanitize(held)}; running children go on. {soft_lift(where, b)}; "
        f"to stop: {command_line(where, 'stop', b, '--all')}"
    )


def print_ending(
    console: Console, engine: Engine, snap: Snapshot, every: int | None = None
) -> None:
    """What a run prints once its batch is over: the summary table, the children of the
    batch's `every` whose end the store could not keep, then the report command."""
    console.print(summary_table(snap))
    if unrecorded := unrecorded_line(snap.totals, every):
        console.print(Text(unrecorded, style="red"))
    # A batch that failed will not complete, and its store is short of the children that
    # finished unrecorded: a forecast would count those as "not finished".
    failed = engine.failure is not None or engine.unrecorded > 0
    for line in money_lines(snap, forecast=not failed):
        console.print(line)
    if pending := pending_line(snap, engine.state_dir):
        console.print(Text(pending))
    console.print(Text(f"report: {report_hint(engine)}"))


def pending_line(snap: Snapshot, state_dir: Path | str) -> str | None:
    """The children whose changes wait in their own workspace for the operator (kept until
    merged or discarded), and the command that shows them; None if none wait. Without it a
    headless batch read `completed`, its work unmentioned in the state folder."""
    pending = [
        (r.id, r.changes)
        for r in snap.children
        if r.changes is not None and r.changes.state == "pending"
    ]
    if not pending:
        return None
    shown = ", ".join(f"{one_line(child, 40)} ({c.summary})" for child, c in pending[:3])
    more = f", and {len(pending) - 3} more" if len(pending) > 3 else ""
    worktree = next((child for child, c in pending if c.mode != "copy"), None)
    if worktree is None:  # a copy has no history: diff and merge refuse it, discard does not
        child, copy = pending[0]
        discard = command_line(state_dir, "discard", snap.batch_id, child)
        see = f"see them in {one_line(copy.workspace)} (a copy: no diff or merge), then {discard}"
    else:
        diff = command_line(state_dir, "diff", snap.batch_id, worktree)
        see = f"see them with {diff}, then merge … --into BRANCH or discard"
    return f"changes pending: {shown}{more}; {see}"


def unrecorded_line(t: Totals, every: int | None) -> str | None:
    """The children of the batch's `every` that ended with no end in the store (`t`, its
    totals after a full disk): with them, the figures add up to every child. None if none."""
    lost = 0 if every is None else every - t.completed - t.failed - t.stopped - t.superseded
    if lost <= 0:
        return None
    noun = "child" if lost == 1 else "children"
    ended = f"{t.completed} ok, {t.failed} failed, {t.stopped} stopped"
    return f"not recorded: {lost} {noun}; with {ended}: all {every}"


def money_lines(snap: Snapshot, *, forecast: bool = True) -> list[Text]:
    """Under the summary: how many children have no price (the table's `+?`), the projected
    cost while children remain (a batch left running, or one that ended early; not with
    `forecast` off), and what attempts lost with an owner cost, when any did."""
    from flightdeck.engine.apilight import forecast as project  # here: `--help` stays fast

    out = []
    if unknown := snap.totals.cost_unknown:
        noun = "child's cost is" if unknown == 1 else "children's costs are"
        # Which routes: the one to give a `price`, or the CLI to look at (a CLI stopped
        # mid-turn never reported what the turn cost: not always a price).
        named = {
            r.route for r in snap.children if r.cost_usd is None or r.in_flight_cost_usd is None
        }
        routes = ", ".join(one_line(name, 40) for name in sorted(named))
        on = f" on {'route' if len(named) == 1 else 'routes'} {routes}" if named else ""
        out.append(
            Text(
                f"$? and +?: {unknown} {noun} not known in full{on} (no price, or calls its CLI"
                " never reported; never counted as $0)"
            )
        )
    ahead = project(snap.children)
    if forecast and ahead.remaining:
        label = forecast_label(ahead, compact=False)
        out.append(Text(f"forecast: {label} at completion, {ahead.remaining} not finished"))
    if snap.lost_cost_usd != 0:
        lost = fmt_cost(snap.lost_cost_usd)
        out.append(
            Text(f"lost attempts: {lost} (re-runs after a lost owner or worker), in the cost")
        )
    return out


def progress_label(snap: Snapshot) -> str:
    """The headless progress bar's words: what is spent, and where it is heading."""
    from flightdeck.engine.apilight import forecast

    spent, note = fmt_spent(
        snap.totals.live_cost_usd, snap.totals.cost_unknown, pending=snap.totals.pending
    )
    ahead = forecast(snap.children)
    heading = f" → {forecast_label(ahead, compact=True)}" if ahead.remaining else ""
    return f"running  {spent}{note}{heading}"


def failure_text(engine: Engine) -> str | None:
    """Why the batch failed as a whole (the store gave up, an engine thread failed), with how
    many children's ends could not be recorded; None if it did not."""
    if engine.failure is None and not engine.unrecorded:
        return None
    return engine.problem()


Ended = ChildFinished | GroupFinished


def print_lines(console: Console, finished: list[Ended], *, styled: bool) -> None:
    """The completion lines of every child (and unit) that ended since the last wake-up, in one
    write.

    A Rich print per line (measure, render, write, flush) costs more than running an instant
    child; piped output has no style to render, so it is written as plain text.
    """
    if styled:
        console.print(Text("\n").join(completion_line(e) for e in finished))
        return
    out = console.file
    try:
        out.write("".join([completion_text(e) + "\n" for e in finished]))
        out.flush()
    except BrokenPipeError:  # `flightdeck run … | head`: leave quietly, as Rich's prints do
        console.on_broken_pipe()


def completion_parts(event: ChildFinished) -> list[tuple[str, str]]:
    """The pieces of a completion line with their Rich styles ("" for none).

    `✓ [3/24] review-pr-104  api=4 tools=3  1.8k tok  $0.0042  2.3s`, reason on failure.
    """
    row = event.row
    glyph, style = GLYPHS[row.status]
    a = row.activity
    retries = f" retries={a.retries}" if a.retries else ""
    duration = row.duration_s
    parts = [
        (glyph, style),
        (f" [{event.done:>{len(str(event.total))}}/{event.total}] ", ""),
        (row.id, "bold"),
        # An operator's retry counts the child done again: its attempt tells the lines apart.
        (f" (attempt {row.attempt})" if row.attempt > 1 else "", ""),
        (
            f"  api={a.api_calls} tools={a.tool_calls}{retries}"
            f"  {'?' if row.tokens_unknown else fmt_tokens(row.usage.total)} tok"
            f"  {fmt_row_cost(row)}" + (f"  {duration:.1f}s" if duration is not None else "  -"),
            "",
        ),
    ]
    if row.status is not ChildStatus.COMPLETED:
        reason = row.status.value + (f": {row.error}" if row.error else "")
        parts.append((f"  {one_line(reason, 160)}", "red"))
    return parts


UNIT_STYLES = {
    UnitStatus.COMPLETED: "green",
    UnitStatus.PARTIAL: "yellow",
    UnitStatus.STOPPED: "yellow",  # as a stopped child's glyph
    UnitStatus.FAILED: "red",
}


def unit_parts(unit: GroupFinished) -> list[tuple[str, str]]:
    """A unit's line: `▣ group security  partial: 2/3 completed  5.1k tok  $0.0123  6.3s`,
    then each member's glyph and id, in batch order. Its members' delegates are counted in
    (`2/3 completed, 4 delegates`): their tokens and cost are the unit's too."""
    members = unit.members
    completed = sum(m.status is ChildStatus.COMPLETED for m in members)
    rows = (*members, *unit.delegates)
    # Uncounted tokens (a command whose CLI reports none) read `?`, as on each child's line.
    tokens = fmt_counted(sum(r.usage.total for r in rows), sum(r.tokens_unknown for r in rows))
    each = " ".join(f"{GLYPHS[m.status][0]}{m.id}" for m in members)
    made = len(unit.delegates)
    delegates = f", {made} delegate{'' if made == 1 else 's'}" if made else ""
    return [
        ("▣ group ", ""),
        (one_line(unit.group, 60), "bold"),
        (f"  {unit.status.value}", UNIT_STYLES[unit.status]),
        (
            f": {completed}/{len(members)} completed{delegates}  {tokens} tok"
            f"  {fmt_spent_compact(unit.cost_known_usd, unit.cost_usd is None)}"
            f"  {unit.duration_s:.1f}s",
            "",
        ),
        (f"  {one_line(each, 160)}", "dim"),
    ]


def completion_line(event: Ended) -> Text:
    """A completion line, styled for a terminal."""
    return Text.assemble(*_parts(event))


def completion_text(event: Ended) -> str:
    """A completion line as plain text, for piped output."""
    return "".join([text for text, _ in _parts(event)])


def _parts(event: Ended) -> list[tuple[str, str]]:
    if isinstance(event, GroupFinished):
        return unit_parts(event)
    return completion_parts(event)


# Rich's SIMPLE_HEAD (a rule under the header), with a rule above the routes' total too: its
# own section line is blank, a line of spaces in a file.
HEAD_AND_TOTAL = box.Box("    \n    \n ── \n    \n ── \n    \n    \n    \n")


def summary_table(snap: Snapshot) -> Table:
    """The batch's totals, after one line per route when it used more than one.

    Readable at 80 columns: no vertical rules, short headers, and figures never cut (a route's
    name is cut before any figure is)."""
    from flightdeck.engine.apilight import route_totals

    routes = route_totals(snap.children)
    by_route = len(routes) > 1
    rows: list[list[str]] = []
    if by_route:
        for r in routes:
            members = [c for c in snap.children if c.route == r.route]
            rows.append([one_line(r.route, 40), *_summary_cells(r.totals, members)])
    rows.append([*(["total"] if by_route else []), *_summary_cells(snap.totals, snap.children)])
    caption = superseded_caption(snap.totals.superseded, snap.children)
    # Every string a Table is given is read as Rich markup: the title, caption and cells are
    # Text (a route's name, an id, read from the store: `[link=…]` would be a hyperlink).
    table = Table(
        title=Text(f"batch {one_line(snap.batch_id)} — {snap.status.value}", "table.title"),
        title_justify="left",
        caption=None if caption is None else Text(caption, "table.caption"),
        caption_justify="left",
        box=HEAD_AND_TOTAL,
        show_edge=False,
        pad_edge=False,
        padding=(0, 0, 0, 1),  # two spaces between columns
    )
    if by_route:
        table.add_column("route", min_width=5, overflow="ellipsis")  # the one that shrinks
    # "cache saved": what cache reads saved against the uncached input price.
    for i, col in enumerate(SUMMARY_COLUMNS, start=1 if by_route else 0):
        widest = max(len(text) for text in (*col.split("\n"), *(row[i] for row in rows)))
        table.add_column(col, justify="right", no_wrap=True, min_width=widest)
    for n, row in enumerate(rows):
        if by_route and n == len(rows) - 1:
            table.add_section()
        table.add_row(*map(Text, row))
    return table


# Two-line headers and "ok" (the meter's word for completed): the table fits 80 columns.
SUMMARY_COLUMNS = (
    "children",
    "ok",
    "failed",
    "stopped",
    "tokens\nin",
    "tokens\nout",
    "cached",  # cache reads and writes, as the meter says: in, out and cached add up
    "cost",
    "cache\nsaved",
)


def superseded_caption(n: int, rows: Sequence[ChildRow]) -> str | None:
    """Under the table, the children counted in none of ok, failed and stopped: delegates of
    an earlier attempt of their parent (it ran again since), kept as history."""
    if not n:
        return None
    ids = [one_line(r.id, 40) for r in rows if r.superseded and r.status.terminal][:3]
    more = ", …" if n > len(ids) else ""
    what = "delegate" if n == 1 else "delegates"
    return (
        f"superseded: {n} {what} of an earlier attempt of their parent ({', '.join(ids)}{more}):"
        " history, not counted as ok, failed or stopped"
    )


def _summary_cells(t: Totals, rows: Sequence[ChildRow]) -> list[str]:
    u = t.usage
    # A command whose CLI reports no usage: its tokens are unknown, as on its own line.
    unknown = sum(1 for row in rows if row.tokens_unknown)
    return [
        str(t.children),
        str(t.completed),
        str(t.failed),
        str(t.stopped),
        fmt_counted(u.input_tokens, unknown),
        fmt_counted(u.output_tokens, unknown),
        fmt_counted(u.cache_read_tokens + u.cache_write_tokens, unknown),
        fmt_spent_compact(t.cost_usd, t.cost_unknown),
        # "+?" beside a known saving, "$?" alone: as the report says it
        fmt_spent_compact(t.cache_saved_usd, t.saved_unknown),
    ]
