"""The "needs you" queue in the TUI (`!`) and from the command line (`flightdeck answer`): a
sim child's `ask_operator` question shown, answered, and its answer the tool's result; the
status bar and the terminal's title count the queue; an alert once per new entry."""

from __future__ import annotations

import dataclasses
import os
import select
import shlex
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from flightdeck.engine.api import Engine, needs
from flightdeck.engine.inputs.settings import (
    Settings,
    TuiSettings,
    default_sim_route,
    load_settings,
)
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.model import ChildStatus
from flightdeck.tui import alerts
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import MainScreen, UiOptions
from flightdeck.tui.screens.needs import NeedsScreen
from flightdeck.tui.screens.search import SearchScreen
from flightdeck.tui.view import LiveView
from flightdeck.tui.widgets.status import StatusBar
from test_attach import OPTIONS, Owner
from textual.binding import Binding
from textual.widgets import Input, Label, OptionList
from tui_fakes import StaticView, child, frozen_clock
from tui_support import (
    SIZE,
    EngineFactory,
    app_for,
    burst,
    filter_rows,
    held,
    make_tasks,
    on_screen,
    type_text,
    until,
)

from helpers import HANG_S, Hold, flightdeck, flightdeck_process
from helpers import until as wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def bar_text(app: FlightdeckApp) -> str:
    return str(app.main.query_one("#status", StatusBar).render())


def result_of(engine: Engine, child_id: str) -> str:
    row = engine.snapshot().child(child_id)
    return (row.result or "") if row is not None else ""


async def test_an_answer_box_closed_by_an_answer_from_elsewhere_says_so(
    tmp_path: Path, hold: Hold
) -> None:
    # Found by a walk-through: while the operator typed an answer, `flightdeck answer` from
    # another terminal answered the question, and the box vanished with the typed text, not
    # a word said: it looked as if the answer had gone.
    route = dataclasses.replace(default_sim_route(**held(hold, tool_turns=0)), ask_operator=True)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    tasks = make_tasks(["[sim:ask] ship the docs", "[sim:ask] tag it"])
    engine = Engine(Batch("needs", tasks), settings, state_dir=tmp_path / "s", max_concurrent=2)
    engine.start()
    options = UiOptions(poll_s=0.05, transcript_poll_s=0.1, cursor_blink=False)
    app = FlightdeckApp(LiveView(engine), options)
    try:
        async with app.run_test(size=SIZE) as pilot:
            hold.release("c1", 0)  # each asks on its first call; the next ones wait
            hold.release("c2", 0)
            await until(pilot, lambda: len(app.main.notices.queue) == 2, "both asking")
            await pilot.press("exclamation_mark")
            await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
            screen = app.screen
            assert isinstance(screen, NeedsScreen)
            await until(pilot, lambda: len(screen.entries) == 2, "their questions")
            for how in ("answer", "stop"):  # the first entry answered elsewhere, then stopped
                await pilot.press("a")
                await until(pilot, lambda: screen.answering is not None, "the answer box")
                assert screen.answering is not None
                child_id = screen.answering.child_id or ""
                box = screen.query_one("#needs-answer", Input)  # the same box each time
                await until(pilot, lambda b=box: b.has_focus, "the box focused")  # keys go to it
                await type_text(pilot, "yes, pub")
                if how == "answer":
                    engine.answer([child_id], "from elsewhere")
                    why = "was answered elsewhere"
                else:
                    engine.stop([child_id])
                    why = f"left the queue: {child_id} has stopped"
                await until(pilot, lambda: screen.answering is None, "the box closed")
                told = f"{child_id}'s question {why}: yours was not sent"
                await until(  # a notification is a message, handled after the poll's close
                    pilot, lambda t=told: t in [str(n.message) for n in app._notifications], told
                )
    finally:
        engine.stop_all()
        engine.close()


async def test_the_status_bar_counts_the_queue_of_the_snapshot_it_shows(tmp_path: Path) -> None:
    # One poll only (the next is an hour away): the bar used to count the queue of the poll
    # before, so the first screen said nothing of the child asking while the title did.
    options = UiOptions(clock=frozen_clock, cursor_blink=False, poll_s=3600.0)
    app = FlightdeckApp(StaticView(tmp_path), options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.snapshot is not None, "the first snapshot")
        await pilot.pause()
        assert len(app.main.notices.queue) == 1
        assert "1 need you (!)" in bar_text(app)


