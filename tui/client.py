"""The client commands: steer, answer, stop, pause, continue and wait: each a command for a
batch's owner process (another process), sent and followed through engine/attached's `Client`;
what they print is here. Each says what it waits for, and a dead owner as soon as it is found,
with the command that runs the batch on.

The other client commands (rework.py: retry, accept, discard; limitscmd.py: limits) share its
helpers: `batch_client`, `children_said`, `say_error`, `sent` and `until_applied` (and
clienttargets.py's `where_filter`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from flightdeck.engine.attached.hints import command_line, gone, resume_hint, soft_lift
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.clienttargets import (
    able,
    delegates_said,
    unknown_names,
    waiting_said,
    where_filter,
)
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.usage import UsageError, no_children, state_db, unknown_batch
from rich.text import Text

if TYPE_CHECKING:  # imported when a command needs them: `--help` stays fast
    from flightdeck.engine.attached.client import Client, RowFilter
    from flightdeck.engine.commands import Command
    from flightdeck.engine.model import SteerReceipt

WAIT_EVERY_S = 0.2  # how often `wait` looks at the batch


def batch_client(args: argparse.Namespace) -> Client:
    """The batch's client; a usage error if the state folder has no such batch."""
    from flightdeck.engine.attached.client import Client

    db = state_db(args.state_dir)
    client = Client(db, args.batch_id)
    if client.info() is None:  # a command naming children may have been given one first
        more = hasattr(args, "child_ids")  # or logs and diff, their two ids swapped
        verb = args.command if more or hasattr(args, "child_id") else None
        raise unknown_batch(args.batch_id, db, verb, more=more)
    return client


def sent(client: Client, command: Command) -> int:
    """The command recorded, or why not as a usage error (nothing written); but to a stop,
    pause or continue a batch that has ended is no error: BatchEnded (`sent_to_live`)."""
    from flightdeck.engine.attached.client import MOOT_ONCE_ENDED
    from flightdeck.engine.commands import CommandError
    from flightdeck.engine.errors import BatchEnded

    said: list[bool] = []

    def busy() -> None:  # an owner stopped (SIGSTOP, a debugger) in a write holds the lock
        if not said:
            said.append(True)
            console_for(stderr=True).print(
                Text(
                    "waiting for the batch's database: another process holds its lock "
                    "(the owner, if it is stopped); Ctrl+C records nothing"
                )
            )

    try:
        return client.send(command, busy=busy)
    except (LookupError, CommandError) as exc:
        if isinstance(exc, BatchEnded) and command.kind in MOOT_ONCE_ENDED:
            raise
        raise UsageError(None, None, None, str(exc).strip("'\"")) from None


def sent_to_live(client: Client, command: Command, verb: str) -> int | None:
    """A stop's, pause's or continue's `sent`; None, said as a notice, for a batch found ended
    as it would be recorded: nothing left to `verb`, as for a child found ended (exit 0)."""
    from flightdeck.engine.errors import BatchEnded

    try:
        return sent(client, command)
    except BatchEnded as exc:
        console_for().print(Text(f"{one_line(str(exc))}: nothing left to {verb}"))
        return None


def _matching(client: Client, row_filter: RowFilter, verb: str) -> list[str]:
    """The ids of the children `row_filter` keeps that have not ended, in batch order; how many
    it keeps (and how many of those had ended) is printed."""
    kept, live = client.matching(row_filter)
    if not kept and (why := unknown_names(client.rows(), row_filter.routes, row_filter.groups)):
        raise UsageError(None, None, "--where", why)  # a typo, not "0 children match"
    ended = kept - len(live)
    noun = "child matches" if kept == 1 else "children match"
    line = f"{kept} {noun} `{one_line(row_filter.query, 200)}`"
    line += f", {ended} had already ended" if ended else ""
    console_for().print(Text(line + ("" if live else f": nothing to {verb}")))
    return live


def _targets(
    args: argparse.Namespace, client: Client, row_filter: RowFilter | None, verb: str
) -> tuple[list[str], bool]:
    """The children named, or those `--where` keeps (and whether it was a query). A batch that
    has ended refuses a steer's or a nudge's query as it refuses their named children: no
    child left to match is said as that, not as `0 children match`."""
    if row_filter is None:
        return list(args.child_ids), False
    from flightdeck.engine.model import BatchStatus

    info = client.info()  # an abandoned batch takes them: they wait for `resume`
    going = (BatchStatus.RUNNING, BatchStatus.ABANDONED)
    if verb in ("steer", "nudge") and info is not None and info.status not in going:
        raise UsageError(None, None, None, f"batch {info.id} has ended ({info.status.value})")
    return _matching(client, row_filter, verb), True


