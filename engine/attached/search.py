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
from flightdeck.engine.records.search import (
    Pattern,
    PatternError,
    PatternTooSlow,
    compile_pattern,
    grep,
)
from flightdeck.engine.sanitize import one_line, sanitize

__all__ = [
    "Around",
    "Found",
    "Pattern",
    "PatternError",
    "PatternTooSlow",
    "compile_pattern",
    "lines_around",
    "search",
]


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
    child's in file order; `first_only`: each child's first match only. PatternTooSlow (naming
    the child) for a regex that ran past its budget on a line."""
    by_folder: dict[Path, list[ChildRow]] = {}
    for row in rows:
        by_folder.setdefault(Path(row.transcript).parent, []).append(row)
    # One folder for a batch; rows from several are searched folder by folder, in order.
    for folder, members in by_folder.items():
        ids = {Path(r.transcript).name: r.id for r in members}
        try:
            for hit in grep(folder, pattern, names=list(ids), first_only=first_only):
                parsed = parse(hit.line)
                stamp, role, text = (
                    (parsed.stamp, parsed.role, parsed.text) if parsed else ("", "", hit.line)
                )
                path = folder / hit.name
                yield Found(ids[hit.name], hit.offset, stamp, role, text, hit.line, path)
        except PatternTooSlow as exc:  # said by the child, not by its file's name
            child = ids.get(exc.where)
            where = f"{one_line(child, 60)}'s transcript" if child else exc.where
            raise PatternTooSlow(where) from None


@dataclass(frozen=True, slots=True)
class Around:
    """A window of a transcript's lines around one line: the lines, which of them is the one
    asked for, and whether lines before or after the window were left out."""

    lines: tuple[str, ...]
    at: int
    cut_before: bool
    cut_after: bool


def lines_around(path: Path, offset: int, *, window: int = 512 * 1024) -> Around:
    """The lines of `path` within about `window` bytes either side of the line that starts at
    `offset` (sanitized)."""
    begin = max(0, offset - window)
    with path.open("rb") as fh:
        fh.seek(begin)
        data = fh.read(offset - begin + window)
        more = bool(fh.read(1))
    before, after = data[: offset - begin], data[offset - begin :]
    if begin > 0:  # the first line was read in part: the window starts after it
        before = before[before.find(b"\n") + 1 :] if b"\n" in before else b""
    if more and b"\n" in after:  # and the last, likewise
        after = after[: after.rfind(b"\n") + 1]
    head = _lines(before)
    return Around(tuple(head + _lines(after)), len(head), begin > 0, more)


def _lines(data: bytes) -> list[str]:
    text = data.decode("utf-8", "replace").removesuffix("\n")
    return [sanitize(line) for line in text.split("\n")] if text else []
