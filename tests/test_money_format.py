"""One money format everywhere (`engine/money.py`): the limits' words and errors, the report,
the budget's reason; never `$5.0`, `$2.0000` beside `$2.00`."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.inputs.settings import Budget
from flightdeck.engine.model import Limits
from flightdeck.engine.model.livelimits import LimitError, changed, describe
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import batch, run_to_end, settings, sim_route, start


def test_a_soft_budget_change_reads_in_the_one_money_format() -> None:
    assert describe({"soft_cost_usd": "5.0"}) == "soft budget $5.00"
    assert describe({"soft_cost_usd": Decimal("0.5")}) == "soft budget $0.50"
    with pytest.raises(LimitError) as raised:
        changed(Limits(4, max_cost_usd=Decimal("2.0")), {"soft_cost_usd": "3"})
    assert str(raised.value).endswith("must be at most the hard budget, max_cost_usd $2.00")


def test_every_dollar_figure_of_the_report_is_in_the_one_format(tmp_path: Path) -> None:
    s = dataclasses.replace(settings(sim_route()), budget=Budget(max_cost_usd=Decimal("2.5")))
    engine = start(batch(3), s, tmp_path)
    run_to_end(engine)
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        md = render_markdown(build_report(reader, engine.batch_id))
    figures = re.findall(r"\$[0-9][0-9,]*(?:\.[0-9]+)?", md)
    assert "$2.50" in figures  # the budget (it read $2.5000)
    for figure in figures:
        assert figure == fmt_usd(Decimal(figure[1:].replace(",", ""))), figure
