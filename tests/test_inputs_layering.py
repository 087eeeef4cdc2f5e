"""engine/inputs imports no runtime part of the engine: only errors.py, sanitize.py (pure text
functions, importing nothing of flightdeck's) and itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

INPUTS = Path(__file__).resolve().parent.parent / "engine" / "inputs"
ALLOWED = ("flightdeck.engine.errors", "flightdeck.engine.sanitize", "flightdeck.engine.inputs")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_inputs_modules_import_only_errors_and_inputs() -> None:
    files = sorted(INPUTS.rglob("*.py"))
    assert len(files) > 5
    for path in files:
        ours = {name for name in _imports(path) if name.split(".")[0] == "flightdeck"}
        bad = sorted(n for n in ours if not any(n == a or n.startswith(a + ".") for a in ALLOWED))
        assert not bad, f"{path.relative_to(INPUTS.parent.parent)} imports {bad}"


def test_loading_inputs_loads_no_runtime_module() -> None:
    code = (
        "import sys\n"
        "import flightdeck.engine.inputs.settings, flightdeck.engine.inputs.tasks\n"
        "print(','.join(sorted(m for m in sys.modules if m.startswith('flightdeck.'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    loaded = out.split(",")
    assert all(m.startswith(ALLOWED) or m == "flightdeck.engine" for m in loaded), loaded
