"""`flightdeck` command line: run (TUI or headless), report, ls."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal, NoReturn

from flightdeck.engine.errors import InputError
from flightdeck.engine.model import (
    ChildFinished,
    ChildStatus,
    EngineEvent,
    Snapshot,
    Totals,
)
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.fmt import GLYPHS, fmt_cost, fmt_spent, fmt_tokens
from flightdeck.tui.logs import Severity, forward_logs
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # imported when a command needs them: `--help` stays fast
    from flightdeck.engine.api import Engine
    from flightdeck.engine.records.store import StoreReader

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
EXIT_OUTPUT_CLOSED = 141  # 128 + SIGPIPE: what a shell shows for a program a closed pipe ended
LEAVE_S = 1.0  # a second Ctrl+C waits this long for the store, and for the transcripts


class UsageError(InputError):
    """A bad command-line argument."""


class OutputClosed(Exception):
    """Whoever read our output has gone (`flightdeck run … | head -1`)."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # Rich's own answer is SystemExit(1), which reads as "some child failed".
        self.quiet = True  # nothing more is written to the closed pipe
        # Nor at exit: the interpreter's last flush would complain on stderr.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.file.fileno())
        raise OutputClosed


def _console(stderr: bool = False) -> Console:
    """Plain when piped: no colour codes, and wide enough that tables are not cut at 80."""
    console = _Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console = _Console(stderr=stderr, highlight=False, soft_wrap=True, width=200)
    return console


