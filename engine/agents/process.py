"""One command run as a process in its own session, talking through files that outlive its owner.

Its stdout and stderr go to files in the batch folder, which the owner reads as they grow; its
stdin, for a route that writes to it, is a FIFO there, held open by a small holder process
(`sleep`, in a session of its own) so the command never reads the end of its input because an
owner died. A new owner
(`resume`) finds the process by its pid and start time, reopens the FIFO and reads on from the
offsets it was given: the process is adopted, not run twice.

A stop signals the process group (`os.killpg`), then every descendant found under the process
(tree.py) and every orphan of it this owner adopted as subreaper; SIGTERM, then SIGKILL. The
orphans that end are reaped here: they are this owner's children, and nothing else waits for
them.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.agents import sent, tree
from flightdeck.engine.agents.fifo import fifo, holder, reopen
from flightdeck.engine.agents.gate import Gate, mark_held, runnable
from flightdeck.engine.agents.tail import Line, Tail
from flightdeck.engine.agents.tree import Pid
from flightdeck.engine.private import private_dir

NOT_READ = "the process no longer reads its input"  # why a write to its stdin was not made


class OutputError(OSError):
    """A command's output files could not be made (a full disk, say): it never runs."""

    what = "output file"  # as the child's error names it


@dataclass(frozen=True, slots=True)
class Files:
    """Where a command child's process talks: files in its batch folder."""

    out: Path
    err: Path
    stdin: Path | None = None  # a FIFO, for a route that writes to its stdin

    @property
    def held(self) -> Path:
        """The marker of a process spawned held: emptied once it was let run (agents/gate.py)."""
        return self.out.with_suffix(".held")

    def remove(self) -> None:
        """Delete them, those that were made (the raw output may hold what the transcript
        redacted)."""
        for path in (self.out, self.err, self.stdin, self.held):
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()


@dataclass(frozen=True, slots=True)
class Record:
    """What the store keeps of a running process, for a new owner to adopt it or end it."""

    root: Pid
    holder: Pid | None
    files: Files
    out_offset: int = 0
    err_offset: int = 0


