"""The README's Python example runs as written (in a folder with a fast sim config)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
ARCHITECTURE = README.parent / "docs" / "architecture.md"


def test_the_from_python_example_runs(tmp_path: Path) -> None:
    section = README.read_text(encoding="utf-8").split("### From Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    (tmp_path / "flightdeck.toml").write_text(
        # Each call waits at least 60 ms for its first token (0.6 x 400 ms x 0.25): the steer
        # sent right after start() is delivered at t0's next turn, not missed.
        "[routes.sim]\ntime_scale = 0.25\nlatency_ms = 400\ntokens_per_s = 4000\ntool_turns = 2\n",
        encoding="utf-8",
    )
    (tmp_path / "tasks.jsonl").write_text(
        "".join(f'{{"id": "t{i}", "goal": "Review item {i}"}}\n' for i in range(3)),
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    finished = [line.split() for line in lines[:3]]
    assert [f[0] for f in finished] == ["1/3", "2/3", "3/3"]
    assert sorted(f[1] for f in finished) == ["t0", "t1", "t2"]
    assert {f[2] for f in finished} == {"completed"}
    assert re.fullmatch(r"completed 3 0\.\d+", lines[3]), lines[3]
    assert lines[4] == "[<SteerState.DELIVERED: 'delivered'>]"
    assert len(lines) == 5
    assert (tmp_path / ".flightdeck" / "flightdeck.db").is_file()


def test_the_layout_map_names_every_module_and_only_real_ones() -> None:
    # Modules of engine/, tui/ and the engine's parts are named one by one; deeper folders
    # (tasks/, screens/, ...) by their folder.
    # The map lives in docs/architecture.md (the README links it).
    root = README.parent
    section = ARCHITECTURE.read_text(encoding="utf-8").split("## Layout", 1)[1]
    block = re.search(r"```\nengine/.*?```", section, re.S)
    assert block is not None
    named = set(re.findall(r"\b([a-z_]+\.py)\b", block.group(0)))
    folders = set(re.findall(r"\b([a-z_]+)/", block.group(0)))
    every = {p for folder in ("engine", "tui") for p in (root / folder).rglob("*.py")}
    assert named - {p.name for p in every} == set(), "the map names modules that do not exist"
    unnamed = set()
    for path in every:
        depth = len(path.relative_to(root).parts)
        if path.name == "__init__.py" or (depth > 3 - path.is_relative_to(root / "tui")):
            assert path.parent.name in folders, f"the map does not name {path.parent}"
        elif path.name not in named:
            unnamed.add(str(path.relative_to(root)))
    assert unnamed == set(), "modules the map does not name"
