"""argparse as flightdeck says its errors: one line, terminal-safe, an option said where it
goes, child ids taken wherever they come after the command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import PurePath
from typing import NoReturn

from flightdeck.engine.sanitize import one_line
from flightdeck.tui.exitcodes import ExitCode


class Version(argparse.Action):
    """`--version`, looked up only when asked: importlib.metadata would slow every start."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        import importlib.metadata

        from flightdeck.tui.console import to_devnull  # rich: not for every start

        try:
            version = importlib.metadata.version("flightdeck")
        except importlib.metadata.PackageNotFoundError:  # a source tree, not installed
            version = "unknown"
        try:
            sys.stdout.write(f"flightdeck {version}\n")
            sys.stdout.flush()
        except BrokenPipeError:  # `flightdeck --version | true`: as every command says it
            to_devnull(sys.stdout)
            parser.exit(ExitCode.OUTPUT_CLOSED)
        parser.exit()


class Parser(argparse.ArgumentParser):
    """argparse, with its errors one line, as every other bad input's (the usage is what
    `--help` is for), and terminal-safe: "unrecognized arguments" quotes them raw, and a file
    name (a shell glob's match) can carry escape sequences."""

    given: Sequence[str] = ()  # the command line, which a command's parser is told

    def error(self, message: str, prog: str | None = None) -> NoReturn:
        hint = f" (see `{prog or self.prog} --help`)"
        required = "the following arguments are required: "
        missing = message.removeprefix(required).split(", ") if message.startswith(required) else []
        if any(n[:1] != "-" for n in missing):  # a word (not an option): taken for one?
            message += _read_as_option(self)
        self.exit(ExitCode.USAGE, f"flightdeck: {one_line(message)}{hint}\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        """As argparse's, but an option is said where it goes: before the command it read as
        the command ("invalid choice: '/my/state'"), and after it argparse sent every user to
        the top `--help`, which lists no command's options."""
        argv = sys.argv[1:] if args is None else list(args)
        for sub in _subcommands(self).values():
            if isinstance(sub, Parser):  # its error names a word read as an option
                sub.given = argv
        if argv and argv[0].startswith("-") and not _takes(self, argv[0]):
            self.error(*_misplaced(self, argv))
        parsed, extras = self.parse_known_args(_kept(argv), namespace)
        _restore(parsed)
        left, extras = (["--" if a == _DASHES else a for a in x] for x in _leftovers(extras))
        children = getattr(parsed, "child_ids", None)
        if isinstance(children, list):
            # Child ids after an option (`steer B -m hi c1`): argparse takes a list positional
            # in one run, and left these over as unrecognized.
            children += left
            left = []
        elif left and getattr(parsed, "child_id", "") is None:
            # `logs B -f c1`: an optional positional (logs and diff say a missing child id
            # themselves) matched nothing in the run before the option, so c1 was left over.
            parsed.child_id = left.pop(0)
        extras += left
        if extras:
            command = getattr(parsed, "command", None)
            self.error(f"unrecognized arguments: {' '.join(extras)}", f"flightdeck {command}")
        return parsed


# A `--` after the one that ends the options is a word (`grep B -- --` searches for it), but
# argparse (3.11) drops it: PATTERN read as [] (a traceback), a child id lost. Hidden from it.
_DASHES = "\0--"


def _kept(argv: list[str]) -> list[str]:
    """`argv` with every `--` after the first one hidden from argparse."""
    if "--" not in argv:
        return argv
    end = argv.index("--") + 1
    return argv[:end] + [_DASHES if a == "--" else a for a in argv[end:]]


def _restore(parsed: argparse.Namespace) -> None:
    """The hidden `--` words given back, in a value (a path: `run -- --`) or a list of them."""
    for name, value in vars(parsed).items():
        if isinstance(value, str | PurePath) and str(value) == _DASHES:
            setattr(parsed, name, type(value)("--"))
        elif isinstance(value, list):
            setattr(parsed, name, ["--" if v == _DASHES else v for v in value])


def _leftovers(extras: list[str]) -> tuple[list[str], list[str]]:
    """argparse's leftover arguments as words and options. After a `--` (POSIX: the options
    end) every one is a word, even `-x`; argparse leaves the `--` itself over once an option
    came before it (`stop B --state-dir D -- c1`)."""
    end = extras.index("--") if "--" in extras else len(extras)
    words = [a for a in extras[:end] if not a.startswith("-")] + extras[end + 1 :]
    return words, [a for a in extras[:end] if a.startswith("-")]


def _read_as_option(parser: Parser) -> str:
    """Why a word is missing when one like an option was given (`grep B --force` searches for
    nothing: argparse took `--force` for an option), and how to give it; "" otherwise."""
    end = parser.given.index("--") if "--" in parser.given else len(parser.given)
    dashed = [a for a in parser.given[:end] if a[:1] == "-" and a != "-" and not _takes(parser, a)]
    if not dashed:
        return ""
    return f"; {dashed[0]!r} reads as an option: a word that starts with '-' goes after `--`"


def _misplaced(parser: Parser, argv: list[str]) -> tuple[str, str]:
    """The error of an option given before the command (`flightdeck --state-dir D ls`), and
    whose `--help` to see."""
    option = argv[0].split("=", 1)[0]
    commands = _subcommands(parser)
    command = next((a for a in argv if a in commands), None)
    if command is None:
        return (
            f"{option}: options go after the command: `flightdeck COMMAND … {option} …`",
            "flightdeck",
        )
    prog = f"flightdeck {command}"
    if _takes(commands[command], option):
        return f"{option}: options go after the command: `{prog} … {option} …`", prog
    return f"{option}: `{prog}` has no such option", prog


def _takes(parser: argparse.ArgumentParser, arg: str) -> bool:
    """Whether `parser` reads `arg` as an option of its own, abbreviated as argparse allows
    (`--state` for `--state-dir`; one that could be several is its to say ambiguous)."""
    option = arg.split("=", 1)[0]
    names = parser._option_string_actions
    if option in names:
        return True
    long = option.startswith("--") and option != "--"
    return parser.allow_abbrev and long and any(name.startswith(option) for name in names)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}
