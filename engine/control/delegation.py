"""Delegation, the coordinator's side: which delegates each `delegate` call made, the tree of
parents and their children, and which waiting parents may resume. Coordinator thread only.

A parent that waits on its delegates gives up its slot (see `Arrivals.delegate`): with
`max_concurrent = 2` and four parents that each delegate, the delegates still run. It takes a
slot again, when one is free, once its last delegate has ended.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flightdeck.engine.child.delegate import DelegateCall
from flightdeck.engine.child.state import Child
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildRow


class Delegations:
    """The delegate calls in flight, and every child's delegates."""

    def __init__(self, taken: Callable[[str], bool] = lambda _: False) -> None:
        self._id_taken = taken  # ids in use (a resumed batch's earlier delegates among them)
        self._call_of: dict[str, DelegateCall] = {}  # delegate id -> the call that made it
        self._ended: dict[int, dict[str, ChildRow]] = {}  # id(call) -> rows of ended delegates
        self._members: dict[int, list[str]] = {}  # id(call) -> its delegates' ids, in order
        self._kids: dict[str, list[str]] = {}  # parent id -> all its delegates' ids
        self._parent: dict[int, Child] = {}  # id(call) -> the child waiting on it
        # Parents whose delegates have all ended, with the call and its delegates' rows.
        self.ready: list[tuple[Child, DelegateCall, tuple[ChildRow, ...]]] = []

    def tasks(self, parent: Child, call: DelegateCall, first_seq: int) -> list[Task]:
        """The tasks for `call`'s sub-tasks: ids `<parent>.<n>`, on the parent's route, one
        level deeper, in order from `first_seq`."""
        kids = self._kids.setdefault(parent.task.id, [])
        out: list[Task] = []
        n = len(kids)
        for i, sub in enumerate(call.tasks):
            n += 1
            while self._id_taken(f"{parent.task.id}.{n}"):
                n += 1
            task_id = f"{parent.task.id}.{n}"
            out.append(
                Task(
                    id=task_id,
                    goal=sub.goal,
                    seq=first_seq + i,
                    context=sub.context,
                    group=parent.task.group,  # its spend and its end belong to the parent's unit
                    route=parent.route.name,
                    max_turns=parent.task.max_turns,
                    timeout_s=parent.task.timeout_s,
                    source=f"delegated by {parent.task.id}",
                    parent=parent.task.id,
                    depth=parent.task.depth + 1,
                )
            )
        ids = [t.id for t in out]
        kids += ids
        self._members[id(call)] = ids
        self._ended[id(call)] = {}
        self._parent[id(call)] = parent
        for task_id in ids:
            self._call_of[task_id] = call
        return out

    def ended(self, row: ChildRow) -> None:
        """A child's final row is committed: if it was a delegate, its call may be complete."""
        call = self._call_of.pop(row.id, None)
        if call is None:
            return
        ended = self._ended[id(call)]
        ended[row.id] = row
        members = self._members[id(call)]
        if len(ended) == len(members):
            rows = tuple(ended[i] for i in members)
            del self._ended[id(call)], self._members[id(call)]
            self.ready.append((self._parent.pop(id(call)), call, rows))

    def subtree(self, ids: Iterable[str]) -> list[str]:
        """`ids` and every delegate below them, parents first, each once (`ids` may name a
        parent and its delegate both)."""
        out: dict[str, None] = {}
        todo = list(ids)
        while todo:
            child_id = todo.pop(0)
            if child_id not in out:
                out[child_id] = None
                todo.extend(self._kids.get(child_id, ()))
        return list(out)
