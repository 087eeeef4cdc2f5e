"""When the operator last looked at a batch, kept on disk so a later attach can tell what is new.

One small JSON file per batch in its folder of the state directory (`batches/<id>/looked.json`),
written whole (a temporary file renamed over it) and readable by its owner only. It is the
screen's, not the store's: the store records the batch, this records one operator's attention.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from decimal import Decimal, InvalidOperation
from pathlib import Path

from flightdeck.engine.attached.store import batch_folder
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.digest import Mark

LOOKED_NAME = "looked.json"
_log = logging.getLogger(__name__)


class LastLooked:
    """The last-looked mark of one batch in a state folder."""

    def __init__(self, state_dir: Path, batch_id: str) -> None:
        self.batch_id = batch_id
        self.state_dir = state_dir
        self.path = state_dir / "batches" / batch_id / LOOKED_NAME
        self.refused = False  # a write failed: said once, not tried again (a read-only folder)

    def read(self) -> Mark | None:
        """The mark written last; None if there is none, or (with a warning) if it is unusable."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            self._unusable(str(exc))
            return None
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("batch") != self.batch_id:
                raise ValueError("not this batch's")
            ts = data["ts"]
            if not isinstance(ts, int | float) or isinstance(ts, bool):
                raise ValueError("no time in it")
            spent = Decimal(str(data["spent_usd"]))
            if not spent.is_finite():
                raise ValueError("no spend in it")
        except (ValueError, KeyError, InvalidOperation) as exc:
            self._unusable(str(exc))
            return None
        return Mark(self.batch_id, float(ts), spent)

    def write(self, mark: Mark) -> None:
        """Replace the file with `mark`, all at once; a disk that refuses is warned about, never
        raised: the digest is a convenience, not a record."""
        if self.refused:
            return
        data = {"batch": mark.batch_id, "ts": mark.ts, "spent_usd": str(mark.spent_usd)}
        try:
            folder = batch_folder(self.state_dir, self.batch_id)
            fd, tmp = tempfile.mkstemp(prefix=".looked-", suffix=".tmp", dir=folder)
        except OSError as exc:
            self._refused(exc)
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp made it 0600
                json.dump(data, out)
            os.replace(tmp, self.path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            self._refused(exc)

    def _refused(self, exc: OSError) -> None:
        self.refused = True
        _log.warning(
            "could not keep when you last looked (%s): the next attach shows no digest",
            one_line(str(exc), 200),
        )

    def _unusable(self, why: str) -> None:
        _log.warning(
            "ignored %s (%s): the digest starts from now",
            one_line(str(self.path), 200),
            one_line(why, 120),
        )
