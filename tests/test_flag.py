"""Flag: the engine's allocation-free stop signal behaves like a threading.Event."""

from __future__ import annotations

import threading
import time

from flightdeck.engine.control.flag import Flag


def test_wait_times_out_when_nobody_sets_it() -> None:
    flag = Flag()
    t0 = time.monotonic()
    assert flag.wait(0.02) is False
    assert time.monotonic() - t0 >= 0.015
    assert not flag.is_set()


def test_set_before_wait_returns_at_once() -> None:
    flag = Flag()
    flag.set()
    assert flag.is_set()
    assert flag.wait(10) is True


def test_set_from_another_thread_wakes_every_waiter() -> None:
    flag = Flag()
    results: list[bool] = []
    waiters = [threading.Thread(target=lambda: results.append(flag.wait(10))) for _ in range(8)]
    for w in waiters:
        w.start()
    time.sleep(0.01)  # let some of them block (the others find the flag already set)
    t0 = time.monotonic()
    flag.set()
    for w in waiters:
        w.join(5)
    assert results == [True] * 8
    assert time.monotonic() - t0 < 1.0


def test_no_lost_wake_up_when_set_races_with_the_first_wait() -> None:
    # set() and the first wait() meet at the moment the event is created: run that race often.
    for _ in range(300):
        flag = Flag()
        setter = threading.Thread(target=flag.set)
        setter.start()
        assert flag.wait(5) is True
        setter.join()
