"""Task and Batch: load and validate task files (JSONL, TOML, YAML), with decomposition."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import SpecError

DEFAULT_MAX_TURNS = 8


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work for one child."""

    id: str
    goal: str
    seq: int  # position in the batch: FIFO order
    context: str | None = None
    group: str | None = None
    route: str | None = None  # None: the settings' default route
    max_turns: int = DEFAULT_MAX_TURNS
    timeout_s: float | None = None
    source: str = ""  # "file:line" where the task was defined, for messages


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated batch: its tasks in order and where they came from."""

    name: str
    tasks: tuple[Task, ...]
    source: Path | None = None
    workspace: Path | None = None  # None: a fresh folder under the state dir


def load_batch(path: Path) -> Batch:
    """Load and validate a batch file; raise SpecError naming file, line and field."""
    raise NotImplementedError


__all__ = ["Batch", "SpecError", "Task", "load_batch"]