def children_said(ids: list[str], counted: bool) -> str:
    """Children in a line: named, or (thousands, maybe, from a query) counted."""
    if counted:
        return f"{len(ids)} {'child' if len(ids) == 1 else 'children'}"
    return ", ".join(one_line(i, 60) for i in ids)


def say_error(text: str) -> None:
    """`text` on stderr, on one line, as flightdeck's."""
    console_for(stderr=True).print(Text(f"flightdeck: {one_line(text)}"))


def cmd_steer(args: argparse.Namespace) -> ExitCode:
    """`flightdeck steer`: a message for children of a running batch; each receipt printed
    as it changes (queued, and what it waits for; delivered, or missed and why)."""
    from flightdeck.engine.commands import Steer

    row_filter = where_filter(args)
    with batch_client(args) as client:  # first: a batch id left out is said as that
        if row_filter is None and not args.child_ids:
            raise UsageError(None, None, None, "name the children to steer, or --where QUERY")
        ids, _ = _targets(args, client, row_filter, "steer")
        if not ids:
            return ExitCode.OK
        rid = sent(client, Steer(tuple(ids), args.message, args.now))
        return _until_delivered(client, rid, args.now, none="steer applied")


def cmd_answer(args: argparse.Namespace) -> ExitCode:
    """`flightdeck answer`: the operator's answer to the question (`ask_operator`) each of these
    children waits on; it is their tool's result. Returns once the owner has delivered it."""
    from flightdeck.engine.commands import Answer

    with batch_client(args) as client:
        ids = list(args.child_ids)
        if not ids:
            raise no_children(args)
        rid = sent(client, Answer(tuple(ids), args.message))
        return until_applied(client, rid, f"answer delivered: {children_said(ids, False)}")


def cmd_nudge(args: argparse.Namespace) -> ExitCode:
    """`flightdeck nudge`: the canned loop steer (`[steer.canned] loop`, each child's loop
    evidence filled in) to those of these children flagged as looping; receipts as `steer`'s."""
    from flightdeck.engine.commands import Nudge

    row_filter = where_filter(args)
    with batch_client(args) as client:  # first, as for steer
        if row_filter is None and not args.child_ids:
            raise UsageError(None, None, None, "name the children to nudge, or --where QUERY")
        ids, _ = _targets(args, client, row_filter, "nudge")
        if not ids:
            return ExitCode.OK
        rid = sent(client, Nudge(tuple(ids)))
        return _until_delivered(client, rid, False, none="nudge applied: none of them is looping")


def _until_delivered(client: Client, request_id: int, now: bool, *, none: str) -> ExitCode:
    """Follow a request that steers: each receipt printed as it changes (`none` if it made
    none); 0 once every one is delivered, 1 if one was missed, the owner refused it or died."""
    from flightdeck.engine.attached.client import OwnerGone
    from flightdeck.engine.model import ChildStatus

    console = console_for()
    shown: dict[int, str] = {}
    # A child waiting on its question, or on its delegates, takes no turn, nor a steer (even
    # --now), until it is answered or they return: the batch is read for them once a receipt
    # is queued (not for a steer delivered at once).
    asking: set[str] | None = None
    delegating: set[str] = set()
    paused: set[str] = set()  # a paused child reads its steer once continued
    unstarted: set[str] = set()  # nor has one not started a response to interrupt
    not_started = (ChildStatus.QUEUED, ChildStatus.GATED)
    last: set[str] = set()  # on its last turn (max_turns) a steer at the next one is missed
    try:
        for row in client.follow(request_id):
            for receipt in row.receipts:
                state = receipt.state.value
                if shown.get(receipt.id) != state:
                    shown[receipt.id] = state
                    waits = None
                    if state == "queued" and asking is None:
                        rows = client.rows()
                        asking = {r.id for r in rows if r.question is not None and r.status.live}
                        delegating = {r.id for r in rows if r.waits_on_delegates}
                        paused = {r.id for r in rows if r.status is ChildStatus.PAUSED}
                        unstarted = {r.id for r in rows if r.status in not_started}
                        last = {r.id for r in rows if r.activity.last_turn and not now}
                    if state == "queued" and receipt.child_id in (asking or ()):
                        words = ("answer", client.batch_id, receipt.child_id, "-m", "…")
                        answer = command_line(client.db.parent, *words)
                        waits = f"its question waits for your answer first (`{answer}`)"
                    elif state == "queued" and receipt.child_id in delegating:
                        waits = "it waits on its delegates; delivered when they return"
                    elif state == "queued" and receipt.child_id in paused:
                        go_on = command_line(
                            client.db.parent, "continue", client.batch_id, receipt.child_id
                        )
                        waits = f"it is paused: delivered once continued (`{go_on}`)"
                    elif state == "queued" and receipt.child_id in unstarted:
                        waits = "it has not started: delivered at its first turn"
                    elif state == "queued" and receipt.child_id in last:
                        waits = "it is on its last turn (max_turns): missed once that ends"
                    console.print(Text(_receipt_line(receipt, now, waits)))
            if row.state.value == "refused":
                say_error(f"refused: {row.reason or ''}")
                return ExitCode.INCOMPLETE
            if row.state.value == "applied" and not row.receipts:
                console.print(Text(none))
    except OwnerGone as exc:
        say_error(str(exc))
        return ExitCode.INCOMPLETE
    except KeyboardInterrupt:
        say_error("stopped waiting: the steer stays queued, and is delivered at its turn")
        return ExitCode.INTERRUPTED
    return ExitCode.INCOMPLETE if "missed" in shown.values() else ExitCode.OK


