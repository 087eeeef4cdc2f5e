"""The query language that picks children: the TUI's filter (`/`) and `--where` on the command
line. `status:running route:claude cost>0.50 idle>5m error:"rate limit" words`, terms ANDed."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.triage.needs import need_of
from flightdeck.engine.triage.outliers import Medians

STATUS_ALIASES: dict[str, frozenset[str]] = {
    "live": frozenset({"queued", "gated", "running", "paused"}),
    "done": frozenset(s.value for s in ChildStatus if s.terminal),
    "attention": frozenset({"failed", "stalled", "timed_out", "retrying"}),
    "retrying": frozenset({"retrying"}),
    # A child whose pause is pending is paused as far as the operator is concerned: a continue
    # of `status:paused` must lift its pause too (`ChildRow.pausing`).
    "paused": frozenset({"paused", "pausing"}),
    "pausing": frozenset({"pausing"}),
}
_STATUS_VALUES = frozenset(s.value for s in ChildStatus)
_WAITING = frozenset({ChildStatus.QUEUED, ChildStatus.GATED})

# Text fields (`name:value`, a value any of a comma list); `s` is short for status.
TEXT_FIELDS = ("status", "route", "group", "tool", "error", "is")
# Numeric fields compared with > < >= <=, and the units each value may carry.
_TOKEN_UNITS = {"": 1, "k": 1_000, "m": 1_000_000}
_IDLE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}
NUMERIC_FIELDS = ("cost", "tokens", "idle", "depth")
# `name:value` or `name>value`: a word, then `:` or an operator (`>=` before `>`).
_TERM = re.compile(r"^([A-Za-z_]+)(:|>=|<=|>|<)(.*)$", re.DOTALL)
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


class QueryError(ValueError):
    """A query that does not parse; the message names the wrong term."""


def is_retrying(row: ChildRow) -> bool:
    """A running child waiting out a 429 or another retryable error."""
    return row.status is ChildStatus.RUNNING and row.activity.retrying


def idle_s(row: ChildRow, now: float) -> float | None:
    """Seconds since the child last did something (or ended); None while it waits to start."""
    if row.status in _WAITING:
        return None
    ts = row.finished_ts if row.status.terminal else row.activity.last_activity_ts
    ts = ts if ts is not None else row.started_ts
    return None if ts is None else max(0.0, now - ts)


@dataclass(frozen=True, slots=True)
class Comparison:
    """`cost>0.5`: a numeric field, an operator, a value in the field's base unit."""

    field: str
    op: str
    value: float

    def holds(self, row: ChildRow, now: float) -> bool:
        have: float | None
        if self.field == "cost":
            # Partly unknown, it costs at least its known part: enough for `>`, never for `<`.
            cost = row.live_known_usd if self.op[0] == ">" else row.live_cost_usd
            have = None if cost is None else float(cost)  # an unknown price matches nothing
        elif self.field == "tokens":
            have = row.live_usage.total
        elif self.field == "idle":
            have = idle_s(row, now)
        else:
            have = row.depth
        return have is not None and _OPS[self.op](have, self.value)


@dataclass(frozen=True, slots=True)
class RowFilter:
    """A parsed query: words and phrases (all must appear, case-insensitive), field terms and
    comparisons, every one of them ANDed."""

    query: str = ""
    words: tuple[str, ...] = ()
    statuses: frozenset[str] | None = None
    routes: frozenset[str] | None = None
    groups: frozenset[str] | None = None
    tools: frozenset[str] | None = None
    errors: tuple[str, ...] = ()  # substrings of the error, each must appear
    comparisons: tuple[Comparison, ...] = ()
    tagged_only: bool = False
    looping_only: bool = False  # `is:looping`: flagged as looping (ChildRow.loop)
    outliers_only: bool = False  # is:outlier (see engine/triage/outliers.py)
    needs_you_only: bool = False  # is:needs-you: an entry of the "needs you" queue (needs.py)

    @property
    def active(self) -> bool:
        return self != RowFilter(query=self.query)

    @property
    def timed(self) -> bool:
        """Whether a row's match can change without the row changing (idle>…, or is:outlier as
        the batch's medians move): re-checked every poll."""
        return self.outliers_only or any(c.field == "idle" for c in self.comparisons)

    def matches(
        self,
        row: ChildRow,
        tagged: bool = False,
        now: float = 0.0,
        medians: Medians | None = None,
    ) -> bool:
        """Whether every term holds for `row`; `medians` (the batch's, this poll's) answer
        is:outlier, which without them keeps nothing."""
        if self.tagged_only and not tagged:
            return False
        if self.looping_only and row.loop is None:
            return False
        if self.outliers_only and (medians is None or medians.outlier(row) is None):
            return False
        if self.needs_you_only and need_of(row) is None:
            return False
        if self.statuses is not None and (
            row.status.value not in self.statuses
            and not ("retrying" in self.statuses and is_retrying(row))
            and not ("pausing" in self.statuses and row.pausing)
        ):
            return False
        if self.routes is not None and row.route.lower() not in self.routes:
            return False
        if self.groups is not None and (row.group or "").lower() not in self.groups:
            return False
        if self.tools is not None and (row.activity.current_tool or "").lower() not in self.tools:
            return False
        if self.errors:
            error = (row.error or "").lower()
            if not error or not all(e in error for e in self.errors):
                return False
        for comparison in self.comparisons:
            if not comparison.holds(row, now):
                return False
        if self.words:
            hay = " ".join(
                (row.id, row.goal, row.group or "", row.activity.text, row.error or "", row.model)
            ).lower()
            return all(word in hay for word in self.words)
        return True


