"""`flightdeck grep BATCH PATTERN`: the matching lines of a batch's transcripts, running or
ended: each with its child, its time and the line (engine/attached/search.py searches)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.usage import UsageError, check_children, state_db, unknown_batch
from rich.text import Text

if TYPE_CHECKING:
    from flightdeck.engine.attached.search import Found, Pattern

ID_WIDTH = 24  # child ids are padded to this in the output, so the lines start in one column


def cmd_grep(args: argparse.Namespace) -> ExitCode:
    """Print each matching line (`child  HH:MM:SS.mmm  role │ text`), the match in bold on a
    terminal; exit 0 when something matched, 1 when nothing did (as grep does)."""
    from flightdeck.engine.attached.search import PatternError, compile_pattern, search
    from flightdeck.engine.attached.store import StoreReader

    try:
        pattern = compile_pattern(args.pattern, regex=args.regex)
    except PatternError as exc:
        raise UsageError(None, None, "PATTERN", str(exc)) from None
    db = state_db(args.state_dir)
    with StoreReader(db) as reader:
        if reader.batch(args.batch_id) is None:
            raise unknown_batch(args.batch_id, db)
        rows = reader.children(args.batch_id, results=False)
    if args.child:
        by_id = {r.id: r for r in rows}
        check_children(args.child, by_id, args.batch_id)
        rows = [by_id[c] for c in dict.fromkeys(args.child)]
    width = min(ID_WIDTH, max((len(r.id) for r in rows), default=0))
    console = console_for()
    found = 0
    try:
        for hit in search(rows, pattern, first_only=args.first):
            found += 1
            console.print(_line(hit, pattern, width), soft_wrap=True)
            if args.max_count and found >= args.max_count:
                break
    except PatternError as exc:  # a regex that backtracks catastrophically over a line
        raise UsageError(None, None, "PATTERN", str(exc)) from None
    # Written from a child's start on: one missing was deleted, and nothing in it was searched.
    gone = [r.id for r in rows if r.started_ts is not None and not Path(r.transcript).exists()]
    if gone:
        shown = ", ".join(one_line(i, 60) for i in gone[:5]) + (", …" if len(gone) > 5 else "")
        one = len(gone) == 1
        what = "transcript is" if one else "transcripts are"
        whose = "its child" if one else "their children"
        line = f"flightdeck: {len(gone)} {what} gone (deleted since {whose} started), "
        console_for(stderr=True).print(Text(f"{line}not searched: {shown}"), soft_wrap=True)
    return ExitCode.OK if found else ExitCode.INCOMPLETE


def _line(hit: Found, pattern: Pattern, width: int) -> Text:
    """One hit as printed: the child, the time and the line's role and text, the match bold."""
    head = f"{one_line(hit.child_id, 60):<{width}}  {hit.stamp or '?':<12}  "
    out = Text(head, style="dim")
    body = f"{hit.role} │ {hit.text}" if hit.role else hit.text
    text = Text(body)  # sanitized as it was read, one line
    span = _match(hit, pattern, len(hit.role) + 3 if hit.role else 0)
    if span is not None:
        text.stylize("bold red", *span)
    return out + text


def _match(hit: Found, pattern: Pattern, start: int) -> tuple[int, int] | None:
    """Where the pattern matched in the printed body (None: not in the text, a regex that
    matched the stamp or role)."""
    if pattern.whole_line:
        line = hit.line
        cut = line.find(hit.text) if hit.text else -1
        try:
            found = pattern.find(line, 0)
        except TimeoutError:  # it matched within the budget once: printed unmarked if not again
            return None
        if found is None or cut < 0 or found[0] < cut:
            return None
        return found[0] - cut + start, found[1] - cut + start
    found = pattern.find(hit.text.lower(), 0)
    return None if found is None else (found[0] + start, found[1] + start)
