"""A child's stop signal (engine/interrupt.py): an Event's behaviour, its weight only once a
thread waits on it."""

from __future__ import annotations

import threading
import time
import tracemalloc

from flightdeck.engine.interrupt import Interrupt

from helpers import HANG_S


def test_it_behaves_as_an_event() -> None:
    stop = Interrupt()
    assert not stop.is_set()
    assert stop.wait(0) is False
    stop.set()
    assert stop.is_set() and stop.wait(0) is True and stop.wait() is True


def test_a_set_wakes_a_thread_already_waiting() -> None:
    stop = Interrupt()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(stop.wait(60)))
    waiter.start()
    deadline = time.monotonic() + HANG_S
    while stop._event is None:  # the waiter is in wait(): its Event made
        assert time.monotonic() < deadline, "the waiter never waited"
        time.sleep(0.001)
    stop.set()
    waiter.join(HANG_S)
    assert got == [True]


def test_one_never_waited_on_weighs_a_tenth_of_an_event() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = [Interrupt() for _ in range(1000)]
        light = _grown(before)
        before = tracemalloc.take_snapshot()
        events = [threading.Event() for _ in range(1000)]
        heavy = _grown(before)
    finally:
        tracemalloc.stop()
    assert len(kept) == len(events)
    assert light * 10 <= heavy, (light, heavy)


def _grown(before: tracemalloc.Snapshot) -> int:
    after = tracemalloc.take_snapshot()
    return sum(s.size_diff for s in after.compare_to(before, "filename"))
