"""Every operator command as one frozen value: checked, recorded and read back one way.

A command is what an operator asks of a batch (a key in the TUI, a `flightdeck` verb, a script):
steer, stop, stop all, pause, continue, pause or continue admission, change the live limits,
nudge a looping child, retry a child that ended, accept or discard what a child changed. The
same value goes every way: `Engine.send(command)` in-process; a client of an owner in another
process records it in the store's requests table (`encode`), and the owner reads it back
(`decode`) and sends it through the same `Engine` path. Whoever sends it checks it first
(`Command.check`, against what it knows of the batch: `Context`), so a command from a client
meets the same checks as one from this process, and the owner checks it again before applying
it. The coordinator applies each with one `match` (control/controls.py).

Adding a command: its value here (a frozen dataclass with a `kind`, its fields of the types
`_READERS` knows), its handler in that `match`, a key binding and a CLI verb.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from flightdeck.engine.errors import CommandError, check_asking, check_known
from flightdeck.engine.inputs.messages import expected, kind
from flightdeck.engine.inputs.text import blank, too_long, unicode_problem
from flightdeck.engine.model import ChildRow, ChildStatus, Limits
from flightdeck.engine.model.livelimits import (
    ROUTE_FIELDS,
    LimitError,
    changed,
    describe,
    parse_count,
    parse_money,
)
from flightdeck.engine.review.git import branch_text_problem
from flightdeck.engine.sanitize import one_line

__all__ = [
    "KINDS",
    "ROUTE_FIELDS",
    "Accept",
    "Answer",
    "Command",
    "CommandError",
    "Context",
    "Continue",
    "ContinueAdmission",
    "Discard",
    "Dismiss",
    "LimitError",
    "Nudge",
    "Pause",
    "PauseAdmission",
    "Retry",
    "SetLimits",
    "Steer",
    "Stop",
    "StopAll",
    "changed",
    "decode",
    "describe",
    "encode",
    "flag",
    "parse_count",
    "parse_money",
]


@dataclass(frozen=True, slots=True)
class Context:
    """What a command is checked against: the batch as its sender knows it (what only some
    checks need is looked up when one does)."""

    batch_id: str
    known: Container[str]  # the ids of the batch's children (those an earlier owner ran too)
    # `[engine] max_task_chars` (None: not known here, not checked)
    max_chars: Callable[[], int | None] = lambda: None
    # the live limits (None: not known here, a change is checked by the owner)
    limits: Callable[[], Limits | None] = lambda: None
    # the ids of the children asking the operator now (None: not known here)
    asking: Callable[[], Container[str] | None] = lambda: None
    # the children's rows by id (None: not known here, checked by the owner)
    rows: Callable[[], Mapping[str, ChildRow] | None] = lambda: None


class Command:
    """Base of the operator's commands; each is a frozen dataclass below."""

    __slots__ = ()
    kind: ClassVar[str]  # its name in the requests table and in its JSON
    # One steer receipt per named child, numbered by the sender (so `send` can return them).
    receipted: ClassVar[bool] = False
    # The sender is told something back (receipts, the new limits): after `Engine.close()`,
    # when nothing would ever settle it, sending it is an error rather than a no-op.
    answered: ClassVar[bool] = False
    # Sent in-process, `Engine.send` returns once it is applied, or raises why it was not: it
    # decides from what the batch is then (a retry, a merge), not what its sender saw.
    waits: ClassVar[bool] = False

    @property
    def targets(self) -> tuple[str, ...]:
        """The children it names (none for a command on the whole batch)."""
        ids: tuple[str, ...] = getattr(self, "child_ids", ())
        return ids

    @property
    def title(self) -> str:
        """Its name in words, for messages: "stop all"."""
        return self.kind.replace("_", " ")

    def check(self, ctx: Context) -> None:
        """CommandError (nothing applied) if it cannot be applied to the batch `ctx` describes."""


@dataclass(frozen=True, slots=True)
class Steer(Command):
    """An operator message for each child: at its next turn, or interrupting it (`now`)."""

    kind: ClassVar[str] = "steer"
    receipted: ClassVar[bool] = True
    answered: ClassVar[bool] = True
    child_ids: tuple[str, ...]
    message: str
    now: bool = False

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)
        _check_message("steer message", self.message, ctx)


@dataclass(frozen=True, slots=True)
class Stop(Command):
    """Stop these children (and their delegates); queued ones never start."""

    kind: ClassVar[str] = "stop"
    child_ids: tuple[str, ...]

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)


@dataclass(frozen=True, slots=True)
class StopAll(Command):
    """Stop every child that has not ended (and a scheduled batch's schedules)."""

    kind: ClassVar[str] = "stop_all"


@dataclass(frozen=True, slots=True)
class Pause(Command):
    """Pause these children: a queued one never starts until continued, a running one holds
    at its next turn boundary and gives back its slot."""

    kind: ClassVar[str] = "pause"
    child_ids: tuple[str, ...]

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)


