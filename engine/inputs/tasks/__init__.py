"""Task files: load and validate a batch (JSONL, TOML, YAML), with decomposition.

A TOML or YAML batch has an optional `[batch]` table (name, workspace), optional `[defaults]`
(any task field but id and goal) and a `tasks` array. An entry with `for_each = [...]` or
`for_each_file = "items.txt"` (or `.jsonl`) becomes one task per item; `{item}`, `{index}`
(1-based) and, for table items, their keys are substituted in id, goal, context and group.
A JSONL batch is one task object per line; blank lines and `#` lines are skipped.

The parts: `readers` (the three formats), `expand` (decomposition), `checks` (field
validation), `load` (structure, ids and order), `values` (Task and Batch).
"""

from __future__ import annotations

from flightdeck.engine.inputs.tasks.checks import check_routes, check_tasks
from flightdeck.engine.inputs.tasks.load import load_batch
from flightdeck.engine.inputs.tasks.values import (
    DEFAULT_MAX_TURNS,
    ID_PATTERN,
    MAX_TURNS_LIMIT,
    TASK_FIELDS,
    Batch,
    Schedule,
    Task,
    located,
)
from flightdeck.engine.inputs.text import too_long, unicode_problem

__all__ = [
    "DEFAULT_MAX_TURNS",
    "ID_PATTERN",
    "MAX_TURNS_LIMIT",
    "TASK_FIELDS",
    "Batch",
    "Schedule",
    "Task",
    "check_routes",
    "check_tasks",
    "load_batch",
    "located",
    "too_long",
    "unicode_problem",
]
