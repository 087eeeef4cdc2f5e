"""The largest (and smallest) values a number a user gives may take: what the code can use.

A duration becomes a timed wait, and Python refuses a wait past `threading.TIMEOUT_MAX` (about
292 years) with OverflowError, at run time, in a worker thread; the sim multiplies its delays
by `time_scale`. So every number is bounded when it is read, with the file, line and field.
"""

from __future__ import annotations

from decimal import Decimal

# Any duration in seconds: about 116 days. Times MAX_TIME_SCALE it is still far below a wait
# Python can make.
MAX_SECONDS = 10_000_000.0
MAX_TIME_SCALE = 100.0  # the sim's delays at most a hundred times as long as written
MIN_TOKENS_PER_S = 0.01  # the sim: one token in 100 s at most (times MAX_TIME_SCALE)
MAX_TOKENS_PER_S = 1e12
MAX_MONEY = Decimal(1_000_000_000)  # dollars: a budget or a price per million tokens
MAX_COUNT = 1_000_000_000  # rpm, tpm, max_runs: counts that only ever compare
# One worker thread per child alive. Past a few hundred threads one interpreter spends its time
# switching between them, and a mistyped 100000 would try to start that many: refused as input.
MAX_CONCURRENT = 1024  # the pool, and a route's max_concurrent
MAX_TOKENS = 10_000_000  # max_tokens of one answer
MAX_DELEGATES = 1_000  # sub-tasks one delegate call may make (each is a child)
# The `[ray]` table's: worker actors on one node, a local cluster's object store in MB.
MAX_WORKERS_PER_NODE = 64  # each runs many children; more only adds processes
MIN_OBJECT_STORE_MB = 80  # Ray refuses less than about 75 MB
MAX_OBJECT_STORE_MB = 1 << 20  # a tebibyte

# Here, not in tasks/values.py, because the settings read them too: loading flightdeck.toml
# (every reading command does) would otherwise import the whole task-file package.
MAX_TURNS_LIMIT = 200
# Characters a task's goal, context or group may hold ([engine] max_task_chars): each is copied
# into every prompt and into the store, so one pasted-in file must not be taken as a goal.
DEFAULT_MAX_TASK_CHARS = 1_000_000
# Tasks one batch file may become ([engine] max_tasks). Each task is a child with its own state
# from the start (about 14 KB of memory, and about 0.15 ms to set up): ten thousand start in
# about a second. A file of more is refused at the first task over, before the rest is read.
DEFAULT_MAX_TASKS = 10_000
MAX_TASKS_LIMIT = 1_000_000  # the most [engine] max_tasks may say