@dataclass(frozen=True, slots=True)
class Continue(Command):
    """Continue these paused children, ahead of new work, their context intact."""

    kind: ClassVar[str] = "continue"
    child_ids: tuple[str, ...]

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)


@dataclass(frozen=True, slots=True)
class PauseAdmission(Command):
    """No child starts until admission is continued; the running go on."""

    kind: ClassVar[str] = "pause_admission"


@dataclass(frozen=True, slots=True)
class ContinueAdmission(Command):
    """Children start again as slots free up."""

    kind: ClassVar[str] = "continue_admission"


@dataclass(frozen=True, slots=True)
class SetLimits(Command):
    """A change to the live limits (see model/livelimits.py for its form), applied at once."""

    kind: ClassVar[str] = "limits"
    answered: ClassVar[bool] = True
    change: Mapping[str, Any]

    def check(self, ctx: Context) -> None:
        limits = ctx.limits()
        if limits is not None:
            changed(limits, self.change)  # LimitError, a CommandError naming the field
        elif not self.change:
            raise LimitError("limits", "nothing to change")


@dataclass(frozen=True, slots=True)
class Nudge(Command):
    """The canned loop steer (`[steer.canned] loop`, its evidence filled in) to each of these
    children flagged as looping, at its next turn; the others are left alone."""

    kind: ClassVar[str] = "nudge"
    child_ids: tuple[str, ...]

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)


KINDS: dict[str, type[Command]] = {
    c.kind: c
    for c in (
        Steer,
        Stop,
        StopAll,
        Pause,
        Continue,
        PauseAdmission,
        ContinueAdmission,
        SetLimits,
        Nudge,
    )
}


def _check_message(what: str, message: str, ctx: Context) -> None:
    """An operator's message to a child: not empty, valid Unicode, no longer than a goal."""
    if blank(message):
        raise CommandError(f"{what} is empty", "message")
    problem = unicode_problem(message)
    if problem:  # it would fail the child's request and the store's write, far from here
        raise CommandError(f"{what}: {problem}", "message")
    # It joins the child's prompt as a goal does: the same bound.
    limit = ctx.max_chars()
    if limit is not None and len(message) > limit:
        raise CommandError(f"{what}: {too_long(len(message), limit)}", "message")


def _check_ids(ids: tuple[str, ...], ctx: Context) -> None:
    """At least one id, each a child of the batch: a mistyped id would otherwise be skipped in
    silence, and the operator wait for a command that was never going to happen."""
    if not ids:
        raise CommandError("name at least one child", "child_ids")
    check_known(ids, ctx.known, ctx.batch_id)


# --- recorded and read back -------------------------------------------------------------------


def encode(command: Command) -> tuple[str, str]:
    """The command as the requests table keeps it: its kind, and its fields as JSON."""
    body = {f.name: getattr(command, f.name) for f in dataclasses.fields(command)}  # type: ignore[arg-type]
    return command.kind, json.dumps(body, ensure_ascii=False, default=str)