def _receipt_line(receipt: SteerReceipt, now: bool, waits: str | None) -> str:
    """What became of a steer (`waits`: what its child waits on before it can read it, its
    question or its delegates)."""
    state = receipt.state.value
    line = f"{one_line(receipt.child_id, 60)}: {state}"
    if state == "queued":
        wait = "interrupting its current response" if now else "waiting for its next turn"
        line += f" — {waits or wait}; Ctrl+C leaves it queued"
    elif receipt.how:  # why it was missed, or how a CLI took it, where the owner said
        line += f"{': ' if state == 'missed' else ' '}{one_line(receipt.how, 200)}"
    return line


def cmd_stop(args: argparse.Namespace) -> ExitCode:
    """`flightdeck stop`: stop children of a running batch (or all); returns once the owner
    has applied it."""
    from flightdeck.engine.commands import Stop, StopAll

    row_filter = where_filter(args)
    with batch_client(args) as client:  # first, as for steer
        if row_filter is None and args.all == bool(args.child_ids):
            raise UsageError(
                None, None, None, "name the children to stop, --all or --where QUERY (one of them)"
            )
        if args.all:
            scheduled = client.scheduled()  # asked first: once applied, they have ended
            rid = sent_to_live(client, StopAll(), "stop")
            done = "stop applied: every child"
            if scheduled:  # what ends it: between two waves no child was stopped
                done += "; the schedules end, no more waves"
            return ExitCode.OK if rid is None else until_applied(client, rid, done)
        ids, counted = _targets(args, client, row_filter, "stop")
        rows = client.rows()
        if not counted:  # named: say which had ended, as a query's count does
            ids = able(rows, ids, False, client.batch_id)
        if not ids:
            return ExitCode.OK
        rid = sent_to_live(client, Stop(tuple(ids)), "stop")
        if rid is None:
            return ExitCode.OK
        what = children_said(ids, counted) + delegates_said(rows, ids)  # they stop with them
        return until_applied(client, rid, f"stop applied: {what}")


def cmd_pause(args: argparse.Namespace) -> ExitCode:
    """`flightdeck pause` and `continue`: of children of a running batch, or (none named) of
    its admission; returns once the owner has applied it."""
    from flightdeck.engine.commands import Continue, ContinueAdmission, Pause, PauseAdmission
    from flightdeck.engine.model import OPERATOR_HOLD

    resume = args.command == "continue"
    verb = "continue" if resume else "pause"
    row_filter = where_filter(args)
    with batch_client(args) as client:
        ids, counted = _targets(args, client, row_filter, verb)
        if ids:  # a query keeps none that had ended, but may keep paused ones
            rows = client.rows()
            ids = able(rows, ids, counted, client.batch_id, paused_only=resume, pause=not resume)
        if (counted or args.child_ids) and not ids:  # nothing to act on: not the admission
            return ExitCode.OK
        command: Command
        if ids:
            command = Continue(tuple(ids)) if resume else Pause(tuple(ids))
            what = children_said(ids, counted)
        else:
            command = ContinueAdmission() if resume else PauseAdmission()
            what = f"admission of batch {one_line(args.batch_id, 60)}"
            # As for a child: what is not paused is not continued, nor paused twice (the owner
            # would do nothing, and "applied" said it had).
            paused = OPERATOR_HOLD in (client.held() or "")
            if paused != resume and client.owner().status.value == "running":
                line = f"{what}: {'already' if paused else 'not'} paused"
                if resume and (soft := client.limits().soft_held):  # held all the same
                    line += f", but it is held: {one_line(soft, 200)}. " + soft_lift(
                        client.db.parent, args.batch_id
                    )
                console_for().print(Text(line))
                return ExitCode.OK
            if resume and (soft := client.limits().soft_held):  # the operator's hold ends, not it
                what += f", but it is still held: {one_line(soft, 200)}. " + soft_lift(
                    client.db.parent, args.batch_id
                )
        rid = sent_to_live(client, command, verb)
        if rid is None:
            return ExitCode.OK
        code = until_applied(client, rid, f"{verb} applied: {what}")
        if resume and ids and code == ExitCode.OK:
            waiting_said(client.rows(), ids)
        return code


