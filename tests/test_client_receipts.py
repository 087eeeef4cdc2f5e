"""What the commands to a running batch say of each child they name, against a real owner
process on the sim, its children held by `hold_dir`: the ones a command could not act on, and
why; what a steer waits for; what a missed one missed by."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from flightdeck.engine.attached.client import Client
from flightdeck.engine.commands import Command
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.cli import main

from helpers import HANG_S, Hold, flightdeck_process, read_until, until

pytestmark = pytest.mark.slow


def sim_owner(
    folder: Path,
    ids: list[str],
    *,
    pool: int,
    route: str = "",
    more: str = "",
    goal: str = "{id}",
    task: str = "",
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[str], str, Hold]:
    """`flightdeck run --headless` of tasks `ids` (`goal` each, its id filled in; `task`: more
    keys for each) on a sim route whose every call is held until the returned Hold releases it
    (`route`: more keys for the route, `more`: more tables; `env`: more for the owner's
    environment); returned once it has started."""
    hold = Hold(folder / "hold")
    (folder / "ws").mkdir(exist_ok=True)
    tasks = "".join(f'[[tasks]]\nid = "{i}"\ngoal = "{goal.format(id=i)}"\n{task}' for i in ids)
    (folder / "tasks.toml").write_text(f'[batch]\nname = "t"\nworkspace = "ws"\n{tasks}')
    (folder / "flightdeck.toml").write_text(
        f'[engine]\nmax_concurrent = {pool}\ndefault_route = "sim"\nstate_dir = "state"\n'
        f'[routes.sim]\nprovider = "sim"\nmodel = "sim-1"\ntime_scale = 0.001\n'
        f"{hold.toml()}{route}{more}"
    )
    owner = flightdeck_process("run", "tasks.toml", "--headless", cwd=folder, env=env)
    assert owner.stdout is not None
    first = owner.stdout.readline()  # "batch <id>", once it has started
    assert first.startswith("batch "), first + owner.communicate()[1]
    batch_id = first.split()[1]
    until(lambda: recorded(folder, batch_id), HANG_S)  # said as its row is queued to the store
    return owner, batch_id, hold


def recorded(folder: Path, batch_id: str) -> bool:
    db = folder / "state" / "flightdeck.db"
    if not db.is_file():
        return False
    with StoreReader(db) as reader:
        return reader.batch(batch_id) is not None


def held(folder: Path, batch_id: str) -> str | None:
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        info = reader.batch(batch_id)
    return None if info is None else info.held


def status(folder: Path, batch_id: str, child_id: str) -> str | None:
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        row = reader.child(batch_id, child_id)
    return None if row is None else row.status.value


def ended(owner: subprocess.Popen[str], hold: Hold) -> None:
    """Every child let go, and the owner reaped once its batch ends (killed if it does not)."""
    hold.release()
    try:
        owner.communicate(timeout=60)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()


def test_pause_and_continue_say_each_child_they_cannot_act_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `continue B t2` of a running child never paused, `pause B t1` of a
    # completed one and `pause B t3` of a stopped one each printed "… applied: tN", exit 0,
    # and nothing was paused or continued.
    owner, batch_id, hold = sim_owner(tmp_path, ["t1", "t2", "t3"], pool=2)
    state = ("--state-dir", str(tmp_path / "state"))

    def said(*args: str) -> tuple[int, str]:
        code = main([*args, *state])
        return code, capsys.readouterr().out

    try:
        hold.release("t1")  # it completes; t3 takes its slot
        until(lambda: status(tmp_path, batch_id, "t1") == "completed", HANG_S)
        assert said("continue", batch_id, "t2") == (0, "t2: not paused (running)\n")
        assert said("pause", batch_id, "t1") == (0, "t1: had already ended (completed)\n")
        assert said("stop", batch_id, "t3") == (0, "stop applied: t3\n")
        until(lambda: status(tmp_path, batch_id, "t3") == "stopped", HANG_S)
        assert said("pause", batch_id, "t3") == (0, "t3: had already ended (stopped)\n")
        # Those it can act on it does; the others are said, as stop says them.
        assert said("pause", batch_id, "t1", "t2") == (
            0,
            "t1: had already ended (completed)\npause applied: t2\n",
        )
        assert said("continue", batch_id, "t3", "t2") == (
            0,
            "t3: had already ended (stopped)\ncontinue applied: t2\n",
        )
        with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
            acts = [(c, k) for _, c, k, _ in reader.events(batch_id) if k in ("pause", "continue")]
        assert acts == [("t2", "pause"), ("t2", "continue")]
    finally:
        ended(owner, hold)


def pausing(folder: Path, batch_id: str, child_id: str) -> bool:
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        row = reader.child(batch_id, child_id)
    return row is not None and row.pausing


def test_pause_of_a_child_already_paused_says_so_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a walk-through: `pause B t2` of a child already paused printed "pause applied:
    # t2" again, exit 0, where nothing was applied (the admission's says "already paused").
    owner, batch_id, hold = sim_owner(tmp_path, ["t1", "t2", "t3"], pool=1)
    state = ("--state-dir", str(tmp_path / "state"))

    def said(*args: str) -> tuple[int, str]:
        code = main([*args, *state])
        return code, capsys.readouterr().out

    try:
        until(lambda: status(tmp_path, batch_id, "t1") == "running", HANG_S)  # held; t2, t3 queued
        assert said("pause", batch_id, "t2") == (0, "pause applied: t2\n")
        assert said("pause", batch_id, "t2") == (0, "t2: already paused\n")
        assert said("pause", batch_id, "t1") == (0, "pause applied: t1\n")
        until(lambda: pausing(tmp_path, batch_id, "t1"), HANG_S)  # held before its first token
        assert said("pause", batch_id, "t1", "t2", "t3") == (
            0,
            "t1: already pausing (running)\nt2: already paused\npause applied: t3\n",
        )
        until(lambda: status(tmp_path, batch_id, "t3") == "paused", HANG_S)
        assert said("pause", batch_id, "--where", "status:live") == (
            0,
            "3 children match `status:live`\n3 of them are already paused\n",
        )
        with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
            acts = [c for _, c, k, _ in reader.events(batch_id) if k == "pause"]
        assert sorted(acts) == ["t1", "t2", "t3"]  # each paused once
    finally:
        main(["stop", batch_id, "--all", *state])  # paused children would hold the batch open
        ended(owner, hold)


DELEGATING = "delegate = true\ndelegate_rate = 1.0\ndelegates = 2\n"
ONE_LEVEL = "[budget]\nmax_depth = 1\n"


def waits_on_delegates(folder: Path, batch_id: str, child_id: str) -> bool:
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        row = reader.child(batch_id, child_id)
    return row is not None and row.waits_on_delegates


def test_a_steer_to_a_parent_waiting_on_its_delegates_says_so(tmp_path: Path) -> None:
    # Found by an audit: `steer --now` to it said "queued — interrupting its current response",
    # and nothing was interrupted: the steer waited until its delegates ended.
    owner, batch_id, hold = sim_owner(tmp_path, ["b"], pool=4, route=DELEGATING, more=ONE_LEVEL)
    try:
        hold.release("b", 0)  # its first turn hands out two delegates, which are held
        until(lambda: waits_on_delegates(tmp_path, batch_id, "b"), HANG_S)
        steer = flightdeck_process(
            "steer", batch_id, "b", "-m", "mind the tests", "--now", cwd=tmp_path
        )
        assert steer.stdout is not None
        assert steer.stdout.readline() == (
            "b: queued — it waits on its delegates; delivered when they return; "
            "Ctrl+C leaves it queued\n"
        )
        hold.release()
        out, err = steer.communicate(timeout=60)
        assert (steer.returncode, out) == (0, "b: delivered\n"), err
    finally:
        ended(owner, hold)


def test_a_steer_to_a_paused_child_says_it_waits_for_the_continue(tmp_path: Path) -> None:
    # Found by a walk-through: it said "queued — waiting for its next turn", and a paused child
    # takes none until it is continued.
    owner, batch_id, hold = sim_owner(tmp_path, ["t1", "t2"], pool=1)
    state = ("--state-dir", str(tmp_path / "state"))
    try:
        until(lambda: status(tmp_path, batch_id, "t1") == "running", HANG_S)  # held; t2 queued
        assert main(["pause", batch_id, "t2", *state]) == 0
        steer = flightdeck_process("steer", batch_id, "t2", "-m", "mind the tests", cwd=tmp_path)
        assert steer.stdout is not None
        assert steer.stdout.readline() == (
            f"t2: queued — it is paused: delivered once continued (`flightdeck continue "
            f"{batch_id} t2 --state-dir {tmp_path / 'state'}`); Ctrl+C leaves it queued\n"
        )
        assert main(["continue", batch_id, "t2", *state]) == 0
        hold.release()
        out, err = steer.communicate(timeout=60)
        assert (steer.returncode, out) == (0, "t2: delivered\n"), err
    finally:
        ended(owner, hold)


def test_a_steer_now_to_a_child_not_started_says_it_waits_for_its_first_turn(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: `steer --now` to a queued child said "queued — interrupting its
    # current response", and it had none: the steer waited for it to start.
    owner, batch_id, hold = sim_owner(tmp_path, ["t1", "t2"], pool=1)
    try:
        until(lambda: status(tmp_path, batch_id, "t1") == "running", HANG_S)  # held; t2 queued
        steer = flightdeck_process(
            "steer", batch_id, "t2", "-m", "mind the tests", "--now", cwd=tmp_path
        )
        assert steer.stdout is not None
        assert steer.stdout.readline() == (
            "t2: queued — it has not started: delivered at its first turn; "
            "Ctrl+C leaves it queued\n"
        )
        hold.release()
        out, err = steer.communicate(timeout=60)
        assert (steer.returncode, out) == (0, "t2: delivered\n"), err
    finally:
        ended(owner, hold)


def test_a_query_naming_a_route_or_group_no_child_has_is_one_error(tmp_path: Path) -> None:
    # Found by a walk-through: `stop --where route:simm` (a typo of `sim`) said "0 children
    # match `route:simm`: nothing to stop", exit 0, as if none were on the route.
    owner, batch_id, hold = sim_owner(tmp_path, ["t1"], pool=1, task='group = "docs"\n')
    try:
        for words, said in (
            (
                ("stop", "--where", "route:simm"),
                "'route:simm': no child of this batch is on that route (routes: sim)",
            ),
            (
                ("steer", "-m", "hi", "--where", "group:doc"),
                "'group:doc': no child of this batch is in that group (groups: docs)",
            ),
        ):
            done = flightdeck_process(words[0], batch_id, *words[1:], cwd=tmp_path)
            out, err = done.communicate(timeout=HANG_S)
            assert (done.returncode, out, err) == (2, "", f"flightdeck: --where: {said}\n")
        assert status(tmp_path, batch_id, "t1") != "stopped"  # nothing was sent
    finally:
        ended(owner, hold)


def test_wait_says_the_paused_children_the_batch_waits_on(tmp_path: Path) -> None:
    # Found by a walk-through: `wait` on a batch with a paused child said only "waiting for
    # batch … to end", and waited for ever: nothing runs a paused child until it is continued.
    owner, batch_id, hold = sim_owner(tmp_path, ["t1", "t2"], pool=1)
    state = ("--state-dir", str(tmp_path / "state"))
    try:
        until(lambda: status(tmp_path, batch_id, "t1") == "running", HANG_S)  # held; t2 queued
        assert main(["pause", batch_id, "t2", *state]) == 0
        waiting = flightdeck_process("wait", batch_id, cwd=tmp_path)
        try:
            assert waiting.stderr is not None
            said = read_until(waiting.stderr.fileno(), "or stopped\n")  # not silent for ever
            assert said.splitlines()[1:] == [
                f"1 child is paused: the batch ends once they are continued (`flightdeck "
                f"continue {batch_id} --where status:paused --state-dir {tmp_path / 'state'}`) "
                "or stopped"
            ], said
            assert main(["continue", batch_id, "t2", *state]) == 0
            hold.release()
            out, err = waiting.communicate(timeout=60)
            assert (waiting.returncode, out) == (0, f"batch {batch_id} completed\n"), err
            assert err == "", err  # said once, not again each time it looks
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.communicate()
    finally:
        main(["stop", batch_id, "--all", *state])  # a paused child would hold the batch open
        ended(owner, hold)


def test_stop_of_a_parent_counts_the_delegates_stopped_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `stop B a` printed `stop applied: a`, and a.1 and a.2 were stopped too.
    owner, batch_id, hold = sim_owner(
        tmp_path, ["a", "b"], pool=6, route=DELEGATING, more=ONE_LEVEL
    )
    state = ("--state-dir", str(tmp_path / "state"))
    try:
        hold.release("a", 0)  # their first turns hand out two delegates each, held
        hold.release("b", 0)

        def waiting(parent: str) -> bool:  # and its delegates recorded, rows of their own
            delegates = (status(tmp_path, batch_id, f"{parent}.{n}") for n in (1, 2))
            return waits_on_delegates(tmp_path, batch_id, parent) and None not in delegates

        until(lambda: waiting("a") and waiting("b"), HANG_S)
        assert main(["stop", batch_id, "a", *state]) == 0
        assert capsys.readouterr().out == "stop applied: a (and its 2 delegates)\n"
        hold.release("b.1")  # it completes: only b.2 is left to stop with b
        until(lambda: status(tmp_path, batch_id, "b.1") == "completed", HANG_S)
        assert main(["stop", batch_id, "b", *state]) == 0
        assert capsys.readouterr().out == "stop applied: b (and its 1 delegate)\n"
        with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
            stops = [c for _, c, k, _ in reader.events(batch_id) if k == "stop"]
        assert sorted(stops) == ["a", "a.1", "a.2", "b", "b.2"]
    finally:
        ended(owner, hold)


def test_a_stop_that_arrives_after_its_child_ended_is_not_recorded_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found in use: a stop confirmed in the attached TUI just after the child ended on its own
    # was recorded `applied`, as if it had stopped it.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.commands import Stop
    from flightdeck.engine.records.requests import RequestState

    owner, batch_id, hold = sim_owner(tmp_path, ["a", "b"], pool=2)
    db = tmp_path / "state" / "flightdeck.db"
    try:
        until(lambda: status(tmp_path, batch_id, "b") == "running", HANG_S)
        hold.release("a")
        until(lambda: status(tmp_path, batch_id, "a") == "completed", HANG_S)
        # What the TUI sends once its dialog, opened while `a` ran, is confirmed.
        with Client(db, batch_id) as client:
            *_, settled = client.follow(client.send(Stop(("a",))))
        assert settled.state is RequestState.REFUSED
        assert (
            settled.reason == "a had already ended (completed) when the stop arrived: not stopped"
        )
        # The attached TUI says so as that, not as a refusal (it said `stop refused: …`).
        view = StoreView(db, batch_id, watch=False)

        def told() -> bool:
            view.refresh()
            return bool(caplog.records)

        try:
            with caplog.at_level(logging.WARNING, logger="flightdeck"):
                view.send(Stop(("a",)))
                until(told, HANG_S)
        finally:
            view.close()
        assert [r.getMessage() for r in caplog.records] == [settled.reason]
        with Client(tmp_path / "state" / "flightdeck.db", batch_id) as client:
            *_, settled = client.follow(client.send(Stop(("a", "b"))))
        assert settled.state is RequestState.APPLIED  # it stopped b
        until(lambda: status(tmp_path, batch_id, "b") == "stopped", HANG_S)
    finally:
        ended(owner, hold)


def test_a_stop_pause_or_continue_that_arrives_after_its_child_ended_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `stop B a` of a child found ended by the command's read of the batch
    # said so, exit 0; of one that ended on its own after that read, before the owner took the
    # stop, it said `refused: …`, exit 1: one outcome, two exit codes, by a race. A pause so
    # late said `pause applied: b`, and was recorded applied, though it paused nothing.
    from flightdeck.engine.commands import Stop
    from flightdeck.engine.records.requests import RequestState
    from flightdeck.tui import client as cli_client

    # d, held throughout, keeps the batch running
    owner, batch_id, hold = sim_owner(tmp_path, ["a", "b", "c", "d"], pool=2)
    db = tmp_path / "state" / "flightdeck.db"
    real_sent = cli_client.sent
    meanwhile: list[Callable[[], None]] = []

    def late_sent(client: Client, command: Command) -> int:
        """The child ends after the command's read of the batch, before its request."""
        meanwhile.pop()()
        return real_sent(client, command)

    def completes(child_id: str) -> Callable[[], None]:
        def end() -> None:
            hold.release(child_id)
            until(lambda: status(tmp_path, batch_id, child_id) == "completed", HANG_S)

        return end

    def stopped_by_another(child_id: str) -> Callable[[], None]:
        def end() -> None:
            with Client(db, batch_id) as other:
                *_, done = other.follow(other.send(Stop((child_id,))))
            assert done.state is RequestState.APPLIED

        return end

    def said(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--state-dir", str(tmp_path / "state")])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        until(lambda: status(tmp_path, batch_id, "b") == "running", HANG_S)  # a too; c, d queued
        assert said("pause", batch_id, "c") == (0, "pause applied: c\n", "")
        monkeypatch.setattr(cli_client, "sent", late_sent)
        meanwhile.append(completes("a"))
        assert said("stop", batch_id, "a") == (
            0,
            "a had already ended (completed) when the stop arrived: not stopped\n",
            "",
        )
        meanwhile.append(completes("b"))
        assert said("pause", batch_id, "b") == (
            0,
            "b had already ended (completed) when the pause arrived: not paused\n",
            "",
        )
        meanwhile.append(stopped_by_another("c"))
        assert said("continue", batch_id, "c") == (
            0,
            "c had already ended (stopped) when the continue arrived: not continued\n",
            "",
        )
        with StoreReader(db) as reader:
            acts = [(c, k) for _, c, k, _ in reader.events(batch_id) if k in ("pause", "continue")]
        assert acts == [("c", "pause")]  # neither late one did anything
        with Client(db, batch_id) as client:  # nor is either recorded as applied
            states = [(r.kind, r.state) for r in map(client.request, range(1, 6))]
        assert states == [
            ("pause", RequestState.APPLIED),
            ("stop", RequestState.REFUSED),
            ("pause", RequestState.REFUSED),
            ("stop", RequestState.APPLIED),  # another's
            ("continue", RequestState.REFUSED),
        ]
    finally:
        monkeypatch.setattr(cli_client, "sent", real_sent)
        main(["stop", batch_id, "--all", "--state-dir", str(tmp_path / "state")])  # c, if paused
        ended(owner, hold)


def test_a_missed_nudge_says_why(tmp_path: Path) -> None:
    # Found by an audit: a nudge printed `loop1: missed`, exit 1, while the transcript said
    # `missed: … (max_turns (8) used up)`.
    owner, batch_id, hold = sim_owner(
        tmp_path,
        ["loop1"],
        pool=1,
        route="[routes.sim.loops]\nrepeat_calls = 3\n",
        goal="{id} [sim:loop]",  # the same call every turn, until a steer reaches it
        task="max_turns = 8\n",
    )

    def on_its_last_turn() -> bool:
        with Client(tmp_path / "state" / "flightdeck.db", batch_id) as client:
            row = next(r for r in client.rows() if r.id == "loop1")
        return row.activity.last_turn and row.loop is not None

    try:
        for call in range(7):
            hold.release("loop1", call)  # its eighth call, its last turn, is held
        until(on_its_last_turn, HANG_S)
        nudge = flightdeck_process("nudge", batch_id, "--where", "is:looping", cwd=tmp_path)
        assert nudge.stdout is not None
        assert nudge.stdout.readline() == "1 child matches `is:looping`\n"
        assert nudge.stdout.readline() == (  # said up front: no turn is left to read it
            "loop1: queued — it is on its last turn (max_turns): missed once that ends; "
            "Ctrl+C leaves it queued\n"
        )
        hold.release()  # the turn ends with a call and no turn is left to read the nudge
        out, err = nudge.communicate(timeout=60)
        assert (nudge.returncode, out) == (1, "loop1: missed: max_turns (8) used up\n"), err
    finally:
        ended(owner, hold)


def test_all_with_where_names_what_conflicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: it said "name children or give --where (not both)", none named.
    args = ["stop", "b-none", "--all", "--where", "group:g1", "--state-dir", str(tmp_path)]
    assert main(args) == 2
    assert capsys.readouterr().err == "flightdeck: --where: give --all or --where (not both)\n"
    assert main(["stop", "b-none", "c1", "--where", "group:g1", "--state-dir", str(tmp_path)]) == 2
    assert "name children or give --where (not both)" in capsys.readouterr().err


def test_continue_of_admission_the_soft_budget_still_holds_says_how_to_lift_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `continue B` over a batch held by the operator and the soft budget
    # said "continue applied", as if children started again; the soft budget held on.
    owner, batch_id, hold = sim_owner(
        tmp_path, ["t1", "t2"], pool=1, more="[budget]\nsoft_cost_usd = 0\n"
    )
    state = ("--state-dir", str(tmp_path / "state"))
    try:
        until(lambda: "soft budget" in (held(tmp_path, batch_id) or ""), HANG_S)
        assert main(["pause", batch_id, *state]) == 0
        capsys.readouterr()
        assert main(["continue", batch_id, *state]) == 0
        limits = f"flightdeck limits {batch_id} --soft-cost USD --state-dir {tmp_path / 'state'}"
        assert capsys.readouterr().out.replace("\n", " ").strip() == (
            f"continue applied: admission of batch {batch_id}, but it is still held: soft "
            f"budget $0.00 reached: spent $0.00. To go on: {limits} (raise it) or --soft-cost "
            "off (drop it)"
        )
        assert main(["stop", batch_id, "--all", *state]) == 0  # else it holds on to the end
    finally:
        ended(owner, hold)


def test_wait_and_stop_all_of_a_scheduled_batch_say_its_schedules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found walking the fleet: `stop B --all` between two waves printed `stop applied: every
    # child`, no child stopped, and what it did (the waves end, so the batch) went unsaid.
    schedule = '[[schedules]]\nid = "scan"\nevery = "1000s"\n[schedules.task]\ngoal = "w"\n'
    owner, batch_id, hold = sim_owner(tmp_path, ["a"], pool=2, task=schedule)
    state = ("--state-dir", str(tmp_path / "state"))
    try:
        waiting = flightdeck_process("wait", batch_id, cwd=tmp_path)
        try:
            assert waiting.stderr is not None
            said = read_until(waiting.stderr.fileno(), "is reached\n")  # why it may wait long
            assert said.splitlines()[1:] == [
                f"its schedules fire until it is stopped (`flightdeck stop {batch_id} --all "
                f"--state-dir {tmp_path / 'state'}`), or until [budget] max_runs or "
                "max_cost_usd is reached"
            ], said
            assert main(["stop", batch_id, "--all", *state]) == 0
            out = capsys.readouterr().out
            assert out == "stop applied: every child; the schedules end, no more waves\n", out
            assert waiting.wait(60) == 1  # stopped
        finally:
            if waiting.poll() is None:
                waiting.kill()
            waiting.communicate()
        assert owner.wait(60) == 1  # stopped: a ended stopped, no wave comes
    finally:
        ended(owner, hold)
