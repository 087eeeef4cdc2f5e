"""A command child's process, recorded in the store as it runs (records/processes.py), and read
back as a `Record` by the owner that resumes its batch."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.agents.process import Files, Record
from flightdeck.engine.agents.tree import Pid
from flightdeck.engine.model import Usage
from flightdeck.engine.model.session import CliSession
from flightdeck.engine.records.processes import ProcessLog, ProcessRow


class StoreBook:
    """The process book of one child (child/command.py's `ProcessBook`), kept in the store."""

    def __init__(self, log: ProcessLog, child_id: str) -> None:
        self._log = log
        self._child_id = child_id
        self._read_to = (-1, -1)

    def started(
        self, record: Record, usage: Usage, cost: Decimal | None, known: Decimal, thread: Usage
    ) -> str | None:
        """A process started (held): where to find it, what the child spent before it (`known`:
        what is known of that cost), and what the CLI session it resumes had been reported to
        use; committed when this returns None, else why it could not be (it must not run)."""
        files, holder = record.files, record.holder
        self._read_to = (record.out_offset, record.err_offset)
        return self._log.started(
            ProcessRow(
                child_id=self._child_id,
                pid=record.root.pid,
                start=record.root.start,
                holder_pid=None if holder is None else holder.pid,
                holder_start=None if holder is None else holder.start,
                out_path=str(files.out),
                err_path=str(files.err),
                stdin_path=None if files.stdin is None else str(files.stdin),
                out_offset=record.out_offset,
                err_offset=record.err_offset,
                usage=usage,
                cost_usd=cost,
                known_usd=known,
                thread=thread,
            )
        )

    def read_to(self, record: Record) -> None:
        """How far its output has been read (written only when it moved)."""
        offsets = (record.out_offset, record.err_offset)
        if offsets != self._read_to:
            self._read_to = offsets
            self._log.read_to(self._child_id, *offsets)

    def ended(self) -> None:
        """It and its tree have ended."""
        self._log.ended(self._child_id)

    def session(self, session: CliSession) -> None:
        """The CLI reported its session (or its usage moved): kept for a retry that
        continues it."""
        self._log.session(self._child_id, session, time.time())


def record_of(row: ProcessRow) -> Record:
    """A stored process as the runner knows it."""
    holder = None
    if row.holder_pid is not None and row.holder_start is not None:
        holder = Pid(row.holder_pid, row.holder_start)
    stdin = None if row.stdin_path is None else Path(row.stdin_path)
    files = Files(Path(row.out_path), Path(row.err_path), stdin)
    return Record(Pid(row.pid, row.start), holder, files, row.out_offset, row.err_offset)
