"""Starting a batch's owner process in the background, and knowing it started.

The hand-off: the caller validates the input (so bad input fails there, exit 2, nothing
written); this chooses the batch id and claims its folder, then starts the owner's command
(`flightdeck run --headless`, given by the caller) with that id in a session of its own (a
closed terminal, or Ctrl+C in the TUI, does not reach it). Its stdout and stderr go to
`owner.log` in the batch folder, never to a pipe this process could close. The owner is ready
once its batch row is in the store; if it exits first, its last error line is what this
process says.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.errors import InputError
from flightdeck.engine.inputs.settings import Settings, state_dir_error
from flightdeck.engine.private import private_dir
from flightdeck.engine.records.liveness import process_matches
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.rows import process_start_time
from flightdeck.engine.records.schema import StoreNotFoundError
from flightdeck.engine.sanitize import one_line

OWNER_LOG = "owner.log"
READY_TIMEOUT_S = 120.0  # loading and recording a very big batch file takes a while
END_TIMEOUT_S = 120.0  # stopping and recording every child of a very big batch takes a while
_READY_EVERY_S = 0.02


class OwnerFailed(InputError):
    """The owner process exited before its batch was recorded (its own error is the message)."""


class OwnerDidNotEnd(Exception):
    """The owner process still ran long after it was asked to end (wedged)."""

    def __init__(self, pid: int, waited_s: float) -> None:
        super().__init__(
            f"the owner process (pid {pid}) did not end within {waited_s:g}s of SIGTERM; "
            f"end it with `kill -KILL {pid}`"
        )
        self.pid = pid


@dataclass(frozen=True)
class StartedOwner:
    """A started owner process: its batch, its pid and start time (which tell it from a later
    process given the same pid), where it logs."""

    batch_id: str
    pid: int
    start: float | None  # None: it had ended before its start time could be read
    db: Path
    log: Path

    def alive(self) -> bool:
        """Whether this owner (that very process, not a later one with its pid) still runs."""
        return self.start is not None and process_matches(self.pid, self.start)


def claim_batch_folder(state_dir: Path, settings: Settings | None) -> tuple[str, Path]:
    """A fresh batch id and its folder, made here so no other run can draw the same one."""
    from flightdeck.engine.owner.batchdir import new_batch_id  # here: only `run` needs it

    batches = state_dir / "batches"
    try:
        private_dir(batches)
        while True:
            batch_id = new_batch_id()
            folder = batches / batch_id
            try:
                private_dir(folder, exist_ok=False)
                return batch_id, folder
            except FileExistsError:
                continue
    except OSError as exc:
        raise state_dir_error(state_dir, settings, exc.strerror or str(exc)) from None


# Started through a short-lived launcher, so the owner is nobody's child here: it is reaped by
# init when it ends (a zombie would still look alive), and no Popen is left unwaited.
_LAUNCH = (
    "import subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=2, stderr=2,"
    " start_new_session=True)\n"
    "print(p.pid)\n"
)


def start_owner(command: list[str], state_dir: Path) -> StartedOwner:
    """Start `command --owner-of BATCH_ID` (a headless `flightdeck run`) as the owner of a new
    batch; return once it has recorded the batch. OwnerFailed (exit 2 upstream) if it exits
    before that."""
    owner = launch_owner(command, state_dir)
    wait_ready(owner)
    return owner


def launch_owner(
    command: list[str], state_dir: Path, settings: Settings | None = None
) -> StartedOwner:
    """`start_owner` without the wait: the owner started, its batch maybe not recorded yet;
    `settings`: the config's, which may have named the state folder (said at its line)."""
    batch_id, folder = claim_batch_folder(state_dir, settings)
    try:
        return _started([*command, "--owner-of", batch_id], state_dir, batch_id)
    except OwnerFailed:
        _forget(folder)
        raise


