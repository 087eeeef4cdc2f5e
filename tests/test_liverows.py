"""The running children's rows and the live figures published beside them (control/liverows.py):
what `resume` reads of a dead owner's calls in flight must match the rows it stored."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.child.activity import InFlight
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.liverows import LIVE_EVERY_S, LiveRows
from flightdeck.engine.model import ChildRow, Usage
from flightdeck.engine.owner.lostrun import settle_left
from flightdeck.engine.owner.recording import StoreRecorder
from flightdeck.engine.records.live import live_json
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store

from helpers import HANG_S
from test_child_activity import make_child


class Racing(StoreRecorder):
    """A recorder whose writer commits each running row at once, and whose child is billed for
    its call before the coordinator goes on: an order the threads may take on a busy machine."""

    def __init__(self, store: Store, child: Child) -> None:
        super().__init__(store, "b1", lambda: 100.0)
        self.writer = store
        self.child = child

    def record_running(self, child_id: str, row: Callable[[], ChildRow]) -> None:
        super().record_running(child_id, row)
        assert self.writer.flush(timeout=HANG_S)
        self.child.progress.bill(Usage(100, 20), Decimal("0.0012"), Decimal(0))
        self.child.progress.call_ended()


def test_a_call_in_flight_at_the_owners_death_is_in_its_row_or_in_the_live_figures(
    tmp_path: Path,
) -> None:
    """The live figures are published with the rows recorded beside them: a row the writer
    built before a bill that the figures (built after it) count held neither, and `resume`
    lost the call's cost (found by review: fails on the tree before)."""
    child = make_child(tmp_path, [])
    assert child.mark_running()
    child.progress.call_started(InFlight(prompt_tokens=100))
    db = tmp_path / "flightdeck.db"
    with Store(db) as store:
        published: list[str] = []

        def publish(rows: tuple[ChildRow, ...]) -> None:
            published.append(live_json(rows, (), None, ()))
            store.set_live("b1", published[-1])

        LiveRows(Racing(store, child), publish).tick({"c1": child}, LIVE_EVERY_S)
        assert store.flush(timeout=HANG_S) and published
        # The owner dies here: what the next owner reads, and bills.
        with StoreReader(db) as reader:
            stored, live = reader.child("b1", "c1"), reader.live("b1")
        assert stored is not None
        found = settle_left([stored], [], live, (), "b1", store, 1, 200.0, lambda: 200.0)
    assert found[0].usage.input_tokens >= 100  # the call's prompt: billed or estimated