class Process:
    """A command's process, started here (`spawn`) or adopted from a dead owner (`adopt`)."""

    def __init__(
        self,
        root: Pid,
        files: Files,
        *,
        tag: str,
        popen: subprocess.Popen[bytes] | None = None,
        holder: Pid | None = None,
        stdin_fd: int | None = None,
        offsets: tuple[int, int] = (0, 0),
        output_fds: tuple[int, int] | None = None,
    ) -> None:
        self.root = root
        self.pid = root.pid
        self.files = files
        self.tag = tag
        self._popen = popen
        self.holder = holder
        self._holding: subprocess.Popen[bytes] | None = None  # the holder, if started here
        self._stdin_fd = stdin_fd
        self._stdin_lock = threading.Lock()
        out_fd, err_fd = output_fds or (None, None)
        out = Tail(files.out, "stdout", offsets[0], out_fd)
        try:
            err = Tail(files.err, "stderr", offsets[1], err_fd)
        except BaseException:  # an adopted one's stderr file gone: the first is not left open
            out.close()
            raise
        self._tails = (out, err)
        self._seen: dict[int, Pid] = {}  # descendants found under it, and its orphans, by pid
        self._gates: list[Gate] = []  # spawned held: what it (and its holder) wait on
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            fd = os.pidfd_open(root.pid)
            if popen is not None or tree.alive(root):
                self._pidfd = fd
            else:
                os.close(fd)

    # --- start and adopt -----------------------------------------------------------------------

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        files: Files,
        tag: str,
        held: bool = False,
    ) -> Process:
        """Start `argv` in a session of its own, its output to `files` (made 0600, emptied);
        `held`: it runs once `go()` lets it (its pid and start time are known before)."""
        tree.become_subreaper()
        env = {**env, tree.TAG_ENV: tag}
        if held:  # said as Popen says it, not by the shell that holds it
            runnable(argv[0], env)
        out, err = _output(files)
        marker = files.held
        stdin_r = stdin_w = None
        holding: subprocess.Popen[bytes] | None = None
        gates = [Gate()] if held else []
        try:
            if files.stdin is not None:
                stdin_r, stdin_w = fifo(files.stdin)
            # The marker's path as the owner wrote it: the shell runs in the command's cwd.
            if not gates:
                command, stdin = list(argv), subprocess.DEVNULL if stdin_r is None else stdin_r
                passed: tuple[int, ...] = ()
            elif stdin_r is None:  # the shell reads its gate on stdin, and gives it /dev/null
                command = gates[0].argv(argv, env, marker.absolute(), on_stdin=True)
                stdin, passed = gates[0].read_fd, ()
            else:
                command = gates[0].argv(argv, env, marker.absolute())
                stdin, passed = stdin_r, (gates[0].read_fd,)
            popen = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=stdin,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own session and process group: pgid == pid
                pass_fds=passed,
            )
            root = tree.identify(popen.pid) or Pid(popen.pid, -1)
            if held:  # before its record (by the caller, once this returns)
                try:
                    mark_held(marker, root)
                except BaseException:
                    gates[0].close()  # its shell exits unrun: reaped here, not left a zombie
                    popen.wait()
                    raise
            if stdin_w is not None:
                gates += [Gate()] if held else []  # nor is the holder left by a dead owner
                try:
                    holding = holder(stdin_w, env, gates[-1] if held else None)
                except OSError:  # no holder: a dead owner would end the command's input
                    holding = None
        except BaseException:
            for fd in (out, err, stdin_w):
                if fd is not None:
                    os.close(fd)
            for gate in gates:
                gate.close()
            files.remove()  # it never ran: nothing of it is left in the batch folder
            raise
        finally:
            for gate in gates:
                gate.passed()
            if stdin_r is not None:
                os.close(stdin_r)
        proc = cls(root, files, tag=tag, popen=popen, stdin_fd=stdin_w, output_fds=(out, err))
        proc._gates = gates
        if holding is not None:
            proc.holder = tree.identify(holding.pid) or Pid(holding.pid, -1)
            proc._holding = holding
        return proc

    @classmethod
    def adopt(cls, record: Record, *, tag: str) -> Process | None:
        """The recorded process and its files, its input reopened while it runs (one that has
        ended since is read to its end); None when its files are gone."""
        stdin_fd = None
        if record.files.stdin is not None and tree.alive(record.root):
            stdin_fd = reopen(record.files.stdin)
        try:
            return cls(
                record.root,
                record.files,
                tag=tag,
                holder=record.holder,
                stdin_fd=stdin_fd,
                offsets=(record.out_offset, record.err_offset),
            )
        except OSError:
            if stdin_fd is not None:
                os.close(stdin_fd)
            return None

    def go(self, run: bool = True) -> None:
        """Let a process spawned held run, or (`run=False`) end it unrun."""
        for gate in self._gates:
            if run:
                gate.open()
            else:
                gate.close()

    @property
    def adopted(self) -> bool:
        """True for a process another owner started (its exit status cannot be read)."""
        return self._popen is None

    def record(self) -> Record:
        """What the store keeps so a new owner can adopt it: offsets of whole lines read."""
        out, err = self._tails
        return Record(self.root, self.holder, self.files, out.read_to, err.read_to)

    # --- output --------------------------------------------------------------------------------

    def read(self, final: bool = False, upto: tuple[int, int] | None = None) -> list[Line]:
        """The lines written since the last read (`final`: an unfinished last line too;
        `upto`: only as far as these offsets of stdout and stderr)."""
        lines: list[Line] = []
        for i, tail in enumerate(self._tails):
            tail.read(lines, final, None if upto is None else upto[i])
        return lines

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout`, waking at once if the process exits: True if it did. Once it
        has, the waits that follow (for its descendants) sleep their time out: its pidfd
        would wake them at once, every time."""
        if self._pidfd is None:
            time.sleep(timeout)
            return False
        try:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                return False
        except (OSError, ValueError):
            return False
        with contextlib.suppress(OSError):
            os.close(self._pidfd)
        self._pidfd = None
        return True

    # --- input ---------------------------------------------------------------------------------

    def write(self, text: str) -> str | None:
        """Write to its stdin; None once written, else why it was not (closed, the process
        reads it no more, or the copy an adopting owner reads could not be kept)."""
        with self._stdin_lock:
            fd = self._stdin_fd
            if fd is None:
                return NOT_READ
            try:
                sent.write(fd, self.files.stdin, text.encode("utf-8", "replace"))
            except sent.CopyError as exc:
                return f"its input's copy could not be kept ({exc.strerror or exc})"
            except OSError:
                return NOT_READ
            return None

    def feed(self, text: str, *, then_close: bool) -> None:
        """Write `text` to its stdin from a thread of its own (a prompt larger than the FIFO
        holds would block until the process reads it, and it may never), then maybe close."""

        def write() -> None:
            self.write(text)
            if then_close:
                self.close_stdin()

        threading.Thread(target=write, name="flightdeck-stdin", daemon=True).start()

    def close_stdin(self) -> None:
        """End its input: the holder goes, and so does this end (a CLI reading user turns
        exits when its input ends)."""
        if self.holder is not None:
            tree.send(self.holder, signal.SIGKILL)
            self._reap_holder()
        with self._stdin_lock:
            if self._stdin_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._stdin_fd)
                self._stdin_fd = None

    def written(self) -> str:
        """All written to its stdin so far, by this owner or a dead one."""
        return "" if self.files.stdin is None else sent.read(self.files.stdin)

    @property
    def stdin_open(self) -> bool:
        """True while its input can still be written."""
        return self._stdin_fd is not None

    # --- the tree ------------------------------------------------------------------------------

    def poll(self) -> bool:
        """True once the process itself has exited (its descendants may still run)."""
        if self._popen is not None:
            return self._popen.poll() is not None
        return not tree.alive(self.root)

    @property
    def returncode(self) -> int | None:
        """Its exit status (negative: the signal that killed it); None while it runs, or for an
        adopted process, whose status only its parent could read."""
        return None if self._popen is None else self._popen.poll()

    def track(self) -> None:
        """Remember the descendants under it now (a stop reaches them after their parents
        have gone)."""
        if self._reaped():
            return  # nothing is under it: its children went to this owner, its subreaper
        for proc in tree.descendants(self.root):
            self._seen.setdefault(proc.pid, proc)

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to its process group, its descendants and its orphans."""
        self.track()
        self._note_orphans(tree.adopted())
        # ProcessLookupError: the group is empty (all exited).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        for proc in list(self._seen.values()):
            tree.send(proc, sig)

    def survivors(self) -> list[Pid]:
        """What is left of its tree, running (the holder aside: it goes with the input)."""
        self.poll()  # reap the process itself if it has exited
        self.track()
        among = tree.adopted()
        self._note_orphans(among)
        # Every member of its group is under it, or an orphan of it (this owner is their
        # subreaper): the group itself is never asked (a zombie would keep it "alive").
        known = list(self._seen.values()) if self._reaped() else [self.root, *self._seen.values()]
        left = [p for p in known if p != self.holder and tree.alive(p)]
        # After the look, what it found ended is a zombie: looked at again, unless none was seen.
        tree.reap(self.pid, self._seen.values(), tree.adopted() if self._seen else among)
        return left

    def reap(self) -> None:
        """Collect the exit status of its orphans that have ended (this owner is their parent
        now, and nothing else waits for them); note those running, to know them once ended:
        its descendants too (a sandbox in a session of its own, killed as the CLI exits
        without waiting for it, falls to this owner dead)."""
        self.track()
        among = tree.adopted()
        self._note_orphans(among)
        tree.reap(self.pid, self._seen.values(), among)
        # Those gone are forgotten (a zombie is kept, to be reaped): over hours of tool calls
        # they would pile up for every look, and a reused pid would be taken for a dead one.
        self._seen = {p.pid: p for p in self._seen.values() if tree.exists(p)}

    def wait_gone(self, timeout: float) -> list[Pid]:
        """Wait up to `timeout` for the tree to end; returns the survivors."""
        deadline = time.monotonic() + timeout
        while (alive := self.survivors()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return alive

    def release(self, *, remove: bool = True) -> None:
        """Close everything this owner holds of it, and (`remove`) delete its files: the raw
        output may hold what the transcript redacted."""
        self.go(run=False)  # still held: it never runs
        self.close_stdin()
        for tail in self._tails:
            tail.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(0)
        if remove:
            self.files.remove()
            if self.files.stdin is not None:
                sent.forget(self.files.stdin)

    def _note_orphans(self, among: list[tree.Adopted]) -> None:
        """Its orphans running now, kept with its descendants: once one ends, its tag can no
        longer be read, and one that left its session is known as one seen."""
        known = [self.pid, *self._seen]
        if self.holder is not None:
            known.append(self.holder.pid)
        for proc in tree.orphans(self.tag, known, among):
            self._seen.setdefault(proc.pid, proc)

    def _reaped(self) -> bool:
        """True once its `Popen` has collected its exit status: that pid is not its any more."""
        return self._popen is not None and self._popen.returncode is not None

    def _reap_holder(self) -> None:
        if self._holding is not None:
            self._holding.wait()


def _output(files: Files) -> tuple[int, int]:
    """Its stdout and stderr files, made 0600 and emptied: OutputError if they cannot be.
    Read by this owner through the same descriptors: two opens and two closes fewer a spawn,
    each a turn at the interpreter lock (the process may read what it wrote)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    try:
        try:
            out = os.open(files.out, flags, 0o600)
        except FileNotFoundError:  # the batch's first: its folder is made, the user's alone
            private_dir(files.out.parent)
            out = os.open(files.out, flags, 0o600)
        try:
            return out, os.open(files.err, flags, 0o600)
        except BaseException:  # a full disk, say: the first is not left open, nor made
            os.close(out)
            files.remove()
            raise
    except OSError as exc:
        raise OutputError(exc.errno, exc.strerror, exc.filename) from None
