"""The state folder is the user's alone: every folder 0700, every file 0600, whatever the
umask, in every mode a batch runs in (headless, --detach, an attached owner)."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.agents.workspace import Workspace
from flightdeck.engine.private import open_private, private_dir, private_file, private_tree
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.digest import Mark
from flightdeck.tui.lastlooked import LastLooked

from helpers import Hold, ended, flightdeck_process, until, wait_ended


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, which gives others read access to what is made without a mode; the
    owner processes the tests start inherit it."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(state: Path) -> dict[str, int]:
    """Every entry under the state folder (the folder itself included), and its mode."""
    found = {".": stat.S_IMODE(state.stat().st_mode)}
    for folder, dirs, files in os.walk(state):
        for name in dirs + files:
            path = Path(folder, name)
            found[str(path.relative_to(state))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def assert_private(state: Path) -> dict[str, int]:
    found = modes(state)
    wrong = {
        name: oct(mode)
        for name, mode in found.items()
        if mode != (0o700 if (state / name).is_dir() else 0o600)
    }
    assert wrong == {}, f"not the user's alone: {wrong}"
    return found


def project(folder: Path, hold: Hold) -> Path:
    (folder / "flightdeck.toml").write_text(
        '[engine]\nstate_dir = "state"\n[routes.sim]\ntime_scale = 0.001\n' + hold.toml()
    )
    (folder / "tasks.jsonl").write_text(
        "".join(f'{{"id": "c{i}", "goal": "Review item {i}"}}\n' for i in range(3))
    )
    return folder


def running(state: Path, batch_id: str) -> bool:
    """Every child of the batch is running (held), its transcript begun."""
    db = state / "flightdeck.db"
    if not db.exists():
        return False
    with StoreReader(db) as reader:
        rows = reader.children(batch_id)
    logs = [state / "batches" / batch_id / f"c{i}.log" for i in range(3)]
    return (
        len(rows) == 3
        and all(r.status.value == "running" for r in rows)
        and all(log.exists() for log in logs)
    )


def the_batch(state: Path) -> str:
    until(lambda: (state / "flightdeck.db").exists())
    with StoreReader(state / "flightdeck.db") as reader:
        until(lambda: reader.latest_batch_id() is not None)
        batch_id = reader.latest_batch_id()
    assert batch_id is not None
    return batch_id


@pytest.mark.slow
@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("mode", ["headless", "detach"])
def test_every_file_and_folder_of_a_batch_is_the_users_alone(
    tmp_path: Path, hold: Hold, mode: str
) -> None:
    folder = project(tmp_path, hold)
    state = folder / "state"
    args = ("run", "tasks.jsonl", "--headless" if mode == "headless" else "--detach")
    proc = flightdeck_process(*args, cwd=folder)
    try:
        batch_id = the_batch(state)
        until(lambda: running(state, batch_id))
        live = assert_private(state)  # while it runs: the WAL, the transcripts, the manifest
        batch = f"batches/{batch_id}"
        assert {"flightdeck.db-wal", "flightdeck.db-shm", f"{batch}/manifest.json"} <= set(live)
        assert {f"{batch}/c{i}.log" for i in range(3)} <= set(live)
        if mode == "detach":
            assert f"{batch}/owner.log" in live
        hold.release()
        if mode == "headless":
            assert proc.wait(60) == 0, proc.communicate()[1]
        else:
            assert proc.wait(60) == 0
            until(lambda: _ended(state, batch_id), 60)
            # The owner closes its files (the search index's removes its -shm) after the
            # batch's end is recorded: what is left is read once it has gone.
            with StoreReader(state / "flightdeck.db") as reader:
                info = reader.batch(batch_id)
            assert info is not None
            owner = info.owner_pid
            until(lambda: ended(owner), 60, what="the detached owner gone")
    finally:
        hold.release()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert_private(state)
    # The attached TUI's own file in the batch folder: the digest's last-looked mark.
    LastLooked(state, batch_id).write(Mark(batch_id, 1.0, Decimal("0")))
    assert_private(state)


def _ended(state: Path, batch_id: str) -> bool:
    with StoreReader(state / "flightdeck.db") as reader:
        info = reader.batch(batch_id)
    return info is not None and info.finished_ts is not None


@pytest.mark.slow
@pytest.mark.usefixtures("umask_022")
def test_an_attached_owner_started_in_the_background_keeps_the_state_folder_private(
    tmp_path: Path, hold: Hold, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `flightdeck run` on a terminal: the owner is started as the TUI's would be.
    from flightdeck.engine.attached.spawn import start_owner

    folder = project(tmp_path, hold)
    monkeypatch.chdir(folder)
    state = folder / "state"
    command = [sys.executable, "-m", "flightdeck.tui.cli", "run", "--headless"]
    command += [str(folder / "tasks.jsonl"), "--state-dir", str(state)]
    owner = start_owner([*command, "--config", str(folder / "flightdeck.toml")], state)
    try:
        until(lambda: running(state, owner.batch_id))
        assert_private(state)
        hold.release()
        until(lambda: _ended(state, owner.batch_id), 60)
    finally:
        hold.release()
        # The owner may be this process's zombie: the suite's command children made it a
        # subreaper, and the owner's launcher exits at once.
        wait_ended(owner.pid, 30)
    assert_private(state)


@pytest.mark.usefixtures("umask_022")
def test_a_state_folder_made_by_an_older_version_is_made_private(tmp_path: Path) -> None:
    from flightdeck.engine.records.store import Store

    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    Store(state / "flightdeck.db").close()
    for path in (state, state / "flightdeck.db"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    Store(state / "flightdeck.db").close()  # a database in it: a state folder, made private
    assert_private(state)
    chosen = tmp_path / "mine"  # a folder the user chose, with no database yet: left alone
    chosen.mkdir(mode=0o755)
    os.chmod(chosen, 0o755)
    Store(chosen / "flightdeck.db").close()
    assert stat.S_IMODE(chosen.stat().st_mode) == 0o755
    assert stat.S_IMODE((chosen / "flightdeck.db").stat().st_mode) == 0o600


@pytest.mark.usefixtures("umask_022")
def test_the_helpers_give_exact_modes_whatever_the_umask(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    private_dir(deep)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", deep):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    with pytest.raises(FileExistsError):
        private_dir(deep, exist_ok=False)
    (tmp_path / "a" / "file").write_text("x")
    with pytest.raises(FileExistsError):
        private_dir(tmp_path / "a" / "file")
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o755)
    private_dir(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    fd = open_private(deep / "new.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.close(fd)
    old = deep / "old.log"
    old.write_text("x")
    os.chmod(old, 0o644)
    os.close(open_private(old, os.O_WRONLY | os.O_APPEND))
    assert stat.S_IMODE((deep / "new.log").stat().st_mode) == 0o600
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    private_file(tmp_path / "missing")  # nothing to do, no error
    tree = tmp_path / "copy"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tree / "src" / "run.sh", 0o755)
    (tree / "README").write_text("x")
    private_tree(tree)
    assert stat.S_IMODE((tree / "src" / "run.sh").stat().st_mode) == 0o700  # still executable
    assert stat.S_IMODE((tree / "README").stat().st_mode) == 0o600
    assert stat.S_IMODE((tree / "src").stat().st_mode) == 0o700


@pytest.mark.usefixtures("umask_022")
def test_files_a_child_writes_in_the_batchs_own_workspace_are_private(tmp_path: Path) -> None:
    from flightdeck.engine.child.tools import Toolbox

    workspace = tmp_path / "state" / "batches" / "b" / "workspace"
    private_dir(workspace)
    own = Toolbox(workspace, private=True)
    own.run("write_file", {"path": "notes/today.md", "content": "x"})
    assert_private(tmp_path / "state")
    # A workspace the user named is their project: their umask, not ours.
    project = tmp_path / "project"
    project.mkdir()
    Toolbox(project).run("write_file", {"path": "src/new.py", "content": "x"})
    assert stat.S_IMODE((project / "src" / "new.py").stat().st_mode) == 0o644
    assert stat.S_IMODE((project / "src").stat().st_mode) == 0o755


@pytest.mark.usefixtures("umask_022")
def test_the_folder_of_the_childrens_own_workspaces_is_the_users_alone(tmp_path: Path) -> None:
    shared = tmp_path / "project"
    shared.mkdir()
    (shared / "notes.txt").write_text("x")
    batch = tmp_path / "state" / "batches" / "b1"
    private_dir(batch)
    Workspace("copy", shared, batch / "workspaces" / "c1", keep=False).prepare()
    assert stat.S_IMODE((batch / "workspaces").stat().st_mode) == 0o700
    assert (batch / "workspaces" / "c1" / "notes.txt").read_text() == "x"
