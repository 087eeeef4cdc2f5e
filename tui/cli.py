"""`flightdeck` command line: the argument parser, and `main`, which runs the chosen command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from flightdeck.engine.errors import LocatedError
from flightdeck.tui.argparser import Parser, Version
from flightdeck.tui.exitcodes import ExitCode, OutputClosed, OutputFailed
from flightdeck.tui.logs import log_to_stderr
from flightdeck.tui.usage import BATCH_ID_HELP, UsageError, state_dir_arg


def _parser() -> Parser:
    p = Parser(
        prog="flightdeck",
        description="Run many LLM subagents in parallel and supervise them live.",
    )
    p.add_argument("--version", action=Version)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a batch (TUI on a terminal, plain lines otherwise)")
    run.add_argument("batch_file", type=Path, help="tasks: .jsonl, .toml or .yaml")
    run.add_argument("--config", type=Path, help="flightdeck.toml (default: ./flightdeck.toml)")
    run.add_argument(
        "--state-dir",
        type=state_dir_arg,
        help="state folder (default: $FLIGHTDECK_HOME, [engine] state_dir, ./.flightdeck)",
    )
    run.add_argument(
        "--max-concurrent",
        type=_pool_size,
        help='children alive at once: a number, or "auto" (overrides the config)',
    )
    run.add_argument(
        "--executor",
        choices=("threads", "ray"),
        help="where children's work runs: threads here, or a Ray cluster (overrides the config)",
    )
    mode = run.add_mutually_exclusive_group()  # the synopsis's [--headless | --detach]
    mode.add_argument("--headless", action="store_true", help="no TUI: print a line per child")
    mode.add_argument(
        "--detach",
        action="store_true",
        help="start the batch's owner in the background, print the batch id, return",
    )
    # The owner process `run` starts: its batch id, whose folder the parent has claimed.
    run.add_argument("--owner-of", metavar="BATCH_ID", help=argparse.SUPPRESS)

    report = sub.add_parser("report", help="metrics report of a batch (latest by default)")
    report.add_argument("batch_id", nargs="?", help="batch id (default: the latest)")
    report.add_argument("--format", choices=("json", "md"), default="md")
    report.add_argument("--state-dir", type=state_dir_arg)

    ls = sub.add_parser("ls", help="list batches with their status and cost")
    ls.add_argument("--state-dir", type=state_dir_arg)
    ls.add_argument("-l", "--long", action="store_true", help="also each batch's owner process id")
    _owner_commands(sub)
    _rework_parsers(sub)
    _attach_parsers(sub)
    return p


_WHERE_HELP = (
    "{verb} every child not ended that the query keeps, the TUI's filter language: "
    "'idle>10m status:running route:sim cost>0.50 tokens>20k error:\"rate limit\"'"
)


def _owner_commands(sub: argparse._SubParsersAction[Parser]) -> None:
    """resume, steer, answer, nudge, stop, pause, continue, wait: a batch's owner taken over,
    or sent commands from here."""
    resume = sub.add_parser("resume", help="run an abandoned batch to the end, same id")
    resume.add_argument("batch_id", help=BATCH_ID_HELP)
    resume.add_argument(
        "--no-rerun",
        action="store_true",
        help="leave children that were running when the owner died unknown",
    )
    resume.add_argument(
        "--reopen",
        action="store_true",
        help="a batch that has ended too: run what was retried in it (flightdeck retry does)",
    )
    resume.add_argument("--state-dir", type=state_dir_arg)

    steer = sub.add_parser("steer", help="send children of a running batch a message")
    steer.add_argument("batch_id", help=BATCH_ID_HELP)
    steer.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    steer.add_argument("--where", metavar="QUERY", help=_WHERE_HELP.format(verb="steer"))
    steer.add_argument(
        "-m", "--message", type=_argv_text, required=True, help="the operator's message"
    )
    steer.add_argument("--now", action="store_true", help="interrupt the current response")
    steer.add_argument("--state-dir", type=state_dir_arg)

    answer = sub.add_parser(
        "answer", help="answer the question (ask_operator) children of a running batch wait on"
    )
    answer.add_argument("batch_id", help=BATCH_ID_HELP)
    # optional to argparse, so that a batch id left out is said as such (cmd_answer)
    answer.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    answer.add_argument(
        "-m", "--message", type=_argv_text, required=True, help="the operator's answer"
    )
    answer.add_argument("--state-dir", type=state_dir_arg)

    nudge = sub.add_parser(
        "nudge", help="send the canned loop steer to children of a running batch flagged looping"
    )
    nudge.add_argument("batch_id", help=BATCH_ID_HELP)
    nudge.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    nudge.add_argument("--where", metavar="QUERY", help=_WHERE_HELP.format(verb="nudge"))
    nudge.add_argument("--state-dir", type=state_dir_arg)

    stop = sub.add_parser("stop", help="stop children of a running batch (or --all)")
    stop.add_argument("batch_id", help=BATCH_ID_HELP)
    stop.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    stop.add_argument("--all", action="store_true", help="stop every child not ended")
    stop.add_argument("--where", metavar="QUERY", help=_WHERE_HELP.format(verb="stop"))
    stop.add_argument("--state-dir", type=state_dir_arg)

    limits = sub.add_parser(
        "limits", help="print a batch's live limits, or change them while it runs (--pool, …)"
    )
    limits.add_argument("batch_id", help=BATCH_ID_HELP)
    limits.add_argument("--pool", metavar="N", help="children alive at once")
    limits.add_argument("--route", metavar="NAME", help="the route the next three change")
    limits.add_argument("--max-concurrent", metavar="N", help="the route's cap (or off)")
    limits.add_argument("--rpm", metavar="N", help="the route's requests per minute (or off)")
    limits.add_argument("--tpm", metavar="N", help="the route's tokens per minute (or off)")
    limits.add_argument(
        "--soft-cost",
        metavar="USD",
        help="the soft budget: a new one (raises it), or off (drops it for this batch)",
    )
    limits.add_argument("--state-dir", type=state_dir_arg)
    for verb, what in (("pause", "pause"), ("continue", "continue paused")):
        pause = sub.add_parser(
            verb,
            help=f"{what} children of a running batch (no child named: the batch's admission)",
        )
        pause.add_argument("batch_id", help=BATCH_ID_HELP)
        pause.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
        pause.add_argument("--where", metavar="QUERY", help=_WHERE_HELP.format(verb=verb))
        pause.add_argument("--state-dir", type=state_dir_arg)

    wait = sub.add_parser("wait", help="wait for a batch to end; exit with its exit code")
    wait.add_argument("batch_id", help=BATCH_ID_HELP)
    wait.add_argument("--state-dir", type=state_dir_arg)


def _rework_parsers(sub: argparse._SubParsersAction[Parser]) -> None:
    """retry, diff, merge and discard."""
    retry = sub.add_parser(
        "retry", help="run children that ended (failed, stopped, …) again, as a new attempt"
    )
    retry.add_argument("batch_id", help=BATCH_ID_HELP)
    retry.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    retry.add_argument(
        "--where",
        metavar="QUERY",
        help="retry every child that ended which the query keeps (the TUI's filter language)",
    )
    retry.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="work on from where it stopped (its transcript as context, or the CLI's session)",
    )
    retry.add_argument("--state-dir", type=state_dir_arg)
    diff = sub.add_parser("diff", help="print what a child changed in its own worktree")
    diff.add_argument("batch_id", help=BATCH_ID_HELP)
    # optional to argparse, so that a batch id left out is said as such (cmd_diff)
    diff.add_argument("child_id", nargs="?", help="the child's id (required)")
    diff.add_argument("--file", metavar="PATH", help="only this file")
    diff.add_argument("--state-dir", type=state_dir_arg)
    merge = sub.add_parser(
        "merge", help="commit children's changes on branches of their own, merge them into one"
    )
    merge.add_argument("batch_id", help=BATCH_ID_HELP)
    # CHILD optional to argparse, here and for discard: a batch id left out is said as such
    merge.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    merge.add_argument("--into", required=True, metavar="BRANCH", help="the branch to merge into")
    merge.add_argument("--state-dir", type=state_dir_arg)
    discard = sub.add_parser("discard", help="drop children's changes: worktree and branch")
    discard.add_argument("batch_id", help=BATCH_ID_HELP)
    discard.add_argument("child_ids", nargs="*", metavar="CHILD", default=[])
    discard.add_argument("--state-dir", type=state_dir_arg)


def _attach_parsers(sub: argparse._SubParsersAction[Parser]) -> None:
    """`attach`, `serve`, `logs` and `grep`: clients of a batch's owner process (or its
    records)."""
    attach = sub.add_parser(
        "attach", help="the TUI on a running batch (read-only once it has ended)"
    )
    attach.add_argument("batch_id", nargs="?", help="batch id (default: the latest running)")
    attach.add_argument(
        "--config",
        type=Path,
        help="flightdeck.toml for the [tui] settings and the state folder (default: "
        "./flightdeck.toml)",
    )
    attach.add_argument(
        "--read-only", action="store_true", help="watch: show everything, send no command"
    )
    attach.add_argument("--state-dir", type=state_dir_arg)
    serve = sub.add_parser("serve", help="the attached TUI in a browser, behind a random token")
    serve.add_argument("batch_id", nargs="?", help="batch id (default: the latest running)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    serve.add_argument("--port", type=_port, default=8765, help="0: any free one (%(default)s)")
    serve.add_argument("--read-only", action="store_true", help="show everything, send no command")
    serve.add_argument(
        "--config", type=Path, help="flightdeck.toml for the [tui] settings and the state folder"
    )
    serve.add_argument("--state-dir", type=state_dir_arg)
    logs = sub.add_parser("logs", help="print a child's transcript, or follow it (-f)")
    logs.add_argument("batch_id", help=BATCH_ID_HELP)
    # optional to argparse, so that a batch id left out is said as such (cmd_logs)
    logs.add_argument("child_id", nargs="?", help="the child's id (required)")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="follow the transcript until the child ends"
    )
    logs.add_argument("--state-dir", type=state_dir_arg)
    grep = sub.add_parser(
        "grep", help="search every transcript of a batch (running or ended) for a pattern"
    )
    grep.add_argument("batch_id", help=BATCH_ID_HELP)
    grep.add_argument(
        "pattern",
        metavar="PATTERN",
        help="words, matched case-insensitively from the start of a word (or --regex)",
    )
    grep.add_argument(
        "--child", action="append", metavar="CHILD", help="only this child's (repeatable)"
    )
    grep.add_argument(
        "--regex", action="store_true", help="PATTERN is a Python regex over each whole line"
    )
    grep.add_argument("--first", action="store_true", help="each child's first match only")
    grep.add_argument(
        "-m", "--max-count", type=_count, metavar="N", help="stop after N matching lines"
    )
    grep.add_argument("--state-dir", type=state_dir_arg)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, got {value}")
    return value


def _argv_text(text: str) -> str:
    # Python reads a byte that is not UTF-8 from argv as a lone surrogate (surrogateescape);
    # say which byte, not the surrogate the engine's own check would name.
    if text.isascii():
        return text
    for at, char in enumerate(text):
        if "\udc80" <= char <= "\udcff":
            byte = ord(char) - 0xDC00
            raise argparse.ArgumentTypeError(
                f"not UTF-8 text: the byte 0x{byte:02x} at character {at + 1}"
            )
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _pool_size(text: str) -> int | Literal["auto"]:
    if text == "auto":  # puts a config's fixed number back to the automatic size
        return "auto"
    from flightdeck.engine.apilight import MAX_CONCURRENT  # only when the option is given

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number or 'auto', got {text!r}"
        ) from None
    if not 1 <= value <= MAX_CONCURRENT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_CONCURRENT}, got {value}")
    return value


# Each command's module is imported when the command runs: they were most of every start's
# CPU, and `--help` or one command has no use for the others'.
_COMMANDS = {
    "run": "commands:cmd_run",
    "report": "commands:cmd_report",
    "ls": "commands:cmd_ls",
    "resume": "commands:cmd_resume",
    "steer": "client:cmd_steer",
    "answer": "client:cmd_answer",
    "nudge": "client:cmd_nudge",
    "stop": "client:cmd_stop",
    "pause": "client:cmd_pause",
    "continue": "client:cmd_pause",
    "wait": "client:cmd_wait",
    "limits": "limitscmd:cmd_limits",
    "retry": "rework:cmd_retry",
    "diff": "rework:cmd_diff",
    "merge": "rework:cmd_merge",
    "discard": "rework:cmd_discard",
    "grep": "grep:cmd_grep",
    "serve": "web.command:cmd_serve",
    "attach": "attached:cmd_attach",
    "logs": "attached:cmd_logs",
}


def _command(name: str) -> Callable[[argparse.Namespace], ExitCode]:
    """The function that runs command `name`, its module imported now."""
    module, function = _COMMANDS[name].split(":")
    run: Callable[[argparse.Namespace], ExitCode] = getattr(
        importlib.import_module(f"flightdeck.tui.{module}"), function
    )
    return run


# Arguments that name what the store holds (ids, a pattern, a query, a route, a branch), by
# their names in errors: a byte that is not UTF-8 in one reached SQLite as a lone surrogate, a
# UnicodeEncodeError's traceback. (Paths may hold such bytes: the file system takes them.)
_TEXT_ARGS = {
    "batch_id": "batch_id",
    "child_id": "child_id",
    "child_ids": "CHILD",
    "child": "--child",
    "pattern": "PATTERN",
    "where": "--where",
    "route": "--route",
    "into": "--into",
}


def _check_text(args: argparse.Namespace) -> None:
    for name, label in _TEXT_ARGS.items():
        value = getattr(args, name, None)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str):
                try:
                    _argv_text(text)
                except argparse.ArgumentTypeError as exc:
                    raise UsageError(None, None, label, str(exc)) from None


def main(argv: Sequence[str] | None = None) -> ExitCode:
    """Parse `argv` (the process's arguments by default), run the command, return its code."""
    args = _parser().parse_args(argv)
    log_to_stderr()  # a warning quoting untrusted text reaches the terminal sanitized
    try:
        _check_text(args)
        if isinstance(getattr(args, "child_ids", None), list):  # one named twice is taken once
            args.child_ids = list(dict.fromkeys(args.child_ids))
        return _command(args.command)(args)
    except LocatedError as exc:  # bad input, or a state folder that cannot be used
        _say_error(str(exc))
        return ExitCode.USAGE
    except KeyboardInterrupt:  # Ctrl+C before a batch runs (loading a big file, say)
        _say_error("interrupted")
        return ExitCode.INTERRUPTED
    except OutputClosed:  # `flightdeck report | head`: the reader has what it wanted
        return ExitCode.OUTPUT_CLOSED
    except OutputFailed as exc:  # `flightdeck report > report.md` on a full disk
        _say_error(str(exc))
        return ExitCode.INCOMPLETE


def _say_error(text: str) -> None:
    from flightdeck.engine.sanitize import one_line
    from flightdeck.tui.console import console_for
    from rich.text import Text

    console_for(stderr=True).print(Text(f"flightdeck: {one_line(text)}"))


if __name__ == "__main__":
    sys.exit(main())
