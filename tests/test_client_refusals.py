"""What a stop, pause or continue the owner refused says, and its exit code, decided by why the
owner refused it (the refusal it recorded), not by its children's rows: against a real owner
process on the sim whose applying of requests can be made to fail (`faulty_owner`)."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from flightdeck.engine.attached.client import Client
from flightdeck.engine.commands import Command, Stop
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.requests import Refusal, RequestState
from flightdeck.tui.cli import main

from helpers import Hold, until
from test_client_receipts import ended, sim_owner, status

pytestmark = pytest.mark.slow

# Imported by the owner process at its start (PYTHONPATH): its applying of a client's request
# fails while the file FLIGHTDECK_TEST_FAULT names exists, as an owner's own bug would.
FAULTY_SITE = """
import os
from pathlib import Path

from flightdeck.engine.control import sending

_gate = Path(os.environ["FLIGHTDECK_TEST_FAULT"])
_apply = sending.Sender.apply_request


def apply_request(self, request_id, command):
    if _gate.exists():
        raise RuntimeError("injected fault")
    return _apply(self, request_id, command)


sending.Sender.apply_request = apply_request
"""


def faulty_owner(folder: Path, ids: list[str]) -> tuple[subprocess.Popen[str], str, Hold, Path]:
    """`sim_owner` of `ids` (pool 2) whose applying of requests fails while the returned file
    exists."""
    site = folder / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAULTY_SITE)
    gate = folder / "fault"
    env = {"PYTHONPATH": str(site), "FLIGHTDECK_TEST_FAULT": str(gate)}
    owner, batch_id, hold = sim_owner(folder, ids, pool=2, env=env)
    return owner, batch_id, hold, gate


def test_a_stop_pause_or_continue_the_owner_failed_on_is_an_error_though_its_children_ended(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Found by an audit: the client called a refusal a notice (exit 0) whenever every child it
    # named had ended, whatever the owner refused it for: one it failed to apply, its children
    # ending meanwhile, read as `… had already ended`, exit 0.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.tui import client as cli_client

    # d, held throughout, keeps the batch running
    owner, batch_id, hold, gate = faulty_owner(tmp_path, ["a", "b", "c", "d"])
    db = tmp_path / "state" / "flightdeck.db"
    real_sent = cli_client.sent
    meanwhile: list[Callable[[], None]] = []

    def late_sent(client: Client, command: Command) -> int:
        """The child ends after the command's read of the batch; then the owner fails."""
        meanwhile.pop()()
        gate.touch()
        return real_sent(client, command)

    def completes(child_id: str) -> Callable[[], None]:
        def end() -> None:
            hold.release(child_id)
            until(lambda: status(tmp_path, batch_id, child_id) == "completed")

        return end

    def stopped_by_another() -> None:
        with Client(db, batch_id) as other:
            *_, done = other.follow(other.send(Stop(("c",))))
        assert done.state is RequestState.APPLIED

    def said(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--state-dir", str(tmp_path / "state")])
        gate.unlink(missing_ok=True)  # settled by now: the owner applies what comes next
        out, err = capsys.readouterr()
        return code, out, err

    failed = "flightdeck: refused: the owner could not apply it: injected fault\n"
    try:
        until(lambda: status(tmp_path, batch_id, "b") == "running")  # a too; c, d queued
        assert said("pause", batch_id, "c") == (0, "pause applied: c\n", "")
        monkeypatch.setattr(cli_client, "sent", late_sent)
        meanwhile.append(completes("a"))
        assert said("stop", batch_id, "a") == (1, "", failed)
        meanwhile.append(completes("b"))
        assert said("pause", batch_id, "b") == (1, "", failed)
        meanwhile.append(stopped_by_another)
        assert said("continue", batch_id, "c") == (1, "", failed)
        with Client(db, batch_id) as client:
            refused = [(r.kind, r.refusal) for r in map(client.request, range(1, 6))]
        assert refused == [
            ("pause", None),
            ("stop", Refusal.ERROR),
            ("pause", Refusal.ERROR),
            ("stop", None),  # another's, applied
            ("continue", Refusal.ERROR),
        ]
        # The attached TUI: a refusal, not a notice; and the notice once the owner refuses
        # the same stop only because `a` had ended.
        view = StoreView(db, batch_id, watch=False)

        def told(count: int) -> Callable[[], bool]:
            def enough() -> bool:
                view.refresh()
                return len(caplog.records) >= count

            return enough

        try:
            with caplog.at_level(logging.WARNING, logger="flightdeck.engine.attached"):
                gate.touch()
                view.send(Stop(("a",)))
                until(told(1))
                gate.unlink()
                view.send(Stop(("a",)))
                until(told(2))
        finally:
            view.close()
        assert [r.getMessage() for r in caplog.records] == [
            "stop refused: the owner could not apply it: injected fault",
            "a had already ended (completed) when the stop arrived: not stopped",
        ]
    finally:
        monkeypatch.setattr(cli_client, "sent", real_sent)
        gate.unlink(missing_ok=True)
        main(["stop", batch_id, "--all", "--state-dir", str(tmp_path / "state")])
        ended(owner, hold)


def test_a_stop_pause_or_continue_of_a_batch_that_has_ended_is_a_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `stop B c1` of a child that had ended said so, exit 0, while `stop B
    # --all` of a batch that had ended was a usage error, exit 2; and so was `stop B c1` when
    # the batch ended after the command read c1 running, before it could record the stop.
    from flightdeck.tui import client as cli_client

    owner, batch_id, hold = sim_owner(tmp_path, ["a"], pool=1)
    db = tmp_path / "state" / "flightdeck.db"
    real_sent = cli_client.sent

    def late_sent(client: Client, command: Command) -> int:
        """The batch ends after the command's read of it, before its request."""
        ended(owner, hold)
        return real_sent(client, command)

    def said(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--state-dir", str(tmp_path / "state")])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        until(lambda: status(tmp_path, batch_id, "a") == "running")
        monkeypatch.setattr(cli_client, "sent", late_sent)
        assert said("stop", batch_id, "a") == (
            0,
            f"batch {batch_id} has ended (completed): nothing left to stop\n",
            "",
        )
        monkeypatch.setattr(cli_client, "sent", real_sent)
        assert said("stop", batch_id, "a") == (0, "a: had already ended (completed)\n", "")
        for verb in ("stop", "pause", "continue"):
            args = (verb, batch_id, "--all") if verb == "stop" else (verb, batch_id)
            assert said(*args) == (
                0,
                f"batch {batch_id} has ended (completed): nothing left to {verb}\n",
                "",
            )
        with Client(db, batch_id) as client:
            assert client.owner().status.value == "completed"
        with StoreReader(db) as reader:
            assert [k for _, _, k, _ in reader.events(batch_id) if k == "stop"] == []
    finally:
        ended(owner, hold)
