"""Tokens nobody counted (a command child whose CLI reports no usage) show as `?`, never 0."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flightdeck.engine.model import ChildFinished, ChildStatus
from flightdeck.tui.output import completion_text
from flightdeck.tui.widgets.columns import COLUMN_KEYS
from flightdeck.tui.widgets.rows import row_cells
from tui_fakes import NOW, child


def test_uncounted_tokens_are_unknown_and_counted_ones_are_shown(tmp_path: Path) -> None:
    ran = child(1, "g", ChildStatus.COMPLETED, folder=tmp_path, calls=1, cost=None)
    line = completion_text(ChildFinished(ran, 1, 1))
    assert " ? tok  $?" in line and " 0 tok" not in line
    tokens = COLUMN_KEYS.index("tokens")
    assert row_cells(ran, False, NOW)[tokens][0] == "?/?"
    # An unknown price with counted tokens shows the count; a child that never ran shows 0.
    counted = child(
        2, "g", ChildStatus.COMPLETED, folder=tmp_path, calls=1, tokens=(900, 100), cost=None
    )
    assert " 1.0k tok  $?" in completion_text(ChildFinished(counted, 1, 1))
    # A command child that has not run yet: its cost is unknown until it ends, its tokens 0.
    queued = dataclasses.replace(
        ran, status=ChildStatus.QUEUED, activity=dataclasses.replace(ran.activity, api_calls=0)
    )
    assert row_cells(queued, False, NOW)[tokens][0] == "0/0"
    # Stopped before it ran, it cost what earlier attempts carried into it: $0 if none ran...
    never = child(3, "g", ChildStatus.STOPPED, folder=tmp_path, cost="0")
    assert row_cells(never, False, NOW)[tokens][0] == "0/0"
    # ...unknown if one did, whose tokens nobody counted either (its calls are its own).
    carried = dataclasses.replace(never, cost_usd=None)
    assert row_cells(carried, False, NOW)[tokens][0] == "?/?"
