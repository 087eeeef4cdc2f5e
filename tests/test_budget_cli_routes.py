"""A cost cap over agent-CLI routes with no `price`: Codex's tokens are priced by a model
genai-prices knows, so a cap over them is enforced; one it cannot price is refused, saying what
to add; Claude Code reports its own cost, so a cap over it is enforced too."""

from __future__ import annotations

import os
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import Settings, load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus, Snapshot, Usage
from flightdeck.engine.records.meter import genai_cost

from helpers import run_to_end

FAKES = Path(__file__).parent / "fakes"
CAP = "0.001"  # one turn's cost passes it
CODEX = ["exec", "--json", "{goal}"]
CLAUDE = ["-p", "--output-format", "stream-json", "--verbose", "{goal}"]


def cli_settings(tmp_path: Path, fake: str, args: list[str], route: str) -> Settings:
    """A batch config of one command route running `fake`, one child at a time, under a cap."""
    argv = repr([sys.executable, str(FAKES / fake), *args]).replace("'", '"')
    path = tmp_path / "flightdeck.toml"
    path.write_text(
        f'[engine]\ndefault_route = "cli"\n[budget]\nmax_cost_usd = {CAP}\n'
        f'[routes.cli]\nprovider = "command"\nmax_concurrent = 1\nargv = {argv}\n{route}'
    )
    return load_settings(path)


def three() -> Batch:
    return Batch(
        name="capped", tasks=tuple(Task(id=f"t{i}", goal="review", seq=i) for i in range(3))
    )


def run(tmp_path: Path, settings: Settings) -> Snapshot:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    engine = Engine(three(), settings, state_dir=tmp_path / "state", env=env)
    try:
        engine.start()
        return run_to_end(engine)
    finally:
        engine.close()


def assert_capped_after_the_first(snap: Snapshot, cost: Decimal) -> None:
    first, *rest = sorted(snap.children, key=lambda row: row.id)
    assert first.status is ChildStatus.COMPLETED, first.error
    assert first.cost_usd == cost and snap.totals.cost_usd == cost
    reason = "not started: budget of $0.001 reached"
    assert [(row.status, row.error) for row in rest] == [(ChildStatus.STOPPED, reason)] * 2


def test_a_cap_over_codex_is_enforced_at_the_price_of_a_model_genai_prices_knows(
    tmp_path: Path,
) -> None:
    # Its turns were priced at gpt-5-codex's rates, yet the cap was refused as unenforceable.
    snap = run(
        tmp_path,
        cli_settings(
            tmp_path, "fake_codex.py", CODEX, 'format = "codex-json"\nmodel = "gpt-5-codex"\n'
        ),
    )
    turn = Usage(input_tokens=500, output_tokens=300, cache_read_tokens=1500)  # the fake's
    cost = genai_cost(turn, "openai", "gpt-5-codex")
    assert cost is not None and cost > Decimal(CAP)
    assert_capped_after_the_first(snap, cost)


def test_a_cap_over_codex_with_no_price_and_no_known_model_says_what_to_add(
    tmp_path: Path,
) -> None:
    route = 'format = "codex-json"\nmodel = "codex"\n'  # a label: genai-prices knows no such model
    settings = cli_settings(tmp_path, "fake_codex.py", CODEX, route)
    with pytest.raises(ConfigError) as caught:
        Engine(three(), settings, state_dir=tmp_path / "state")
    assert str(caught.value) == (
        f"{tmp_path / 'flightdeck.toml'}:4: budget.max_cost_usd: cannot be enforced: no price "
        "is known for route 'cli' (model 'codex'); give [routes.cli] a price, or set its "
        "model to the one its CLI runs (one genai-prices knows)"
    )
    assert not (tmp_path / "state").exists()  # refused before anything was written


def test_a_cap_over_claude_code_is_enforced_at_the_cost_it_reports(tmp_path: Path) -> None:
    route = 'format = "claude-stream-json"\n'  # its model (claude-fake-4) is priced by nobody
    snap = run(tmp_path, cli_settings(tmp_path, "fake_claude.py", CLAUDE, route))
    assert_capped_after_the_first(snap, Decimal("0.0127"))  # the fake's own report
