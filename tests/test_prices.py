"""Prices: genai-prices for real models, in the meter and through a whole run; a route nobody
can price runs, and its cost stays unknown instead of becoming zero."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.model import ChildStatus, Usage
from flightdeck.engine.records.meter import Meter, price_known, route_cost
from flightdeck.engine.records.reader import StoreReader

from helpers import batch, run_to_end, settings
from loopback import KEY_ENV, Loopback, Reply, route_for

M = 1_000_000


@pytest.mark.parametrize(
    ("provider", "model", "usage", "dollars"),
    [
        # Published prices per million tokens: gpt-4o-mini $0.15 in, $0.60 out, $0.075
        # cached; claude-3-5-haiku $0.80 in, $4 out.
        ("openai", "gpt-4o-mini", Usage(M, M), "0.75"),
        ("openai", "gpt-4o-mini", Usage(M, 0, cache_read_tokens=M), "0.225"),
        ("anthropic", "claude-3-5-haiku-latest", Usage(M, M), "4.80"),
    ],
)
def test_genai_prices_price_a_real_model_exactly(
    provider: str, model: str, usage: Usage, dollars: str
) -> None:
    with Loopback() as server:
        route = dataclasses.replace(route_for(server, provider), model=model, price=None)
    assert price_known(route)
    assert route_cost(usage, route) == Decimal(dollars)
    meter = Meter()
    for _ in range(3):
        meter.add_priced(usage, route_cost(usage, route))
    assert meter.totals().cost_usd == 3 * Decimal(dollars)


def _run(tmp_path: Path, model: str) -> tuple[Engine, Usage, Decimal | None]:
    with Loopback() as server:
        server.script(Reply(input_tokens=900, output_tokens=300, cache_read=100))
        route = dataclasses.replace(route_for(server, "openai"), model=model, price=None)
        engine = Engine(
            batch(1, route="openai"), settings(route), state_dir=tmp_path, env={KEY_ENV: "k"}
        )
        engine.start()
        snap = run_to_end(engine)
    [row] = snap.children
    assert row.status is ChildStatus.COMPLETED, row.error
    [stored] = StoreReader(tmp_path / "flightdeck.db").children(engine.batch_id)
    assert stored.cost_usd == row.cost_usd  # the store says what the run said
    return engine, row.usage, row.cost_usd


def test_a_real_model_is_priced_by_genai_prices_through_a_run(tmp_path: Path) -> None:
    engine, usage, cost = _run(tmp_path, "gpt-4o-mini")
    assert usage == Usage(900, 300, cache_read_tokens=100)
    assert cost == (900 * Decimal("0.15") + 300 * Decimal("0.60") + 100 * Decimal("0.075")) / M
    assert engine.snapshot().totals.cost_unknown == 0


def test_a_model_nobody_prices_runs_and_its_cost_stays_unknown(tmp_path: Path) -> None:
    engine, usage, cost = _run(tmp_path, "no-such-model-zz")
    assert usage.total == 1300  # counted all the same
    assert cost is None  # unknown, never $0
    totals = engine.snapshot().totals
    assert totals.cost_unknown == 1 and totals.usage == usage


_COMMAND_BATCH = """
import os
import sys
from pathlib import Path
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import Batch, Task

folder = Path(sys.argv[1])
settings = load_settings(folder / "flightdeck.toml")
tasks = (Task(id="t0", goal="g", seq=0), Task(id="t1", goal="g", seq=1, route="gpt"))
env = {"PATH": os.environ["PATH"]}
engine = Engine(Batch("b", tasks), settings, state_dir=folder / "state", env=env)
engine.start()
assert engine.wait(60)
rows = {row.id: row for row in engine.snapshot().children}
engine.close()
print(rows["t0"].status.value, rows["t0"].cost_usd, rows["t1"].cost_usd)
print("genai_prices" in sys.modules)
"""


def test_a_command_batch_does_not_load_the_price_tables(tmp_path: Path) -> None:
    """genai-prices prices model APIs' models, never a command's (its `model` is a program's
    name or a label, even one a model API would know): a command batch's owner does not spend
    half a second of CPU loading its tables before its first child, and its costs are as
    before: $0 for a command that bills nothing, unknown for one that may."""
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cmd"\n'
        '[routes.cmd]\nprovider = "command"\nargv = ["true"]\n'
        "price = { input_per_mtok = 1, output_per_mtok = 1 }\n"
        '[routes.gpt]\nprovider = "command"\nargv = ["true"]\nmodel = "gpt-4o-mini"\n'
    )
    done = subprocess.run(
        [sys.executable, "-c", _COMMAND_BATCH, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split("\n")[:2] == ["completed 0 None", "False"], done.stderr
