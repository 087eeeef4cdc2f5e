"""A child's bills on a cluster worker, as they reach the owner: its meter at once, and its
figures there, once, whether the bill or figures counting it come home first. No Ray: the
worker's and the owner's parts, with the messages packed as they cross."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flightdeck.engine.child.activity import InFlight
from flightdeck.engine.child.billing import bill, bill_cut_short
from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.executors.cluster.home import Home, Link
from flightdeck.engine.executors.cluster.twin import Outbox, RelayMeter
from flightdeck.engine.executors.cluster.wire import (
    Done,
    Figures,
    FromWorker,
    pack_from,
    unpack_from,
)
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, Usage
from flightdeck.engine.records.meter import Meter, route_cost, totals_of

from helpers import sim_route

ROUTE = sim_route()
CALL = Usage(input_tokens=480, output_tokens=10)


def now() -> float:
    return 1.0


class Both:
    """A child's twin on a worker and the owner's child following it, joined by the wire."""

    def __init__(self, tmp_path: Path) -> None:
        self.outbox = Outbox()
        self.twin = Progress(now)
        self.worker_meter = RelayMeter(self.outbox, "c1")
        self.worker_meter.progress = self.twin
        self.meter = Meter()  # the owner's
        none: Any = None
        self.child = Elsewhere(
            Task(id="c1", goal="Look around", seq=0), ROUTE, none, str(tmp_path / "c1.log"),
            now, lambda fact: None, queued_ts=0.0, secrets=(),
        )  # fmt: skip
        home = Home({"c1": self.child}, lambda f: None, self.meter, {}, {}, none, none, now)
        self.link = Link(none, "node-a", "a", home, lambda link, why: None, lambda x: x)
        self.link.children["c1"] = self.child

    def send(self, *items: FromWorker) -> None:
        """`items` reach the owner, as they cross the wire."""
        for item in unpack_from(pack_from(list(items))):
            self.link._apply(item)

    def figures(self) -> Figures:
        return Figures("c1", self.twin.mirror())

    def billed(self) -> list[FromWorker]:
        """The call billed on the worker: what it put in the outbox."""
        bill(self.twin, self.worker_meter, ROUTE, CALL)
        return self.outbox.take(0)


def test_a_bill_home_before_the_figures_leaves_no_billed_call_to_estimate(tmp_path: Path) -> None:
    # The worker sent the call in flight home, then its bill, and was lost before its next
    # figures: the lost attempt bills what was not billed of the call, now nothing, where it
    # billed the call's estimate on top of its bill.
    both = Both(tmp_path)
    both.twin.call_started(InFlight(prompt_tokens=500))
    both.twin.streamed("x" * 40)
    both.send(both.figures())
    assert both.child.progress.not_billed() == Usage(input_tokens=500, output_tokens=10)
    both.send(*both.billed())
    both.twin.call_ended()  # ... its figures never go home
    assert bill_cut_short(both.child.progress, both.meter, ROUTE) == Usage()
    cost = route_cost(CALL, ROUTE)
    assert cost is not None and cost > 0
    assert both.meter.totals().cost_usd == cost
    assert (both.child.progress.figures().usage, both.child.progress.figures().cost_usd) == (
        CALL,
        cost,
    )


def test_the_cached_part_of_a_call_in_flight_reaches_the_owner(tmp_path: Path) -> None:
    both = Both(tmp_path)
    both.twin.call_started(InFlight(prompt_tokens=500, cached=300))
    both.send(both.figures())
    assert both.child.progress.not_billed() == Usage(input_tokens=200, cache_read_tokens=300)


def test_figures_counting_a_bill_before_it_comes_home_keep_it_once(tmp_path: Path) -> None:
    both = Both(tmp_path)
    both.twin.call_started(InFlight(prompt_tokens=500))
    items = both.billed()
    both.send(both.figures())  # copied at a pull that came after the bill, before its message
    both.send(*items)
    assert both.child.progress.figures().usage == CALL
    assert both.meter.totals().usage == CALL
    # Later bills are taken as they come, as are figures counting them.
    both.send(*both.billed())
    assert both.child.progress.figures().usage == CALL + CALL
    both.send(both.figures())
    assert both.child.progress.figures().usage == CALL + CALL
    assert both.meter.totals().usage == CALL + CALL


def test_a_tally_billed_to_the_meter_alone_goes_to_the_owners_meter_alone(
    tmp_path: Path,
) -> None:
    # An agent CLI's tally bills the meter and sets its figures whole (count 0): the figures
    # that carry it say what the child spent.
    both = Both(tmp_path)
    cost = route_cost(CALL, ROUTE)
    assert cost is not None
    both.worker_meter.add_cost(CALL, cost)
    both.send(*both.outbox.take(0))
    assert both.meter.totals().usage == CALL
    assert both.child.progress.figures().usage == Usage()


def test_a_bill_from_a_worker_lost_meanwhile_goes_to_the_meter_alone(tmp_path: Path) -> None:
    # The child runs again from the start by now: its new attempt's figures are not the lost
    # one's.
    both = Both(tmp_path)
    items = both.billed()
    both.link.children.clear()
    both.send(*items)
    assert both.meter.totals().usage == CALL
    assert both.child.progress.figures().usage == Usage()


def test_what_a_lost_worker_sent_late_leaves_the_childs_new_attempt_alone(
    tmp_path: Path,
) -> None:
    # Its pull had taken them before the worker was found lost (by its sender, say): applied
    # after, its figures overwrote the new attempt's, and its end ended the child again.
    both = Both(tmp_path)
    both.twin.call_started(InFlight(prompt_tokens=500))
    both.billed()  # its bill went home with the rest; its figures count the call
    late = [both.figures(), Done("c1", ChildStatus.COMPLETED, None, "the lost attempt's")]
    both.link.children.clear()  # lost: the child runs again from the start
    both.send(*late)
    assert both.child.progress.figures().usage == Usage()
    assert not both.child.status.terminal and both.child.finished_ts is None, both.child.status


def test_a_child_ended_here_is_not_pending_whatever_its_worker_sends_after(
    tmp_path: Path,
) -> None:
    # The watchdog gave up on it (a stop its worker's CLI ignored): final here, its worker still
    # runs the turn and sends its figures, its turn's usage not reported. The meter said
    # `(+1 pending)` and its row `$0.00+?` while nothing ran.
    both = Both(tmp_path)
    runner: Any = SimpleNamespace(steerable=None)  # its row asks whether it takes steers
    both.child.runner = runner
    # A Codex turn under way on the worker.
    both.twin.spend(Usage(), Decimal(0), Decimal(0), pending=True)
    both.send(both.figures())
    assert totals_of([both.child.row()]).pending == 1
    assert both.child.finalize(ChildStatus.STOPPED, "did not stop within 5s; abandoned")
    both.send(both.figures())  # the link still holds it: its worker may yet bill the turn
    assert totals_of([both.child.row()]).pending == 0


def test_the_known_part_of_an_unknown_cost_comes_home_and_outlives_a_lost_worker(
    tmp_path: Path,
) -> None:
    # A Codex child on a worker stopped in its second turn: its cost unknown, its first turn's
    # known. Its figures at home, and its next attempt once the worker is lost, keep that part.
    both = Both(tmp_path)
    runner: Any = SimpleNamespace(steerable=None)  # its row asks whether it takes steers
    both.child.runner = runner
    both.twin.spend(CALL, None, Decimal("0.03"))
    both.send(both.figures())
    row = both.child.row()
    assert row.cost_usd is None and row.cost_floor_usd == Decimal("0.03")
    lost = both.child.restart("its worker was lost")
    assert lost.cost_known_usd == Decimal("0.03")
    again = both.child.row()
    assert again.cost_usd is None and again.cost_known_usd == Decimal("0.03")