def split_terms(query: str) -> list[tuple[str, bool]]:
    """The query's terms, split on spaces outside double quotes (which are dropped), each with
    whether it opened with a quote: such a term is text, never a field (`"a:b"` is two words'
    worth of text), while `error:"rate limit"` is a field with a quoted value."""
    terms: list[tuple[str, bool]] = []
    term: list[str] = []
    lead = in_quote = started = False
    for ch in query:
        if ch == '"':
            if not started:
                lead = True
            in_quote = not in_quote
            started = True
        elif ch.isspace() and not in_quote:
            if started:
                terms.append(("".join(term), lead))
            term, lead, started = [], False, False
        else:
            term.append(ch)
            started = True
    if in_quote:
        raise QueryError(f"unclosed quote in {query.strip()!r}")
    if started:
        terms.append(("".join(term), lead))
    return terms


def parse_filter(query: str, *, tags: bool = True) -> RowFilter:
    """Parse a query; raises QueryError naming the wrong term. With `tags` False (the command
    line, where nothing is tagged) `is:tagged` is an error."""
    words: list[str] = []
    sets: dict[str, set[str]] = {}
    errors: list[str] = []
    comparisons: list[Comparison] = []
    tagged_only = looping_only = outliers_only = needs_you = False
    for term, text in split_terms(query):
        found = None if text else _TERM.match(term)
        if found is None:
            if term:
                words.append(term.lower())
            continue
        name, op, value = found.group(1).lower(), found.group(2), found.group(3)
        name = "status" if name == "s" else name
        if name not in TEXT_FIELDS and name not in NUMERIC_FIELDS:
            raise QueryError(f"{term!r}: unknown field {name!r} ({_FIELDS_HINT})")
        if op != ":":
            comparisons.append(_comparison(term, name, op, value))
            continue
        if name in NUMERIC_FIELDS:
            raise QueryError(f"{term!r}: {name} is compared, e.g. {name}>{_EXAMPLE[name]}")
        value = value.lower()
        if not value:
            raise QueryError(f"{term!r}: {name} needs a value, e.g. {name}:{_EXAMPLE[name]}")
        if name == "is":
            if value == "looping":
                looping_only = True
            elif value == "outlier":
                outliers_only = True
            elif value == "needs-you":
                needs_you = True
            elif value == "tagged" and tags:
                tagged_only = True
            else:
                why = "one of is:tagged, is:looping, is:outlier, is:needs-you"
                if not tags:
                    why = "here only is:looping, is:outlier, is:needs-you"
                    if value == "tagged":
                        why = "nothing is tagged here (is:looping, is:outlier, is:needs-you work)"
                raise QueryError(f"{term!r}: {why}")
        elif name == "error":
            errors.append(value)
        elif name == "status":
            statuses = sets.setdefault("status", set())
            for item in value.split(","):
                statuses |= _statuses(term, item)
        else:
            sets.setdefault(name, set()).update(v for v in value.split(",") if v)
    return RowFilter(
        query=query.strip(),
        words=tuple(words),
        statuses=_frozen(sets, "status"),
        routes=_frozen(sets, "route"),
        groups=_frozen(sets, "group"),
        tools=_frozen(sets, "tool"),
        errors=tuple(errors),
        comparisons=tuple(comparisons),
        tagged_only=tagged_only,
        looping_only=looping_only,
        outliers_only=outliers_only,
        needs_you_only=needs_you,
    )


_EXAMPLE = {
    "cost": "0.50",
    "tokens": "20k",
    "idle": "5m",
    "depth": "0",
    "status": "running",
    "route": "sim",
    "group": "security",
    "tool": "read_file",
    "error": '"rate limit"',
    "is": "tagged",
}
_FIELDS_HINT = "fields: " + ", ".join((*TEXT_FIELDS, *NUMERIC_FIELDS)) + '; quote text: "a:b"'


def _frozen(sets: dict[str, set[str]], name: str) -> frozenset[str] | None:
    found = sets.get(name)
    return None if found is None else frozenset(found)


def _comparison(raw: str, name: str, op: str, text: str) -> Comparison:
    if name not in NUMERIC_FIELDS:
        raise QueryError(f"{raw!r}: {name} is not compared, e.g. {name}:{_EXAMPLE[name]}")
    value = text.strip().lower()
    if name == "cost":
        value = value.removeprefix("$")
        units = {"": 1}
    elif name == "tokens":
        units = _TOKEN_UNITS
    elif name == "idle":
        units = _IDLE_UNITS
    else:
        units = {"": 1}
    unit = value[-1:] if value[-1:].isalpha() else ""
    number = value[: len(value) - len(unit)]
    try:
        amount = Decimal(number)
    except InvalidOperation:
        amount = Decimal("NaN")
    # The number first: `cost>high` lacks one, rather than having a unit 'h'.
    if not number or not amount.is_finite() or amount < 0:
        raise QueryError(f"{raw!r}: {name} needs a number, e.g. {name}>{_EXAMPLE[name]}")
    if unit not in units:
        allowed = ", ".join(u for u in units if u) or "none"
        raise QueryError(f"{raw!r}: unknown unit {unit!r} for {name} (units: {allowed})")
    if name == "depth" and amount != amount.to_integral_value():
        raise QueryError(f"{raw!r}: depth is a whole number")
    return Comparison(name, op, float(amount * units[unit]))


def _statuses(raw: str, item: str) -> frozenset[str]:
    if item in STATUS_ALIASES:
        return STATUS_ALIASES[item]
    if item in _STATUS_VALUES:
        return frozenset({item})
    known = ", ".join(dict.fromkeys([*(s.value for s in ChildStatus), *STATUS_ALIASES]))
    raise QueryError(f"{raw!r}: unknown status {item!r} (one of: {known})")