def end_owner(owner: StartedOwner, timeout_s: float = END_TIMEOUT_S) -> str | None:
    """End an owner whose starter was interrupted before the operator could see the batch:
    SIGTERM (it stops every child and records it; before its batch is recorded it just ends),
    and wait for it to exit. The batch's status as it ended; None if it was never recorded,
    and then nothing of it is left behind. OwnerDidNotEnd if it still runs after `timeout_s`."""
    if owner.alive():  # never a signal to a later process given its pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(owner.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while owner.alive():
        if time.monotonic() > deadline:
            raise OwnerDidNotEnd(owner.pid, timeout_s)
        time.sleep(_READY_EVERY_S)
    info = None
    with contextlib.suppress(StoreNotFoundError), StoreReader(owner.db) as reader:
        info = reader.batch(owner.batch_id)
    if info is None:
        _forget(owner.log.parent)
        return None
    return info.status.value


def restart_owner(command: list[str], state_dir: Path, batch_id: str) -> StartedOwner:
    """Start `command` (a `flightdeck resume BATCH_ID --reopen`) as the new owner of a batch
    that ended or whose owner died; return once it owns the batch (its pid in the batch's row).
    OwnerFailed if it exits before that (its error line is the message)."""
    owner = _started(command, state_dir, batch_id)
    pid, log = owner.pid, owner.log
    deadline = time.monotonic() + READY_TIMEOUT_S
    with StoreReader(owner.db) as reader:
        while True:
            alive = owner.alive()  # asked first: a claim seen after it counts
            info = reader.batch(batch_id)
            if info is not None and info.owner_pid == pid:  # claimed (it may have ended since)
                return owner
            if not alive:
                message = _last_error(log) or "the owner process exited"
                raise OwnerFailed(None, None, None, message)
            if time.monotonic() > deadline:
                raise OwnerFailed(
                    None, None, None, f"the owner process (pid {pid}) did not take the batch over"
                )
            time.sleep(_READY_EVERY_S)


def _started(argv: list[str], state_dir: Path, batch_id: str) -> StartedOwner:
    """`argv` launched as the owner of `batch_id` (`_launch`), known by its pid and start
    time; OwnerFailed if it could not be."""
    log = state_dir / "batches" / batch_id / OWNER_LOG
    pid = _launch(argv, log)
    if pid is None:
        raise OwnerFailed(None, None, None, "could not start the owner process")
    return StartedOwner(batch_id, pid, process_start_time(pid), state_dir / "flightdeck.db", log)


def _launch(argv: list[str], log: Path) -> int | None:
    """`argv` started in a session of its own, its output appended to `log`; its pid."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        launched = subprocess.run(
            [sys.executable, "-S", "-c", _LAUNCH, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=fd,  # the owner's stdout and stderr: the log, never a pipe we could close
            check=False,
            start_new_session=True,  # a terminal's Ctrl+C must not end it before it says the pid
        )
    finally:
        os.close(fd)
    try:
        return int(launched.stdout)
    except ValueError:
        return None


def wait_ready(owner: StartedOwner) -> None:
    """Return once a launched owner has recorded its batch; OwnerFailed if it exits first."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    reader: StoreReader | None = None
    try:
        while True:
            alive = owner.alive()  # asked first: a batch row seen after it counts
            if reader is None:
                with contextlib.suppress(StoreNotFoundError):
                    reader = StoreReader(owner.db)
            if reader is not None and reader.batch(owner.batch_id) is not None:
                return
            if not alive:
                message = _last_error(owner.log) or "the owner process exited"
                _forget(owner.log.parent)
                raise OwnerFailed(None, None, None, message)
            if time.monotonic() > deadline:
                raise OwnerFailed(
                    None,
                    None,
                    None,
                    f"the owner process (pid {owner.pid}) did not start the batch in "
                    f"{READY_TIMEOUT_S:.0f}s; see {owner.log}",
                )
            time.sleep(_READY_EVERY_S)
    finally:
        if reader is not None:
            reader.close()


def _last_error(log: Path) -> str | None:
    """The owner's error line (`flightdeck: ...`), without the prefix the caller adds again."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        # A warning it logged on its way is no reason it ended: a traceback's last line is.
        if line.startswith("flightdeck: ") and not line.startswith("flightdeck: warning: "):
            return one_line(line.removeprefix("flightdeck: "))
    return one_line(lines[-1]) if lines else None


def _forget(folder: Path) -> None:
    """The folder of a batch that never started: nothing of it stays behind."""
    with contextlib.suppress(OSError):
        (folder / OWNER_LOG).unlink()
        folder.rmdir()