def decode(kind: str, body: str | Mapping[str, Any] | None) -> Command:
    """The command `encode` made (or a client wrote by hand); CommandError saying what is wrong
    with it (a kind this flightdeck does not know, bad JSON, a field missing or of a wrong
    type), so the owner refuses it with that reason."""
    cls = KINDS.get(kind)
    if cls is None:
        raise CommandError(f"this flightdeck cannot apply a {one_line(kind, 40)!r} command", "kind")
    try:
        data = json.loads(body) if isinstance(body, str) else dict(body or {})
    except ValueError as exc:
        raise CommandError(f"{kind}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CommandError(f"{kind}: expected a JSON object")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if data.get(f.name) is None:
            if f.default is dataclasses.MISSING:
                raise CommandError(f"{kind} {f.name}: missing", f.name)
            continue
        values[f.name] = _READERS[str(f.type)](f"{kind} {f.name}", data[f.name])
    return cls(**values)


def child_ids_of(value: object, where: str = "child_ids") -> tuple[str, ...]:
    """Child ids given as a list (or any iterable) of strings; CommandError saying the type it
    got otherwise: a table's keys, or a string's letters, are no list of ids ({"a": 1} read as
    "no child with id 'a'")."""
    field = where.split()[-1]
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise CommandError(f"{where}: {expected('a list of child ids', value)}", field)
    ids = tuple(value)
    for item in ids:
        if not isinstance(item, str):
            raise CommandError(f"{where}: expected child ids (text), got {kind(item)} in it", field)
    return tuple(dict.fromkeys(ids))  # named twice, taken once: `steer c1 c1` steered twice


def _text(where: str, value: object) -> str:
    if not isinstance(value, str):
        raise CommandError(f"{where}: expected text", where.split()[-1])
    return value


def flag(where: str, value: object) -> bool:
    """A command's flag (`where`: "steer now"); CommandError naming it for what is none: an
    integer too, as a config or task file's flag (a `"now": 7` was read as true)."""
    if not isinstance(value, bool):
        raise CommandError(f"{where}: {expected('true or false', value)}", where.split()[-1])
    return value


def _mapping(where: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CommandError(f"{where}: {expected('a table', value)}", where.split()[-1])
    return value


# How each field type is read back from JSON (the dataclass fields' annotations, as text).
_READERS: dict[str, Callable[[str, object], Any]] = {
    "tuple[str, ...]": lambda where, value: child_ids_of(value, where),
    "str": _text,
    "bool": flag,
    "Mapping[str, Any]": _mapping,
}


# --- a child that ended: run again, its changes accepted or discarded -------------------------


@dataclass(frozen=True, slots=True)
class Retry(Command):
    """Run each of these children again (failed, stopped, timed out, stalled or unknown) under
    a new attempt of its id: from its goal, or (`resume`) working on from where it stopped. The
    earlier attempts' transcript, usage and cost are kept; a batch that ended is reopened."""

    kind: ClassVar[str] = "retry"
    answered: ClassVar[bool] = True
    waits: ClassVar[bool] = True
    child_ids: tuple[str, ...]
    resume: bool = False

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)
        rows = ctx.rows()
        for row in _rows_of(self.child_ids, rows):
            if row.status.live:
                raise CommandError(f"{row.id} has not ended ({row.status.value}): nothing to retry")
            if row.status is ChildStatus.COMPLETED:
                raise CommandError(f"{row.id} completed: nothing to retry")
            if row.parent is not None:
                raise CommandError(f"{row.id} is a delegate: it runs again with its parent")
            if not self.resume and row.changes is not None and row.changes.pending:
                raise CommandError(
                    f"{row.id} has changes not yet accepted or discarded "
                    f"({row.changes.summary}): accept or discard them first, or retry it "
                    "--continue to work on in them"
                )


@dataclass(frozen=True, slots=True)
class Accept(Command):
    """Commit each child's changes on a branch of its own (flightdeck/BATCH/CHILD) and merge
    them, in order, into branch `into`: all of them, or (at the first conflict) none."""

    kind: ClassVar[str] = "accept"
    answered: ClassVar[bool] = True
    waits: ClassVar[bool] = True
    child_ids: tuple[str, ...]
    into: str

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)
        if (problem := branch_text_problem(self.into)) is not None:
            raise CommandError(problem, "into")
        for row in _rows_of(self.child_ids, ctx.rows()):
            _check_pending(row, "accept")
            if row.changes is not None and row.changes.mode != "worktree":
                raise CommandError(
                    f"{row.id} worked in a copy, which has no history to merge: "
                    'accept needs workspace = "worktree" (discard works on a copy)'
                )


@dataclass(frozen=True, slots=True)
class Discard(Command):
    """Remove each child's worktree (or copy) and its branch: its changes are dropped."""

    kind: ClassVar[str] = "discard"
    answered: ClassVar[bool] = True
    waits: ClassVar[bool] = True
    child_ids: tuple[str, ...]

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)
        for row in _rows_of(self.child_ids, ctx.rows()):
            _check_pending(row, "discard")


def _rows_of(ids: tuple[str, ...], rows: Mapping[str, ChildRow] | None) -> list[ChildRow]:
    """The rows of these children, where the sender knows them."""
    return [] if rows is None else [rows[i] for i in dict.fromkeys(ids) if i in rows]


def _check_pending(row: ChildRow, verb: str) -> None:
    """The child has ended and left changes nobody has decided on yet."""
    if row.status.live:
        raise CommandError(f"{row.id} has not ended ({row.status.value}): {verb} it once it has")
    changes = row.changes
    if changes is None:
        raise CommandError(f"{row.id} changed no file in a workspace of its own: nothing to {verb}")
    if changes.state == "accepted":
        raise CommandError(f"{row.id}'s changes were accepted already (into {changes.into})")
    if changes.state == "discarded":
        raise CommandError(f"{row.id}'s changes were discarded already")


# --- the "needs you" queue (engine/triage/needs.py) -------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer(Command):
    """The operator's answer to each of these children's question (`ask_operator`): the tool's
    result, and the child goes on."""

    kind: ClassVar[str] = "answer"
    child_ids: tuple[str, ...]
    message: str

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)
        _check_message("answer", self.message, ctx)
        asking = ctx.asking()
        if asking is not None:
            check_asking(self.child_ids, asking)


@dataclass(frozen=True, slots=True)
class Dismiss(Command):
    """Clear these children's entries in the "needs you" queue, leaving the children as they
    are (an entry comes back if something new happens to one)."""

    kind: ClassVar[str] = "dismiss"
    child_ids: tuple[str, ...]

    def check(self, ctx: Context) -> None:
        _check_ids(self.child_ids, ctx)


KINDS.update((c.kind, c) for c in (Retry, Accept, Discard, Answer, Dismiss))
