"""Search every transcript of a batch, for `flightdeck grep` and the TUI's search (`F`).

The children's rows say which file is whose and in what order (batch order); the search itself
is records/search.py's: the batch's index, and the files for what it has not reached yet. Only
reads: the owner's transcript writer keeps the index.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.model import ChildRow
from flightdeck.engine.records.lines import parse
from flightdeck.engine.records.search import Pattern, PatternError, compile_pattern, grep

__all__ = ["Found", "Pattern", "PatternError", "compile_pattern", "search"]


@dataclass(frozen=True, slots=True)
class Found:
    """One matching line of a child's transcript."""

    child_id: str
    offset: int  # its byte offset in the transcript (where the TUI opens it)
    stamp: str  # HH:MM:SS.mmm, as the line has it ("" for a line of another form)
    role: str
    text: str
    line: str  # the whole line, as written (sanitized)
    path: Path


def search(
    rows: Sequence[ChildRow], pattern: Pattern, *, first_only: bool = False
) -> Iterator[Found]:
    """The matching lines of these children's transcripts, in the order of `rows`, each
    child's in file order; `first_only`: each child's first match only."""
    by_folder: dict[Path, list[ChildRow]] = {}
    for row in rows:
        by_folder.setdefault(Path(row.transcript).parent, []).append(row)
    # One folder for a batch; rows from several are searched folder by folder, in order.
    for folder, members in by_folder.items():
        ids = {Path(r.transcript).name: r.id for r in members}
        for hit in grep(folder, pattern, names=list(ids), first_only=first_only):
            parsed = parse(hit.line)
            stamp, role, text = (
                (parsed.stamp, parsed.role, parsed.text) if parsed else ("", "", hit.line)
            )
            yield Found(ids[hit.name], hit.offset, stamp, role, text, hit.line, folder / hit.name)
