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
    queued = dataclasses.replace(ran, activity=dataclasses.replace(ran.activity, api_calls=0))
    assert row_cells(queued, False, NOW)[tokens][0] == "0/0"