class _Version(argparse.Action):
    """`--version`, looked up only when asked: importlib.metadata would slow every start."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        import importlib.metadata

        try:
            version = importlib.metadata.version("flightdeck")
        except importlib.metadata.PackageNotFoundError:  # a source tree, not installed
            version = "unknown"
        sys.stdout.write(f"flightdeck {version}\n")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors made terminal-safe: "unrecognized arguments" quotes them raw,
    and a file name (a shell glob's match) can carry escape sequences."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="flightdeck",
        description="Run many LLM subagents in parallel and supervise them live.",
    )
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a batch (TUI on a terminal, plain lines otherwise)")
    run.add_argument("batch_file", type=Path, help="tasks: .jsonl, .toml or .yaml")
    run.add_argument("--config", type=Path, help="flightdeck.toml (default: ./flightdeck.toml)")
    run.add_argument("--state-dir", type=Path, help="state folder (default: ./.flightdeck)")
    run.add_argument(
        "--max-concurrent",
        type=_pool_size,
        help='children alive at once: a number, or "auto" (overrides the config)',
    )
    run.add_argument("--headless", action="store_true", help="no TUI: print a line per child")

    report = sub.add_parser("report", help="metrics report of a batch (latest by default)")
    report.add_argument("batch_id", nargs="?", help="batch id (default: the latest)")
    report.add_argument("--format", choices=("json", "md"), default="md")
    report.add_argument("--state-dir", type=Path)

    ls = sub.add_parser("ls", help="list batches with their status and cost")
    ls.add_argument("--state-dir", type=Path)
    return p


def _pool_size(text: str) -> int | Literal["auto"]:
    if text == "auto":  # puts a config's fixed number back to the automatic size
        return "auto"
    from flightdeck.engine.inputs.settings import MAX_CONCURRENT  # only when the option is given

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number or 'auto', got {text!r}"
        ) from None
    if not 1 <= value <= MAX_CONCURRENT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_CONCURRENT}, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    err = _console(stderr=True)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "report":
            return cmd_report(args)
        return cmd_ls(args)
    except InputError as exc:
        err.print(Text(f"flightdeck: {one_line(str(exc))}"))
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl+C before a batch runs (loading a big file, say)
        err.print(Text("flightdeck: interrupted"))
        return EXIT_INTERRUPTED
    except OutputClosed:  # `flightdeck report | head`: the reader has what it wanted
        return EXIT_OUTPUT_CLOSED


# --- run -----------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from flightdeck.engine.api import Engine
    from flightdeck.engine.control.pool import tune_interpreter
    from flightdeck.engine.inputs.settings import load_settings, state_dir_from
    from flightdeck.engine.inputs.tasks import load_batch

    # Everything is validated before anything is written.
    settings = load_settings(args.config)
    batch = load_batch(args.batch_file)
    engine = Engine(
        batch,
        settings,
        state_dir=state_dir_from(args.state_dir, settings),
        max_concurrent=args.max_concurrent,
    )
    tune_interpreter()
    if not args.headless and sys.stdout.isatty():
        from flightdeck.tui.app import run_app

        try:
            engine.start()
            code: int = run_app(engine)
            return code
        finally:
            engine.close()  # also after a failed start: its threads and writer process
    return run_headless(engine, _console())


def run_headless(engine: Engine, console: Console, errors: Console | None = None) -> int:
    """Print the batch id, one line per finished child, then a summary table.

    The engine's warnings and errors (a store write that failed, ...) go to `errors` (stderr by
    default) as they happen, one sanitized line each.
    """
    errors = errors or _console(stderr=True)
    notices: queue.SimpleQueue[tuple[str, Severity]] = queue.SimpleQueue()

    def show_notices() -> None:
        # Logged on engine threads, printed here: all Rich output stays on this thread.
        while True:
            try:
                text, severity = notices.get_nowait()
            except queue.Empty:
                return
            style = "red" if severity == "error" else "yellow"
            errors.print(Text(f"flightdeck: {severity}: {text}", style=style))

    stop_forwarding = forward_logs(lambda text, severity: notices.put((text, severity)))
    try:
        return _run_headless(engine, console, errors, show_notices)
    except OutputClosed:
        # The engine has closed on the way out: children still running were stopped and
        # recorded, as for Ctrl+C. Leaving them to run with nobody reading would spend money
        # unseen, and hold up the shell pipeline until the batch ends.
        what = "children still running were stopped"
        if not engine.stopped_by_stop_all:  # every child had ended: only output is lost
            what = f"the batch had {engine.status.value}"
        errors.print(Text(f"flightdeck: output closed; {what} ({report_hint(engine)})"))
        return EXIT_OUTPUT_CLOSED
    finally:
        stop_forwarding()
        show_notices()


def _run_headless(
    engine: Engine, console: Console, errors: Console, show_notices: Callable[[], None]
) -> int:
    events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()
    engine.subscribe(events.put)  # the coordinator only enqueues; this thread prints
    interrupted = started = False
    exit_code = EXIT_INTERRUPTED
    progress: Progress | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Ctrl+C, or SIGTERM (`kill`, a service manager, a CI timeout): stop every child and
        # record it, rather than leave the batch "running" in the store.
        nonlocal interrupted, exit_code
        if interrupted:
            leave_now()
        interrupted = True
        exit_code = EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED
        again = "Ctrl+C again" if signum == signal.SIGINT else "a second SIGTERM"
        console.print(Text(f"stopping all children… ({again} to force)", style="yellow"))
        if started:  # else start() has not returned yet: stopped as soon as it does
            engine.stop_all()

    def leave_now() -> NoReturn:
        """A second Ctrl+C: keep what is already recorded (a second or two at most), then go,
        without waiting for the children still stopping, or the threads that run them."""
        for signum in handled:  # a third one cannot break the exit
            signal.signal(signum, signal.SIG_IGN)
        if progress is not None:
            progress.stop()  # the terminal gets its cursor back
        engine.flush(LEAVE_S)
        show_notices()
        errors.print(
            Text("flightdeck: left without waiting for children still stopping", style="yellow")
        )
        for stream in (console.file, errors.file):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(exit_code)

    # Installed before the batch starts and until the engine has closed: a signal in between
    # (just after the batch id is printed, while the engine closes) must stop the children and
    # record it, not kill the process or raise in the middle of start() or close().
    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    try:
        try:
            batch_id = engine.start()
        except BaseException:
            engine.close()  # a failed start leaves no threads or writer process behind
            raise
        started = True
        if interrupted:  # a signal while it started
            engine.stop_all()
        console.print(Text(f"batch {batch_id}", style="bold"))
        if console.is_terminal:
            progress = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            progress.start()
            bar = progress.add_task("running", total=len(engine.batch.tasks))
        while True:
            done = engine.wait(0.1)
            finished: list[ChildFinished] = []
            while True:
                try:
                    event = events.get_nowait()
                except queue.Empty:
                    break
                if isinstance(event, ChildFinished):
                    finished.append(event)
            if finished:
                print_lines(console, finished, styled=progress is not None)
                if progress is not None:
                    progress.update(bar, completed=finished[-1].done)
            show_notices()
            if done:
                break
    finally:
        try:
            if progress is not None:
                progress.stop()
        finally:  # even if the terminal write failed: a close skipped here hangs the exit
            if started:
                engine.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            show_notices()  # what closing the store and the writer process logged
    snap = engine.snapshot()
    console.print(summary_table(snap))
    console.print(Text(f"report: {report_hint(engine)}"))
    if interrupted:
        return exit_code
    return EXIT_OK if snap.totals.completed == snap.totals.children else EXIT_FAILED


def report_hint(engine: Engine) -> str:
    """The command that shows this batch's report, to paste back into a shell."""
    # The state folder comes from the command line or flightdeck.toml: untrusted text.
    state_dir = shlex.quote(sanitize(str(engine.state_dir)))
    return f"flightdeck report {engine.batch_id} --state-dir {state_dir}"


def print_lines(console: Console, finished: list[ChildFinished], *, styled: bool) -> None:
    """The completion lines of every child that finished since the last wake-up, in one write.

    Printed line by line through Rich, 2,000 instant children ran at 2,600/s instead of the
    engine's 5,600/s: each print (measure, render, write, flush) cost more interpreter time
    than running the child. Piped output has no style to render, so it is plain text.
    """
    if styled:
        console.print(Text("\n").join(completion_line(e) for e in finished))
        return
    out = console.file
    try:
        out.write("".join([completion_text(e) + "\n" for e in finished]))
        out.flush()
    except BrokenPipeError:  # `flightdeck run … | head`: leave quietly, as Rich's prints do
        console.on_broken_pipe()


