"""The engine is headless: importing all of it pulls in no UI library. And each process imports
what it uses: a command its own modules, a reader no engine, an owner no YAML."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import flightdeck.engine
import pytest


@pytest.mark.slow
def test_engine_imports_no_textual_rich_or_tui() -> None:
    modules = [
        m.name for m in pkgutil.walk_packages(flightdeck.engine.__path__, "flightdeck.engine.")
    ]
    assert {"flightdeck.engine.control.coordinator", "flightdeck.engine.providers.sim"} <= set(
        modules
    )
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')"
        " or m.startswith('flightdeck.tui'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"engine imported UI modules: {out}"


def test_the_transcript_writer_process_starts_on_a_few_stdlib_modules() -> None:
    # It starts with every batch, beside the engine: what it imports is start-up time. `typing`
    # alone was a fifth of it.
    from flightdeck.engine.records import writerproc

    done = subprocess.run(
        [sys.executable, "-X", "importtime", *writerproc.command(8)[1:]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "flightdeck.engine.records.lines" in imported  # the listing is what it seems
    mine = sorted(m for m in imported if m.startswith("flightdeck"))
    assert mine == [
        "flightdeck",
        "flightdeck.engine",
        "flightdeck.engine.private",
        "flightdeck.engine.records",
        "flightdeck.engine.records.events",
        "flightdeck.engine.records.lines",
        "flightdeck.engine.sanitize",
    ]
    assert not imported & {"typing", "json", "logging", "threading", "subprocess"}


# A process's imports are most of its start-up CPU: commands are typed by hand and run in loops,
# and the tests start hundreds of owners and commands. Each loads what it uses: `--help` no
# command's modules, a reading command no engine, an owner no YAML reader for a JSONL batch.
# The run below prints its modules as it exits, on the last line of stderr.
_MODULES_AT_EXIT = """
import json, sys
from flightdeck.tui.entry import main
try:
    code = main()
except SystemExit as exc:  # --help
    code = exc.code
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""

# No command but `run`, `resume` and `retry` runs a batch: none needs these to start.
_OWNER_PARTS = (
    "flightdeck.engine.agents",
    "flightdeck.engine.child",
    "flightdeck.engine.control",
    "flightdeck.engine.owner",
    "flightdeck.engine.providers",
    "flightdeck.engine.inputs.tasks",
    "flightdeck.tui.headless",
)


def _run(*args: str, cwd: Path) -> tuple[int, str, set[str]]:
    """`flightdeck ARGS` in a subprocess: its exit code, its output, the modules it imported."""
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AT_EXIT, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    err, _, listed = done.stderr.rpartition("\nMODULES ")
    return done.returncode, done.stdout + err, set(json.loads(listed))


def _packages(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, set[str]]:
    """A sim batch run to its end by a headless owner: its folder, its id, the owner's modules."""
    folder = tmp_path_factory.mktemp("owner")
    (folder / "flightdeck.toml").write_text(
        '[engine]\nmax_concurrent = 2\n\n[routes.sim]\nprovider = "sim"\ntime_scale = 0.001\n'
    )
    (folder / "tasks.jsonl").write_text('{"id": "t0", "goal": "g"}\n{"id": "t1", "goal": "g"}\n')
    code, out, modules = _run("run", "tasks.jsonl", "--headless", "--state-dir", "st", cwd=folder)
    assert code == 0, out
    batch_id = out.splitlines()[0].removeprefix("batch ")
    return folder, batch_id, modules


def test_an_owner_of_a_jsonl_sim_batch_imports_no_yaml_ray_ui_or_command_child(
    ended: tuple[Path, str, set[str]],
) -> None:
    modules = ended[2]
    assert "flightdeck.engine.control.coordinator" in modules  # it ran the batch here
    assert not _packages(modules) & {"yaml", "ray", "textual"}
    assert "flightdeck.engine.inputs.tasks.yamlfile" not in modules
    # A command child's code: its process, the agent CLIs' formats, adopting one's processes
    command = ("flightdeck.engine.child.command", "flightdeck.engine.agents.formats")
    assert not {m for m in modules if m.startswith(command)}
    assert "rich.progress" not in modules  # a bar only on a terminal