async def test_a_question_is_shown_answered_in_the_tui_and_alerted_once(
    tmp_path: Path, hold: Hold, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    monkeypatch.setattr(alerts, "write_to_terminal", lambda app, seq: written.append(seq))
    titles: list[str] = []
    monkeypatch.setattr(alerts, "set_title", lambda app, text: titles.append(text))
    route = dataclasses.replace(default_sim_route(**held(hold, tool_turns=0)), ask_operator=True)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    tasks = make_tasks(["[sim:ask] ship the docs", "[sim:ask] tag the release", "plain work"])
    engine = Engine(Batch("needs", tasks), settings, state_dir=tmp_path / "s", max_concurrent=3)
    engine.start()
    tui = TuiSettings(desktop="osc777", notify_every_s=0.0, bell=False)
    options = UiOptions(poll_s=0.05, transcript_poll_s=0.1, cursor_blink=False, tui=tui)
    app = FlightdeckApp(LiveView(engine), options)
    try:
        async with app.run_test(size=SIZE) as pilot:
            main = app.main
            await until(pilot, lambda: main.snapshot is not None, "the first snapshot")
            assert "need you" not in bar_text(app)
            hold.release("c1")  # c1 asks first, then c2: the queue is oldest first
            await until(pilot, lambda: main.notices.queue, "c1 asking")
            hold.release()
            await until(pilot, lambda: len(main.notices.queue) == 2, "both asking")
            await until(pilot, lambda: "2 need you (!)" in bar_text(app), "the status bar's count")
            batch = engine.batch_id
            await until(pilot, lambda: titles[-1:] == [f"flightdeck {batch} — 2 need you"], "title")
            assert titles[-1] == f"flightdeck {batch} — 2 need you"

            await pilot.press("exclamation_mark")
            await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
            screen = app.screen
            assert isinstance(screen, NeedsScreen)
            await until(pilot, lambda: len(screen.entries) == 2, "two entries")
            assert [(n.child_id, n.kind) for n in screen.entries] == [
                ("c1", "asks"),
                ("c2", "asks"),
            ]
            assert "'ship the docs'" in screen.entries[0].text
            await pilot.press("c")  # a question is not cleared, only answered
            assert len(screen.entries) == 2
            await pilot.press("a")
            await until(pilot, lambda: screen.answering is not None, "the answer box")
            await type_text(pilot, "yes, publish")
            await pilot.press("enter")
            await until(pilot, lambda: "yes, publish" in result_of(engine, "c1"), "c1's result")
            await until(pilot, lambda: [n.child_id for n in screen.entries] == ["c2"], "c1 cleared")
            await pilot.press("enter")  # enter goes to the child
            await until(pilot, lambda: on_screen(app, MainScreen), "back to the table")
            assert main.table.selected_id == "c2"
            await until(pilot, lambda: "1 need you (!)" in bar_text(app), "one left")

            # One desktop notification per entry, however many polls saw it: the two
            # questions were told once (in one alert or two), never again.
            def asked() -> int:
                told = [s for s in written if s.startswith("\x1b]777;")]
                return sum(int(s.split(";")[-1].split(" ask")[0]) for s in told if " ask" in s)

            await until(pilot, lambda: asked() == 2, "the questions told")
            polls = len(written)
            engine.answer(["c2"], "no")
            await until(pilot, lambda: main.notices.queue == (), "nothing needs the operator")
            await until(pilot, lambda: titles[-1:] == [f"flightdeck {batch}"], "title")
            assert titles[-1] == f"flightdeck {batch}"
            assert asked() == 2 and len(written) == polls  # nothing more was told
    finally:
        engine.close()


def _owner(folder: Path, children: int) -> Owner:
    return Owner(
        folder,
        children,
        sim="tool_turns = 0\nask_operator = true\n",
        goal="[sim:ask] ship item",
    )


def answered(view: Any, child_id: str, answer: str) -> bool:
    """The child completed, its model having read the answer as its tool's result (the
    transcript says so: an attached view's rows carry no result)."""
    row = view.snapshot().child(child_id)
    if row is None or row.status is not ChildStatus.COMPLETED:
        return False
    path = Path(row.transcript)
    return path.exists() and f"The operator answered: {answer}" in path.read_text()


def said_lines(owner: Owner, n: int) -> list[str]:
    """The first `n` lines of the owner's output that say a child asks (30 s at most); read
    from the pipe itself, as it comes (the text wrapper's buffer would hide lines from select)."""
    out = owner.process.stdout
    assert out is not None
    text = ""
    deadline = time.monotonic() + HANG_S
    while True:
        found = [line for line in text.splitlines() if " asks: " in line and line.endswith(")")]
        if len(found) >= n:
            return found[:n]
        ready, _, _ = select.select([out.fileno()], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"the owner said {found} by now"
        text += os.read(out.fileno(), 65536).decode()


def _asking(view: Any) -> set[str]:
    return {n.child_id for n in needs(view.snapshot()) if n.kind == "asks" and n.child_id}


async def test_flightdeck_answer_and_the_attached_tui_answer_a_real_owners_children(
    tmp_path: Path,
) -> None:
    owner = _owner(tmp_path, 2)
    try:
        owner.hold.release()
        view = owner.view()
        wait_for(lambda: _asking(view) == {"c1", "c2"}, 30, what="both asking, read from the store")
        said = said_lines(owner, 2)  # the owner's headless output says each question once
        assert sorted(line.split(" asks: ")[0] for line in said) == ["c1", "c2"], said
        # The command it prints, pasted back into a shell in another folder, answers.
        printed = next(line for line in said if line.startswith("c1 asks: "))
        pasted = shlex.split(
            printed.rsplit("(`", 1)[1].removesuffix("`)").replace("…", "'ship it'")
        )
        assert pasted[:6] == ["flightdeck", "answer", owner.batch_id, "c1", "-m", "ship it"]
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        done = flightdeck(*pasted[1:], cwd=elsewhere)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "answer delivered: c1" in done.stdout
        wait_for(lambda: answered(view, "c1", "ship it"), 30, what="c1 completed with it")
        args = ("--state-dir", str(owner.state))
        again = flightdeck("answer", owner.batch_id, "c1", "-m", "again", *args, cwd=tmp_path)
        assert again.returncode == 1 and "no question of 'c1' waits" in again.stderr, again.stderr
        # Found in use: c2 asking, c1 not, the refusal named c1 alone; c2 got nothing either
        # (one message answers one question), and said so.
        both = flightdeck("answer", owner.batch_id, "c2", "c1", "-m", "x", *args, cwd=tmp_path)
        assert both.returncode == 1, both.stdout + both.stderr
        assert both.stderr.strip().endswith(
            "no question of 'c1' waits for an answer; nothing was answered: 'c2' still waits "
            "for one"
        ), both.stderr
        assert _asking(view) == {"c2"}

        app = FlightdeckApp(view, OPTIONS)  # attached: the answer goes through the store
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.main.notices.queue, "c2 in the queue")
            await pilot.press("exclamation_mark")
            await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
            await pilot.press("a")
            await type_text(pilot, "hold it")
            await pilot.press("enter")
            await until(pilot, lambda: not _asking(view), "c2 answered")
        wait_for(lambda: answered(view, "c2", "hold it"), 30, what="c2 completed with it")
        view.close()
    finally:
        owner.close()


async def test_a_steer_to_a_child_that_asks_says_its_question_is_answered_first(
    tmp_path: Path,
) -> None:
    owner = _owner(tmp_path, 1)
    view = None
    try:
        owner.hold.release()
        view = owner.view()
        wait_for(lambda: _asking(view) == {"c1"}, 30, what="c1 asking")
        state = ("--state-dir", str(owner.state))
        steer = flightdeck_process("steer", owner.batch_id, "c1", "-m", "mind the docs", *state)
        try:
            assert steer.stdout is not None
            ready, _, _ = select.select([steer.stdout], [], [], 30)
            assert ready, "nothing said while it waits"
            answer = f"flightdeck answer {owner.batch_id} c1 -m … --state-dir {owner.state}"
            assert steer.stdout.readline() == (
                f"c1: queued — its question waits for your answer first (`{answer}`); "
                "Ctrl+C leaves it queued\n"
            )
            done = flightdeck("answer", owner.batch_id, "c1", "-m", "ship it", *state, cwd=tmp_path)
            assert done.returncode == 0, done.stdout + done.stderr
            out, err = steer.communicate(timeout=60)  # its next turn, once answered, reads it
            assert steer.returncode == 0 and out == "c1: delivered\n", out + err
        finally:
            if steer.poll() is None:
                steer.kill()
                steer.communicate()
    finally:
        if view is not None:
            view.close()
        owner.close()


async def test_stop_pause_and_continue_from_the_command_line_on_children_that_ask(
    tmp_path: Path,
) -> None:
    # A real owner; the commands a user types: a stop ends a child waiting on its answer (its
    # entry leaves the queue), a pause and a continue keep the other's question.
    owner = _owner(tmp_path, 2)
    try:
        owner.hold.release()
        view = owner.view()
        wait_for(lambda: _asking(view) == {"c1", "c2"}, 30, what="both asking, read from the store")
        args = ("--state-dir", str(owner.state))
        asked = {n.child_id: n for n in needs(view.snapshot())}
        stop = flightdeck("stop", owner.batch_id, "c1", *args, cwd=tmp_path)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        wait_for(
            lambda: view.snapshot().child("c1").status is ChildStatus.STOPPED,  # type: ignore[union-attr]
            30,
            what="c1 stopped while it waited",
        )
        assert _asking(view) == {"c2"}
        paused = flightdeck("pause", owner.batch_id, "c2", *args, cwd=tmp_path)
        assert paused.returncode == 0, paused.stdout + paused.stderr
        wait_for(lambda: view.snapshot().child("c2").pausing, 30, what="c2 pausing")  # type: ignore[union-attr]
        assert [n for n in needs(view.snapshot()) if n.child_id == "c2"] == [asked["c2"]]
        again = flightdeck("continue", owner.batch_id, "c2", *args, cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        wait_for(lambda: not view.snapshot().child("c2").pausing, 30, what="c2 continued")  # type: ignore[union-attr]
        assert [n for n in needs(view.snapshot()) if n.child_id == "c2"] == [asked["c2"]]
        done = flightdeck("answer", owner.batch_id, "c2", "-m", "after all", *args, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_for(lambda: answered(view, "c2", "after all"), 30, what="c2 completed with it")
        assert needs(view.snapshot()) == ()
        view.close()
    finally:
        owner.close()


async def test_c_clears_an_entry_and_the_child_stays_as_it_is(
    engine_factory: EngineFactory, hold: Hold
) -> None:
    # Two children held until their timeout: timed out (a retry may fix it), in the queue.
    engine = engine_factory(make_tasks(["one", "two"], timeout_s=0.5), sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        main = app.main
        await until(pilot, lambda: len(main.notices.queue) == 2, "both timed out, in the queue")
        assert [n.kind for n in main.notices.queue] == ["timed_out", "timed_out"]
        await filter_rows(pilot, "is:needs-you")
        await until(pilot, lambda: len(main.table.shown) == 2, "the filter keeps both")
        await pilot.press("exclamation_mark")
        await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
        screen = app.screen
        assert isinstance(screen, NeedsScreen)
        await until(pilot, lambda: len(screen.entries) == 2, "two entries")
        first = screen.entries[0].child_id
        await pilot.press("c")
        await until(pilot, lambda: len(screen.entries) == 1, "one cleared")
        assert screen.entries[0].child_id != first
        await pilot.press("escape")
        await until(pilot, lambda: on_screen(app, MainScreen), "back")
        await until(pilot, lambda: "1 need you (!)" in bar_text(app), "the count")
        await until(pilot, lambda: len(main.table.shown) == 1, "the filter keeps one")
        row = engine.snapshot().child(first or "")
        assert row is not None and row.status is ChildStatus.TIMED_OUT  # as it was


async def test_a_cli_denied_tool_is_listed_with_its_input_and_cleared(tmp_path: Path) -> None:
    # Claude Code 2.1.332's own output denying its shell tool, written by a real program.
    capture = Path(__file__).parents[1] / "fixtures" / "agents" / "claude-2.1.332" / "denied.jsonl"
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'argv = ["cat", "{capture}"]\nformat = "claude-stream-json"\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    tasks = make_tasks(["clean the build"])
    engine = Engine(Batch("denied", tasks), load_settings(config), state_dir=tmp_path, env=env)
    engine.start()
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.main.notices.queue, "the denial in the queue")
            await pilot.press("exclamation_mark")
            await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
            screen = app.screen
            assert isinstance(screen, NeedsScreen)
            await until(pilot, lambda: screen.entries, "its entry")
            listing = screen.query_one("#needs-list", OptionList)
            shown = str(listing.get_option_at_index(0).prompt)
            assert shown.startswith("denied a tool") and "c1" in shown
            assert 'Bash {"command": "rm -rf build"' in shown
            await pilot.press("c")
            await until(pilot, lambda: not screen.entries, "cleared")
            assert screen.query_one("#needs-title", Label).render().plain == "Nothing needs you"  # type: ignore[attr-defined]
    finally:
        engine.close()


async def test_the_queue_s_ages_move_on_while_it_shows(tmp_path: Path) -> None:
    # The list was drawn again only when its entries changed: an entry read "0s ago" for as
    # long as the screen stayed open.
    now = [frozen_clock()]
    options = UiOptions(clock=lambda: now[0], cursor_blink=False, poll_s=0.05)
    app = FlightdeckApp(StaticView(tmp_path), options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.snapshot is not None, "the first snapshot")
        await pilot.press("exclamation_mark")
        await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
        listing = app.screen.query_one("#needs-list", OptionList)

        def first() -> str:
            return str(listing.get_option_at_index(0).prompt)

        await until(pilot, lambda: listing.option_count == 1, "the entry")
        before = first()
        now[0] += 7200
        await until(pilot, lambda: first() != before, "the entry's age moving on")
        assert "h ago" in first()


async def test_the_terminal_s_own_title_is_saved_first_and_put_back_on_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The title was set ("flightdeck B — 1 need you") and left so: the shell's window kept
    # saying that children needed the operator long after the TUI had gone.
    written: list[str] = []
    monkeypatch.setattr(alerts, "_write", lambda app, seq: written.append(seq))
    options = UiOptions(clock=frozen_clock, cursor_blink=False, poll_s=3600.0)
    app = FlightdeckApp(StaticView(tmp_path), options)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: any(s.startswith("\x1b]2;") for s in written), "the title")
        await pilot.press("exclamation_mark")  # more polls: still saved only once
        await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
        assert written.count(alerts.TITLE_SAVE) == 1
        assert written.index(alerts.TITLE_SAVE) < written.index(
            next(s for s in written if s.startswith("\x1b]2;"))
        )
        assert alerts.TITLE_RESTORE not in written
    assert written[-1] == alerts.TITLE_RESTORE
    assert written.count(alerts.TITLE_RESTORE) == 1


async def test_j_and_k_move_through_the_queue_as_through_the_table(tmp_path: Path) -> None:
    # Walking a 5,000-child batch: j j c in the queue meant to clear the third entry, and acted
    # on the first: j and k, which move through the children, did not move here (nor through
    # the search's results).
    rows = tuple(
        child(
            n, f"goal {n}", ChildStatus.FAILED, folder=tmp_path, started=1, finished=n, error="boom"
        )
        for n in range(1, 4)
    )
    app = FlightdeckApp(StaticView(tmp_path, rows), UiOptions(cursor_blink=False))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.snapshot is not None, "the first snapshot")
        await pilot.press("exclamation_mark")
        await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
        listing = app.screen.query_one("#needs-list", OptionList)
        await until(pilot, lambda: listing.option_count == 3, "the entries")
        listing.highlighted = 0
        await pilot.press("j", "j")
        assert listing.highlighted == 2
        await pilot.press("k")
        assert listing.highlighted == 1
        await pilot.press("escape")
        await until(pilot, lambda: on_screen(app, MainScreen), "back")
        await pilot.press("F")
        await until(pilot, lambda: on_screen(app, SearchScreen), "the search")
        results = app.screen.query_one("#search-results", OptionList)
        keys = {b.key for b in results.BINDINGS if isinstance(b, Binding)}
        assert {"j", "k"} <= keys  # there too


async def test_an_answer_typed_right_after_a_goes_into_its_box(tmp_path: Path, hold: Hold) -> None:
    """`a` and the answer read in one burst (a lagging ssh link, a paste, tmux send-keys): the
    answer's keys were queued before the box had the focus, so they went to the queue's list
    and the screen's keys (`c` clears an entry, enter goes to the child)."""
    route = dataclasses.replace(default_sim_route(**held(hold, tool_turns=0)), ask_operator=True)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    engine = Engine(
        Batch("needs", make_tasks(["[sim:ask] ship the docs"])),
        settings,
        state_dir=tmp_path / "s",
        max_concurrent=1,
    )
    engine.start()
    options = UiOptions(poll_s=0.05, transcript_poll_s=0.1, cursor_blink=False)
    app = FlightdeckApp(LiveView(engine), options)
    try:
        async with app.run_test(size=SIZE) as pilot:
            hold.release()
            await until(pilot, lambda: app.main.notices.queue, "c1 asking")
            await pilot.press("exclamation_mark")
            await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
            screen = app.screen
            assert isinstance(screen, NeedsScreen)
            await until(pilot, lambda: len(screen.entries) == 1, "the entry")
            burst(app, "ayes, cut a release\r")
            await until(pilot, lambda: "cut a release" in result_of(engine, "c1"), "c1's result")
            assert "The operator answered: yes, cut a release" in result_of(engine, "c1")
    finally:
        engine.close()
