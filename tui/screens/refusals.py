"""Why a key on the main screen does nothing, said rather than silent: a command the view
refuses (read-only, an ended batch, an owner gone), or a key over children it cannot act on."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from flightdeck.engine.model import BatchStatus, Snapshot, batch_ended
from flightdeck.tui.screens import targets
from flightdeck.tui.screens.batch import limits_refusal
from flightdeck.tui.screens.decisions import Decision, Say
from flightdeck.tui.screens.keys import MAIN_BINDINGS
from flightdeck.tui.screens.review import refusal
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable
from textual.binding import ActiveBinding, Binding, BindingType
from textual.widget import Widget

# The keys that send a command (MainScreen.order's, the needs-you screen's a and c, and R, M
# and delete's): hidden where each would only say why it sends nothing. A read-only view, or a
# batch that ended or whose owner is gone (`EngineView.read_only`); R, M and delete only
# read-only (`review.refusal`: a retry opens an ended batch again, an accept or a discard needs
# no owner); L as well, said its own way (`batch.limits_refusal`). In-process an ended batch
# still hears commands (a retry reopens it), yet none of these has a child to act on: hidden
# and said as attached (`_ended`).
_ORDERS = frozenset(
    {"steer", "stop", "nudge", "pause", "pause_admission", "stop_all", "answer", "clear"}
)
_REVIEWS = frozenset({"retry", "merge", "discard"})


def refused(action: str, view: EngineView, snap: Snapshot | None = None) -> str | None:
    """Why `action` sends nothing from `view` (its key hidden; pressed, it says so), or None;
    `snap`: the batch as last read."""
    if action == "limits":
        return limits_refusal(view, snap)
    if action in _ORDERS:
        return view.read_only or _ended(snap)
    return refusal(view) if action in _REVIEWS else None


def _ended(snap: Snapshot | None) -> str | None:
    if snap is not None and snap.status is not BatchStatus.RUNNING:
        return batch_ended(snap.batch_id, snap.status)
    return None


def hidden_reason(
    key: str, bindings: Iterable[BindingType], view: EngineView, snap: Snapshot | None = None
) -> str | None:
    """Why `key`, its binding among `bindings` hidden as `refused`, sends nothing (or None)."""
    return next(filter(None, (refused(a, view, snap) for a in _bound(key, bindings))), None)


def _bound(key: str, bindings: Iterable[BindingType]) -> Iterator[str]:
    bound = (b for b in bindings if isinstance(b, Binding))
    return (b.action for b in bound if key in b.key.split(","))  # "delete,backspace"


# The keys on the children, hidden (n dimmed) over a filter that keeps none: each says so.
_ON_CHILDREN = {"steer": "steer", "stop": "stop", "pause": "pause", "nudge": "nudge"}
_ON_CHILDREN |= {"tag": "tag", "tag_visible": "tag", "tag_group": "tag"}


def unheard(
    key: str,
    active: ActiveBinding | None,
    table: ChildrenTable,
    focused: Widget | None,
    view: EngineView,
    snap: Snapshot | None = None,
) -> Decision:
    """Why a key does nothing, rather than silence: its binding hidden as `refused` (`active`:
    None, no binding of the key applies), or shown disabled over children it cannot act on."""
    if active is None and (reason := hidden_reason(key, MAIN_BINDINGS, view, snap)):
        return (Say(reason, "warning"),)
    disabled = active.binding.action if active is not None and not active.enabled else None
    table_focused = focused is table
    if key == "n" and table_focused:  # n does nothing where no child is flagged as looping
        aim = targets.aim(table)
        if aim.ids and not aim.looping:
            return (Say("no child here is flagged as looping: nothing to nudge"),)
    verbs = [_ON_CHILDREN[a] for a in _bound(key, MAIN_BINDINGS) if a in _ON_CHILDREN]
    unheard_here = (active is None or disabled) and table_focused and verbs
    if unheard_here and (why := targets.aim(table).kept_none(verbs[0])):
        return (Say(why),)
    if disabled in ("steer", "stop", "pause"):  # over children that have all ended
        aim = targets.aim(table)
        if aim.ids:
            return (Say(aim.nothing_to(disabled), "warning"),)
    return ()
