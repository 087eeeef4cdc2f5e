"""The facts a child reports to its coordinator, from the worker thread that runs it.

Values only (a child is named by its id): a fact may come from a runner on another thread, or
another machine, and the coordinator looks the child up."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from flightdeck.engine.model import Denial, LoopEvidence, SteerReceipt, record
from flightdeck.engine.providers.base import HeadroomEvent

if TYPE_CHECKING:
    from flightdeck.engine.child.ask import AskCall
    from flightdeck.engine.child.delegate import DelegateCall


@record
class ChildDone:
    """The child's run has returned (it is final, or was abandoned while it ran)."""

    child_id: str


@record
class ReceiptSettled:
    """A steer was delivered to the model, or missed because the child ended first."""

    receipt: SteerReceipt


@record
class HeadroomSeen:
    """A response carried the route's rate-limit headroom."""

    route: str
    event: HeadroomEvent


@record
class FirstChunk:
    """A prompt-cache gate's leader: its first response began streaming."""

    child_id: str


@record
class Delegated:
    """A child called `delegate`: the coordinator queues the sub-tasks and settles `call`."""

    child_id: str
    call: DelegateCall


@record
class ChildPaused:
    """The operator's pause reached the child at a turn boundary: a model child's run has
    returned (its messages kept for the continue), a process child is suspended."""

    child_id: str


@record
class LoopFlagged:
    """The child was judged to be looping (`evidence`), or made progress since (None)."""

    child_id: str
    evidence: LoopEvidence | None
    again: bool = False  # found afresh on what it did after a loop policy's steer reached it


@record
class Asked:
    """A child called `ask_operator`: the coordinator records the question, frees its slot and
    settles `call` with the operator's answer."""

    child_id: str
    call: AskCall


@record
class ToolDenied:
    """An agent CLI's permissions denied one of its tool calls (the operator may allow it)."""

    child_id: str
    denial: Denial


@record
class ChildLost:
    """Its work ran elsewhere (a worker on a cluster), and the worker is gone (`why` says how,
    naming the node): it runs again, as after a crash."""

    child_id: str
    why: str


ChildFact = (
    ChildDone
    | ChildPaused
    | ReceiptSettled
    | HeadroomSeen
    | FirstChunk
    | Delegated
    | LoopFlagged
    | Asked
    | ToolDenied
    | ChildLost
)

Report = Callable[[ChildFact], None]