def completion_parts(event: ChildFinished) -> list[tuple[str, str]]:
    """The pieces of a completion line with their Rich styles ("" for none).

    `✓ [3/24] review-pr-104  api=4 tools=3  1.8k tok  $0.0042  2.3s`, reason on failure.
    """
    row = event.row
    glyph, style = GLYPHS[row.status]
    a = row.activity
    retries = f" retries={a.retries}" if a.retries else ""
    duration = row.duration_s
    parts = [
        (glyph, style),
        (f" [{event.done:>{len(str(event.total))}}/{event.total}] ", ""),
        (row.id, "bold"),
        (
            f"  api={a.api_calls} tools={a.tool_calls}{retries}"
            f"  {fmt_tokens(row.usage.total)} tok  {fmt_cost(row.cost_usd)}"
            + (f"  {duration:.1f}s" if duration is not None else "  -"),
            "",
        ),
    ]
    if row.status is not ChildStatus.COMPLETED:
        reason = row.status.value + (f": {row.error}" if row.error else "")
        parts.append((f"  {one_line(reason, 160)}", "red"))
    return parts


def completion_line(event: ChildFinished) -> Text:
    """A completion line, styled for a terminal."""
    return Text.assemble(*completion_parts(event))


def completion_text(event: ChildFinished) -> str:
    """A completion line as plain text, for piped output."""
    return "".join([text for text, _ in completion_parts(event)])


def summary_table(snap: Snapshot) -> Table:
    """The batch's totals, after one line per route when it used more than one."""
    from flightdeck.engine.records.meter import route_totals

    routes = route_totals(snap.children)
    by_route = len(routes) > 1
    table = Table(title=f"batch {snap.batch_id} — {snap.status.value}", title_justify="left")
    if by_route:
        table.add_column("route")
    for col in ("children", "completed", "failed", "tokens in", "tokens out", "cache read", "cost"):
        table.add_column(col, justify="right")
    if by_route:
        for r in routes:
            table.add_row(Text(one_line(r.route, 40)), *_summary_cells(r.totals))
        table.add_section()
    table.add_row(*(["total"] if by_route else []), *_summary_cells(snap.totals))
    return table


def _summary_cells(t: Totals) -> list[str]:
    u = t.usage
    return [
        str(t.children),
        str(t.completed),
        str(t.failed),
        fmt_tokens(u.input_tokens),
        fmt_tokens(u.output_tokens),
        fmt_tokens(u.cache_read_tokens),
        "".join(fmt_spent(t.cost_usd, t.cost_unknown)),
    ]


# --- report / ls ---------------------------------------------------------------------------------


def _reader(state_dir: Path | None) -> StoreReader:
    from flightdeck.engine.inputs.settings import Settings, load_settings, state_dir_from
    from flightdeck.engine.records.store import StoreReader

    # flightdeck.toml only matters when it names the state folder: a broken one in the current
    # folder must not stop a report on a state folder given by --state-dir or FLIGHTDECK_HOME.
    given = state_dir is not None or bool(os.environ.get("FLIGHTDECK_HOME"))
    folder = state_dir_from(state_dir, Settings() if given else load_settings(None))
    db = folder / "flightdeck.db"
    if not db.exists():
        raise UsageError(db, None, None, "no flightdeck state here (run a batch first)")
    if not db.is_file():
        raise UsageError(db, None, None, "not a flightdeck database (not a file)")
    return StoreReader(db)


def cmd_report(args: argparse.Namespace) -> int:
    from flightdeck.engine.records.report import build_report, render_json, render_markdown

    reader = _reader(args.state_dir)
    try:
        report = build_report(reader, args.batch_id)
    except LookupError as exc:
        raise UsageError(None, None, "batch_id", str(exc).strip("'\"")) from None
    finally:
        reader.close()
    text = render_json(report) if args.format == "json" else render_markdown(report)
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _console().on_broken_pipe()
    return EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    import time

    reader = _reader(args.state_dir)
    try:
        batches = reader.batches()
    finally:
        reader.close()
    table = Table()
    table.add_column("batch", no_wrap=True)
    for col in ("name", "status", "children", "completed", "failed", "cost", "created"):
        table.add_column(col)
    for b in batches:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(b.created_ts))
        # Compact: "$0.25+?" when some prices are unknown, "$?" when only those spent.
        cost = fmt_spent(b.cost_usd, b.cost_unknown)[0] + (
            "+?" if b.cost_unknown and b.cost_usd else ""
        )
        table.add_row(
            Text(b.id),
            Text(one_line(b.name, 30)),
            Text(b.status.value),
            str(b.children),
            str(b.completed),
            str(b.failed),
            cost,
            created,
        )
    _console().print(table)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