def test_run_detach_checks_an_openai_batch_without_its_sdk_or_the_engine(tmp_path: Path) -> None:
    # `run` on a terminal and `run --detach` check the batch here, then start the owner that
    # runs it: the SDK (openai's import takes 1.6 s of CPU) and the coordinator are the owner's
    # to load. They were loaded twice, the first time only to check, before the screen showed.
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "gpt"\n\n[routes.gpt]\nprovider = "openai"\n'
        'model = "gpt-4o-mini"\nbase_url = "http://127.0.0.1:9/v1"\nretry = { attempts = 1 }\n'
    )
    (tmp_path / "tasks.jsonl").write_text('{"id": "t0", "goal": "g"}\n')
    code, out, modules = _run("run", "--detach", "tasks.jsonl", "--state-dir", "st", cwd=tmp_path)
    assert code == 0, out
    batch_id = out.splitlines()[0]
    try:
        assert not _packages(modules) & {"openai", "anthropic", "textual"}
        heavy = ("flightdeck.engine.control.coordinator", "flightdeck.engine.child.state")
        assert not {m for m in modules if m.startswith(heavy)}
        assert "flightdeck.engine.owner.checks" in modules  # it checked the batch here
    finally:  # the owner's one call fails at once (nothing listens there), and the batch ends
        from flightdeck.engine.records.reader import StoreReader

        from helpers import ended, until

        with StoreReader(tmp_path / "st" / "flightdeck.db") as reader:
            info = reader.batch(batch_id)
        assert info is not None and info.owner_pid is not None
        until(lambda: ended(info.owner_pid), 60, what="the detached owner gone")


def test_help_imports_no_command_and_no_rich(tmp_path: Path) -> None:
    code, out, modules = _run("ls", "--help", cwd=tmp_path)
    assert code == 0 and "--state-dir" in out
    assert not _packages(modules) & {"rich", "textual", "yaml", "psutil", "sqlite3"}
    assert not {m for m in modules if m.startswith("flightdeck.engine.attached")}
    assert not modules & {
        "flightdeck.tui.commands",
        "flightdeck.tui.client",
        "flightdeck.tui.rework",
    }


@pytest.mark.parametrize(
    ("args", "imported", "said"),
    [
        (("ls",), "flightdeck.engine.attached.store", "completed"),
        (("report", "{id}"), "flightdeck.engine.records.report", "completed"),
        # steered after its end: refused once the batch's record is read, the client's way
        (("steer", "{id}", "t0", "-m", "hi"), "flightdeck.engine.attached.client", "has ended"),
        # its reader is the transcript pane's, without the pane (Textual)
        (("logs", "{id}", "t0"), "flightdeck.tui.attached", "completed"),
    ],
)
def test_a_reading_command_starts_no_engine(
    ended: tuple[Path, str, set[str]], args: tuple[str, ...], imported: str, said: str
) -> None:
    folder, batch_id, _ = ended
    argv = [a.format(id=batch_id) for a in args]
    _, out, modules = _run(*argv, "--state-dir", "st", cwd=folder)
    assert said in out and imported in modules  # the command ran, and this lists its modules
    assert not _packages(modules) & {"textual", "yaml", "psutil", "ray", "tenacity"}
    assert not {m for m in modules if m.startswith(_OWNER_PARTS)}


def test_the_attached_app_imports_no_owner_engine() -> None:
    # What `attach` imports to run the app over the store (tui/attached.py): the view reads the
    # store; the engine's coordinator, children and owner are the owner process's.
    code = (
        "import sys\n"
        "from flightdeck.tui import attached\n"
        "from flightdeck.tui.app import FlightdeckApp\n"
        "from flightdeck.tui.lastlooked import LastLooked\n"
        "from flightdeck.tui.readonly import ReadOnlyView\n"
        "from flightdeck.engine.attached.view import StoreView\n"
        "from flightdeck.engine.apilight import TuiSettings\n"
        f"print(','.join(sorted(m for m in sys.modules if m.startswith({_OWNER_PARTS!r}))))\n"
        "print('textual.app' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[1] == "True"  # the app's modules were imported
    assert out[0] == "", f"attach imported the owner's engine: {out[0]}"


def test_every_command_the_parser_knows_has_a_function_that_loads() -> None:
    """Commands are imported by name when they run (`tui/cli.py`'s table): a command added to
    the parser and not to the table, or a name mistyped there, would fail only when run."""
    import argparse

    from flightdeck.tui import cli

    [sub] = [a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == set(cli._COMMANDS)
    for name in sub.choices:
        assert callable(cli._command(name)), name
