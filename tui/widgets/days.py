"""Where the day changes in a transcript, whose lines carry only `HH:MM:SS.mmm`."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from itertools import pairwise

from flightdeck.engine.apilight import parse

# A stamp this much earlier than the line before it means midnight passed; smaller steps back
# are a daylight-saving change (an hour at most), not a new day.
_ROLLOVER_S = 2 * 3600
_ONE_DAY = timedelta(days=1)
# Filesystems that keep coarse modification times may round one down below the last stamp.
_MTIME_SLACK = timedelta(seconds=2)


def _clock(stamp: str) -> time:
    return time.fromisoformat(stamp)


def _seconds(stamp: str) -> float:
    hours, minutes, seconds = stamp.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def rolled_over(before: str, after: str) -> bool:
    """Whether midnight passed between two consecutive lines' stamps."""
    return _seconds(before) - _seconds(after) > _ROLLOVER_S


def day_of_last(stamp: str, mtime: float) -> date:
    """The day of a file's last line: the latest day on which `stamp` is not after `mtime`."""
    modified = datetime.fromtimestamp(mtime)  # local time, as the stamps are
    at = datetime.combine(modified.date(), _clock(stamp))
    return at.date() - _ONE_DAY if at > modified + _MTIME_SLACK else at.date()


def date_line(day: date) -> str:
    """The separator shown before the first line of a new day."""
    return f"── {day.isoformat()} {day:%A} ──"


class Days:
    """Follows one transcript's lines in order and inserts a date line where the day changes.

    The date comes from the file's modification time, read with the lines: the last line read
    was written on or before it. Counting back from there also dates a file whose start was
    cut, and a batch started days earlier, where the batch's start time would not.
    """

    def __init__(self) -> None:
        self.day: date | None = None  # the day of the line stamped `stamp`; None: none seen yet
        self.stamp: str | None = None

    def add(self, lines: list[str], mtime: float) -> list[str]:
        """`lines` with a date line before each one that starts a new day."""
        parsed = [parse(line) for line in lines]
        stamps = [p.stamp for p in parsed if p is not None]
        if self.day is None and stamps:
            # The first lines: count back from the day of the last one.
            rollovers = sum(rolled_over(a, b) for a, b in pairwise(stamps))
            self.day = day_of_last(stamps[-1], mtime) - rollovers * _ONE_DAY
        out: list[str] = []
        for line, p in zip(lines, parsed, strict=True):
            if p is not None:
                if self.day is not None and self.stamp and rolled_over(self.stamp, p.stamp):
                    self.day += _ONE_DAY
                    out.append(date_line(self.day))
                self.stamp = p.stamp
            out.append(line)
        return out