def abandoned(client: Client, pid: int) -> str:
    """An abandoned batch said plainly: whose owner died, what still runs, how to resume."""
    left = client.still_running()
    running = (
        f"; {left} of its children still run (resume adopts them, or ends them "
        "before their tasks run again)"
        if left
        else ""
    )
    gone_, resume = gone(client.db.parent, pid), resume_hint(client.db.parent, client.batch_id)
    return f"batch {client.batch_id} was abandoned: {gone_}{running}; {resume}"


def say_held(client: Client, told: str | None = None) -> str | None:
    """Say on stderr that the batch's admission is held (and how to continue it), unless it is
    `told` already; the hold now."""
    from flightdeck.tui.headless import held_text

    held = client.held()
    if held is not None and held != told:
        console_for(stderr=True).print(held_text(held, client.batch_id, client.db.parent))
    return held


def cmd_wait(args: argparse.Namespace) -> ExitCode:
    """`flightdeck wait`: block until the batch ends; its exit code (0 every child completed,
    1 otherwise); an owner that dies is said plainly (with how to resume), exit 1."""
    import time

    with batch_client(args) as client:
        said = False
        held: str | None = None  # admission's hold last said
        paused = 0  # paused children last said
        while True:
            owner = client.owner()
            status = owner.status.value
            if status == "abandoned":
                say_error(abandoned(client, owner.pid))
                return ExitCode.INCOMPLETE
            if status != "running":
                console_for().print(Text(f"batch {args.batch_id} {status}"))
                return ExitCode.OK if status == "completed" else ExitCode.INCOMPLETE
            if not said:  # what it waits for, on stderr (stdout is the outcome, for scripts)
                said = True
                line = (
                    f"waiting for batch {one_line(args.batch_id, 60)} to end (owner pid "
                    f"{owner.pid}); Ctrl+C stops waiting, the batch runs on"
                )
                if client.scheduled():  # else it waited for ever, saying nothing of why
                    stop = command_line(client.db.parent, "stop", client.batch_id, "--all")
                    line += (
                        f"\nits schedules fire until it is stopped (`{stop}`), or until"
                        " [budget] max_runs or max_cost_usd is reached"
                    )
                console_for(stderr=True).print(Text(line))
            held = say_held(client, held)  # nothing new starts: it may wait on the operator
            paused = _say_paused(client, paused)  # nor does the batch end while they are
            time.sleep(WAIT_EVERY_S)


def _say_paused(client: Client, told: int) -> int:
    """Say on stderr how many children are paused, when that changes (to some): the batch
    cannot end until they are continued or stopped. The count now."""
    count = client.paused()
    if count and count != told:
        words = ("continue", client.batch_id, "--where", "status:paused")
        noun = "child is" if count == 1 else "children are"
        console_for(stderr=True).print(
            Text(
                f"{count} {noun} paused: the batch ends once they are continued "
                f"(`{command_line(client.db.parent, *words)}`) or stopped"
            )
        )
    return count


def until_applied(client: Client, request_id: int, applied: str) -> ExitCode:
    """Wait for the owner to settle the request: print `applied` once it has applied it (0),
    or why it refused it, or that the owner is gone (1). Waiting more than a moment is said.
    A stop, pause or continue that came after its children ended did nothing and failed in
    nothing: the owner's line is printed as for a child the command's own read found ended (0)."""
    import time

    from flightdeck.engine.attached.client import OwnerGone, ended_first

    said_waiting = False
    started = time.monotonic()
    try:
        for row in client.follow(request_id):
            if row.state.value == "applied":
                console_for().print(Text(applied))
                return ExitCode.OK
            if row.state.value == "refused":
                if ended_first(row.kind, row.child_ids, row.refusal, client.rows):
                    console_for().print(Text(one_line(row.reason or "")))
                    return ExitCode.OK
                say_error(f"refused: {row.reason or ''}")
                return ExitCode.INCOMPLETE
            if not said_waiting and time.monotonic() - started > 1.0:
                said_waiting = True
                console_for(stderr=True).print(
                    Text(
                        f"waiting for the owner (pid {client.owner().pid}) to apply it; "
                        "Ctrl+C leaves the request pending"
                    )
                )
    except OwnerGone as exc:
        say_error(str(exc))
        return ExitCode.INCOMPLETE
    except KeyboardInterrupt:
        say_error("stopped waiting: the request stays pending, and the owner applies it")
        return ExitCode.INTERRUPTED
    return ExitCode.INCOMPLETE  # follow ends only once settled: not reached
