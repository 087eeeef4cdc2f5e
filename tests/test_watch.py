"""Waker (engine/attached/watch.py): how often it calls its reader when wake-ups cost much."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

from flightdeck.engine.attached.watch import Waker

BURN_S = 0.02  # how long each wake-up takes


def test_a_costly_wake_up_rests_in_proportion_to_its_cpu(tmp_path: Path) -> None:
    """At a share of 0.25, each wake-up is followed by a rest of three times its length,
    however often the folder changes or the poll asks (here: every millisecond)."""
    calls: list[tuple[float, float]] = []  # (start, end) of each wake-up
    done = threading.Event()

    def wake() -> None:
        start, cpu = time.monotonic(), time.thread_time()
        while time.thread_time() - cpu < BURN_S:
            pass
        calls.append((start, time.monotonic()))
        if len(calls) >= 4:
            done.set()

    waker = Waker(tmp_path, ("x",), wake, poll_s=0.001, force_polling=True, max_share=0.25)
    waker.start()
    try:
        assert done.wait(60), calls
    finally:
        waker.close()
    for (start, end), (after, _) in itertools.pairwise(calls):
        assert after - end >= 3 * (end - start), calls
