"""`flightdeck steer` and `nudge` to a batch that has ended: one line saying so and its status,
exit 2, nothing recorded, whether they name children or give a query. A query said
`0 children match …: nothing to steer`, exit 0, as if the batch ran on with none to match."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.tui.cli import main

from helpers import batch, run_to_end, settings, start


@pytest.mark.parametrize(
    "args",
    [
        ("steer", "t0000", "-m", "hi"),
        ("steer", "--where", "status:running", "-m", "hi"),
        ("steer", "--where", "status:completed", "-m", "hi", "--now"),
        ("nudge", "t0001"),
        ("nudge", "--where", "is:looping"),
    ],
)
def test_a_steer_or_nudge_to_a_batch_that_has_ended_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    snap = run_to_end(start(batch(2), settings(), tmp_path))
    db = tmp_path / "state" / "flightdeck.db"
    before = db.read_bytes()
    verb, *rest = args
    assert main([verb, snap.batch_id, *rest, "--state-dir", str(tmp_path / "state")]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"flightdeck: batch {snap.batch_id} has ended (completed)\n")
    assert db.read_bytes() == before  # nothing recorded
