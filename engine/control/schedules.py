"""Schedules on the coordinator's clock: each tick of a schedule is a new wave of its tasks.

The clock is read on the coordinator thread between one step and the next, so a wave is never
seen half queued. A tick is skipped while the schedule's last wave is still queued or running;
after a long sleep (a suspended laptop, a stopped process) a schedule fires once, not once for
every tick it missed; nothing fires at start unless `at_start`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime

from flightdeck.engine.inputs.tasks import Schedule, Task
from flightdeck.engine.inputs.tasks.expand import fill_wave


class ScheduleClock:
    """When each schedule fires next, and which of its waves is the latest."""

    def __init__(
        self,
        schedules: tuple[Schedule, ...],
        now: float,
        taken: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self._schedules = schedules
        self._id_taken = taken  # a resumed batch's earlier waves keep their ids
        # Only the schedules that fire again: a cron with a year names a last date.
        self._next: dict[str, float] = {}
        self._over: list[Schedule] = []  # ended since `over()` was last asked
        for s in schedules:
            self._set_next(s, now if s.at_start else _after(s, now))
        self._waves = dict.fromkeys((s.id for s in schedules), 0)
        self._last_wave: dict[str, tuple[str, ...]] = {}
        self.skipped = dict.fromkeys((s.id for s in schedules), 0)

    def __bool__(self) -> bool:
        """Whether any schedule fires again."""
        return bool(self._next)

    def over(self) -> list[Schedule]:
        """The schedules that ended since last asked: their cron names no later date."""
        over, self._over = self._over, []
        return over

    def _set_next(self, s: Schedule, when: float | None) -> None:
        if when is None:
            self._next.pop(s.id, None)
            self._over.append(s)
        else:
            self._next[s.id] = when

    def due(self, now: float, live: Callable[[str], bool]) -> list[list[Task]]:
        """The waves to queue now, one per schedule whose time has come and whose last wave
        has ended (`live(child_id)`: still queued or running). The next time is the first one
        after `now`, however many were missed."""
        waves = []
        made: set[str] = set()  # this call's waves' ids: none is in the batch yet
        for s in self._schedules:
            if s.id not in self._next or now < self._next[s.id]:
                continue
            self._set_next(s, _after(s, now))  # this wave is still made if it is the last
            if any(live(i) for i in self._last_wave.get(s.id, ())):
                self.skipped[s.id] += 1
                continue
            self._waves[s.id] += 1
            wave = _wave(s, self._waves[s.id])
            while any(self._id_taken(t.id) or t.id in made for t in wave):
                self._waves[s.id] += 1
                wave = _wave(s, self._waves[s.id])
            self._last_wave[s.id] = tuple(t.id for t in wave)
            made.update(self._last_wave[s.id])
            waves.append(wave)
        return waves

    def next_in(self, now: float) -> float | None:
        """Seconds until the next schedule is due (None: no schedules)."""
        if not self._next:
            return None
        return max(0.0, min(self._next.values()) - now)


def _after(s: Schedule, now: float) -> float | None:
    """The first time this schedule fires strictly after `now`; None: never again (its cron's
    year field has passed: the load checked only that it fires once)."""
    if s.every_s is not None:
        return now + s.every_s
    assert s.cron is not None
    # here: it costs every command's start 20 ms, most use none
    from croniter import CroniterBadDateError, croniter

    start = datetime.fromtimestamp(now, UTC)
    try:
        return float(croniter(s.cron, start).get_next(float))
    except CroniterBadDateError:
        return None


def _wave(s: Schedule, n: int) -> list[Task]:
    """Wave `n` of a schedule: its template tasks with `{wave}` filled in and ids of their own
    (`<task id>-w<n>`)."""
    return [
        dataclasses.replace(
            t,
            id=f"{t.id}-w{n}",
            goal=fill_wave(t.goal, n),
            context=None if t.context is None else fill_wave(t.context, n),
            source=f"{t.source} (schedule {s.id}, wave {n})",
        )
        for t in s.tasks
    ]
