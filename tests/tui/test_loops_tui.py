"""A looping child in the TUI: its mark in the table, its evidence in the detail pane, and `n`
sending the canned steer, in-process and attached to an owner in another process."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.engine.inputs.settings import DEFAULT_LOOP_STEER
from flightdeck.engine.model import SteerState
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.widgets.detail import ChildDetail
from test_attach import OPTIONS, Owner
from textual.widgets import Footer
from textual.widgets._footer import FooterKey
from tui_support import (
    FAST,
    SIZE,
    EngineFactory,
    app_for,
    filter_rows,
    make_tasks,
    notices_of,
    until,
)

from helpers import Hold, flightdeck

pytestmark = pytest.mark.anyio

LOOPING = "Review it [sim:loop!]"  # the sim lists "." every turn, steered or not
SUMMARY = 'list_dir {"path": "."} called 5 times with the same arguments'


def _detail(app: FlightdeckApp) -> str:
    return str(app.main.query_one("#detail", ChildDetail).render())


@pytest.mark.slow
async def test_a_looping_child_shows_its_evidence_and_n_steers_it(
    engine_factory: EngineFactory, tmp_path: Path
) -> None:
    tasks = make_tasks([LOOPING, "Review item 2"], max_turns=200)
    hold = Hold(tmp_path / "hold")
    engine = engine_factory(tasks, pool=2, sim={**FAST, **hold.options()})
    hold.release("c2")
    for call in range(5):  # flagged after five calls; the sixth held while n is pressed
        hold.release("c1", call)
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: table.rows_by_id.get("c1") is not None, "rows")
        table.select("c1")
        await until(pilot, lambda: table.rows_by_id["c1"].loop is not None, "flagged")
        await until(pilot, lambda: table.displayed("c1", "doing").startswith("looping · "), "mark")
        await until(pilot, lambda: "looping (repeat)" in _detail(app), "the evidence")
        detail = _detail(app).splitlines()
        assert detail[2].startswith(f"∞ looping (repeat) {SUMMARY}")
        # The repeated calls, one under another, numbered.
        assert detail[3:] == [f'{n:>3} list_dir {{"path": "."}}' for n in range(1, 6)]
        pane = app.main.query_one("#detail")
        await until(pilot, lambda: pane.size.height == 8, "the pane grown to show them")
        # Over a child that is not looping, n is dimmed, not hidden: the footer keeps its key
        # widgets (a key shown and hidden as the cursor moved laid the whole screen out).
        footer = app.main.query_one(Footer)

        def nudge_dimmed() -> bool | None:
            found = [k for k in footer.query(FooterKey) if k.action == "nudge"]
            return found[0].has_class("-disabled") if found else None

        await until(pilot, lambda: nudge_dimmed() is False, "n in the footer over c1")
        keys = list(footer.query(FooterKey))
        table.select("c2")
        await until(pilot, lambda: nudge_dimmed() is True, "n dimmed over c2")
        table.select("c1")
        await until(pilot, lambda: nudge_dimmed() is False, "n enabled over c1 again")
        assert list(footer.query(FooterKey)) == keys
        await pilot.press("n")
        message = DEFAULT_LOOP_STEER.format(summary=SUMMARY)
        await until(pilot, lambda: len(engine.receipts()) == 1, "the canned steer queued")
        hold.release("c1", 5)  # it goes in at the end of that call
        await until(
            pilot,
            lambda: (
                [(r.message, r.state) for r in engine.receipts()]
                == [(message, SteerState.DELIVERED)]
            ),
            "the canned steer delivered",
        )
        [receipt] = engine.receipts()
        assert (receipt.child_id, receipt.now, receipt.by) == ("c1", False, "operator")
        await until(
            pilot,
            lambda: any(
                "operator" in ln and "You are repeating" in ln for ln in app.main.transcript.lines
            ),
            "the operator's canned steer in the transcript",
        )
        # `is:looping` keeps the looping child only (a stopped one keeps its evidence); with
        # no child looping, n is hidden.
        engine.stop(["c1"])
        await until(pilot, lambda: table.rows_by_id["c1"].status.terminal, "c1 stopped")
        table.select("c2")
        assert not app.main.check_action("nudge", ())
        await filter_rows(pilot, "is:looping")
        await until(pilot, lambda: table.shown == ["c1"], "only the looping child")


@pytest.mark.slow
async def test_attached_a_looping_child_shows_its_evidence_and_n_steers_it(
    tmp_path: Path,
) -> None:
    extra = (
        "[routes.sim.loops]\nrepeat_calls = 3\n"
        '[steer.canned]\nloop = "Stop: {summary}. ({kind}, {id})"\n'
    )
    owner = Owner(tmp_path, children=1, sim="", extra=extra, goal=LOOPING, max_turns=200)
    try:
        for call in range(3):  # three calls of list_dir ".", the fourth held
            owner.hold.release("c1", call)
        view = owner.view()
        app = FlightdeckApp(view, OPTIONS)
        async with app.run_test(size=SIZE) as pilot:
            table = app.main.table
            await until(pilot, lambda: table.rows_by_id.get("c1") is not None, "the row")
            table.select("c1")
            await until(pilot, lambda: "looping (repeat)" in _detail(app), "evidence attached")
            summary = 'list_dir {"path": "."} called 3 times with the same arguments'
            assert _detail(app).splitlines()[3:] == [
                f'{n:>3} list_dir {{"path": "."}}' for n in range(1, 4)
            ]
            assert table.displayed("c1", "doing").startswith("looping · ")
            await pilot.press("n")
            message = f"Stop: {summary}. (repeat, c1)"  # the owner's [steer.canned]
            await until(
                pilot,
                lambda: (
                    [r.state for r in view.snapshot().children[0].steers] == [SteerState.QUEUED]
                ),
                "the canned steer queued",
            )
            owner.hold.release("c1", 3)  # the steer goes in at the end of that call
            await until(
                pilot,
                lambda: (
                    [(r.message, r.state) for r in view.snapshot().children[0].steers]
                    == [(message, SteerState.DELIVERED)]
                ),
                "the canned steer delivered by the owner",
            )
            # The transcript writer is a process of its own: on a loaded machine it writes the
            # line (and makes the file) a moment after the store says the steer went in.
            path = Path(view.snapshot().children[0].transcript)
            line = f"operator  │ steer (at next turn): {message}"
            await until(
                pilot,
                lambda: path.exists() and line in path.read_text(),
                "the steer in the transcript",
            )
        # The same query from the command line: the looping child, and it is stopped.
        stop = flightdeck(
            "stop",
            owner.batch_id,
            "--where",
            "is:looping",
            "--state-dir",
            str(owner.state),
            cwd=tmp_path,
        )
        assert stop.returncode == 0, stop.stderr
        assert stop.stdout.splitlines()[0] == "1 child matches `is:looping`"
        view.close()
    finally:
        owner.close()
    assert owner.process.returncode is not None


@pytest.mark.slow
async def test_attached_a_loop_policys_steer_is_told_as_the_policys_not_the_operators(
    tmp_path: Path,
) -> None:
    # Walking a 5,000-child batch: the policy's nudges toasted "steer delivered: t1200" and the
    # detail line read "steer ✓ delivered", as if an operator had steered a child nobody did.
    extra = '[routes.sim.loops]\nrepeat_calls = 3\npolicy = ["nudge"]\n'
    owner = Owner(tmp_path, children=1, sim="", extra=extra, goal=LOOPING, max_turns=200)
    try:
        for call in range(3):  # flagged (and nudged) after three calls, the fourth held
            owner.hold.release("c1", call)
        view = owner.view()
        app = FlightdeckApp(view, OPTIONS)
        async with app.run_test(size=SIZE) as pilot:
            said = notices_of(app)
            table = app.main.table
            await until(pilot, lambda: table.rows_by_id.get("c1") is not None, "the row")
            table.select("c1")
            await until(
                pilot,
                lambda: [r.state for r in table.rows_by_id["c1"].steers] == [SteerState.QUEUED],
                "the policy's nudge queued",
            )
            owner.hold.release("c1", 3)  # it goes in at the end of that call
            await until(
                pilot,
                lambda: [r.state for r in table.rows_by_id["c1"].steers] == [SteerState.DELIVERED],
                "the policy's nudge delivered",
            )
            await until(pilot, lambda: said, "a toast")
            assert said == ["loop policy's steer delivered: c1"]
            await until(pilot, lambda: "loop policy's steer ✓" in _detail(app), "the detail")
        view.close()
    finally:
        owner.close()
