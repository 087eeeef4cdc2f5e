"""A model child on a route with no known price that was billed nothing (its calls refused:
a 401, a 429 it was stopped in the backoff of) cost nothing and counted no tokens: `0 tok
$0.00`, not `? tok $?` as a command child whose CLI reported no usage is."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.api import Engine

from helpers import batch, flightdeck, settings, sim_route
from loopback import Loopback, Received, Reply


def test_a_model_child_billed_nothing_on_an_unpriced_route_has_zero_tokens_and_cost(
    tmp_path: Path,
) -> None:
    def answer(received: Received) -> Reply:
        refused = "refuse me" in json.dumps(received.body.get("messages"))
        return Reply(status=401, message="Unauthorized") if refused else Reply(text="done")

    with Loopback(answer) as server:
        (tmp_path / "flightdeck.toml").write_text(
            '[engine]\ndefault_route = "local"\n\n[routes.local]\nprovider = "openai"\n'
            f'model = "local-eval-7b"\nbase_url = "{server.openai_url}"\n'
        )
        (tmp_path / "t.jsonl").write_text(
            '{"id": "refused", "goal": "refuse me"}\n{"id": "answered", "goal": "answer me"}\n'
        )
        run = flightdeck("run", "t.jsonl", "--headless", cwd=tmp_path)
        report = flightdeck("report", "--format", "json", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    refused = next(line for line in run.stdout.splitlines() if "refused" in line)
    assert "api=1 tools=0  0 tok  $0.00" in refused, refused
    answered = next(line for line in run.stdout.splitlines() if "answered" in line)
    assert "$?" in answered  # billed at a price nobody knows
    assert "+?" not in run.stdout.split("──")[-1].splitlines()[1]  # the totals' tokens
    children = {c["id"]: c for c in json.loads(report.stdout)["children"]}
    assert children["refused"]["tokens_in"] == 0 and children["refused"]["cost_usd"] == 0
    assert children["answered"]["cost_usd"] is None
    assert json.loads(report.stdout)["totals"]["cost_unknown_children"] == 1


def test_a_snapshot_before_start_costs_an_unpriced_model_child_a_known_zero(tmp_path: Path) -> None:
    # The rows before start() read `$?` (and counted in the totals' unknown) for what the
    # children made of the same tasks a moment later cost a known $0.00.
    unpriced = dataclasses.replace(sim_route(), price=None)
    engine = Engine(batch(2), settings(unpriced), state_dir=tmp_path / "state")
    try:
        before = engine.snapshot()
    finally:
        engine.close()
    assert [row.cost_usd for row in before.children] == [Decimal(0), Decimal(0)]
    assert before.totals.cost_unknown == 0
