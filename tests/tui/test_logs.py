"""The engine's warnings and errors reach the operator: one sanitized line, throttled."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from flightdeck.tui.logs import EVERY_S, forward_logs, log_to_stderr


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def shown() -> list[tuple[str, str]]:
    return []


def test_warnings_and_errors_become_one_sanitized_line(shown: list[tuple[str, str]]) -> None:
    stop = forward_logs(lambda text, severity: shown.append((text, severity)), Clock())
    try:
        store = logging.getLogger("flightdeck.engine.records.store")
        store.error("flightdeck store: %s failed: %s", "update_child", "disk\x1b[2J full\nnow")
        logging.getLogger("flightdeck.transcripts").warning("cannot start the writer (%s)", "x")
        logging.getLogger("flightdeck.engine").info("routine")  # below warning: not shown
        logging.getLogger("textual").error("not ours")  # outside flightdeck: not shown
        try:
            raise ValueError("bad\x07 value")
        except ValueError:
            logging.getLogger("flightdeck.engine").exception("engine subscriber failed")
    finally:
        stop()
    logging.getLogger("flightdeck.engine").error("after stop")  # no longer forwarded
    assert shown == [
        ("flightdeck store: update_child failed: disk full now", "error"),
        ("cannot start the writer (x)", "warning"),
        ("engine subscriber failed: ValueError: bad value", "error"),
    ]


def test_a_repeated_message_is_held_back_and_counted(shown: list[tuple[str, str]]) -> None:
    clock = Clock()
    stop = forward_logs(lambda text, severity: shown.append((text, severity)), clock)
    log = logging.getLogger("flightdeck.transcripts")
    try:
        log.error("%d transcript write(s) failed; last: %s", 1, "no space")
        clock.now = 101.0
        log.error("%d transcript write(s) failed; last: %s", 3, "no space")  # held
        log.error("transcript writer process failed (%s)", "EOF")  # another kind: shown
        clock.now = 100.0 + EVERY_S - 0.01
        log.error("%d transcript write(s) failed; last: %s", 2, "no space")  # held
        clock.now = 100.0 + EVERY_S
        log.error("%d transcript write(s) failed; last: %s", 5, "no space")
    finally:
        stop()
    assert [text for text, _ in shown] == [
        "1 transcript write(s) failed; last: no space",
        "transcript writer process failed (EOF)",
        "5 transcript write(s) failed; last: no space (2 more like this held back)",
    ]


def test_messages_logged_in_flightdeck_s_processes_leave_it_to_the_handler_to_say_whose() -> None:
    # Every command's handler (log_to_stderr, forward_logs) starts each line `flightdeck:
    # warning:`; a message written for Python's last resort, `flightdeck: ...`, read twice so.
    # A Ray worker's own process (worker.py) has no handler: its messages say whose.
    root = Path(__file__).resolve().parents[2]
    said = re.compile(r'\blog\.(?:warning|error|exception|info)\(\s*f?"flightdeck: ')
    doubled = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("engine", "tui")
        for path in sorted((root / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if said.search(line)
    ]
    assert doubled == []


def test_lines_forwarded_are_not_said_on_stderr_too_and_stderr_has_them_again_after(
    shown: list[tuple[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    # Every command logs to stderr (log_to_stderr, from main); a TUI or a headless run shows
    # the lines its own way meanwhile, and the stderr handler is set aside, not said twice.
    logger = logging.getLogger("flightdeck.tests.aside")
    log_to_stderr()
    stop = forward_logs(lambda text, severity: shown.append((text, severity)), Clock())
    try:
        logger.warning("shown \x1b[2J once")
    finally:
        stop()
    assert shown == [("shown once", "warning")]
    assert capsys.readouterr().err == ""
    logger.error("after it")
    assert capsys.readouterr().err == "flightdeck: error: after it\n"
