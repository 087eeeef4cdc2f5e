"""The settings as values: routes, limits, prices, budgets, paths."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from flightdeck.engine.inputs.bounds import DEFAULT_MAX_TASK_CHARS, DEFAULT_MAX_TASKS
from flightdeck.engine.inputs.bounds import MAX_CONCURRENT as MAX_CONCURRENT

ProviderName = Literal["sim", "openai", "anthropic", "command"]

DEFAULT_ROUTE = "sim"
DEFAULT_STATE_DIR = Path(".flightdeck")
CONFIG_NAME = "flightdeck.toml"
PROVIDERS: tuple[ProviderName, ...] = ("sim", "openai", "anthropic", "command")
API_KEY_ENV: Mapping[str, str] = MappingProxyType(
    {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
)
# What a sim route's options hold when the config leaves them out (tool_turns, cache and
# read_timeout_s stay absent: the provider derives or defaults them).
SIM_OPTION_DEFAULTS: Mapping[str, object] = MappingProxyType(
    {
        "time_scale": 1.0,
        "latency_ms": 400.0,
        "tokens_per_s": 60.0,
        "seed": 0,
        "error_rate": 0.0,
        "retry_after_s": 2.0,
        "server_error_rate": 0.0,
        "stall_rate": 0.0,
        "fail_rate": 0.0,
    }
)


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None  # None: same as input
    cache_write_per_mtok: Decimal | None = None  # None: same as input


@dataclass(frozen=True, slots=True)
class RetrySettings:
    attempts: int = 6  # total tries, the first included
    base_s: float = 1.0  # first backoff ceiling; doubles per retry (full jitter)
    max_s: float = 30.0  # cap on one backoff
    # Rate limits use no attempt: a call fails for them only once it has spent this long in
    # total throttled (its route's pause, rate buckets and concurrency, backoff after 429s).
    max_wait_s: float = 600.0


WorkspaceMode = Literal["shared", "copy", "worktree"]
OutputFormat = Literal["plain", "claude-stream-json", "codex-json"]
SteerMode = Literal["none", "stdin", "resume"]
WORKSPACE_MODES: tuple[WorkspaceMode, ...] = ("shared", "copy", "worktree")
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("plain", "claude-stream-json", "codex-json")
STEER_MODES: tuple[SteerMode, ...] = ("none", "stdin", "resume")
# What an argv template may name, each substituted as (part of) one argument, never split.
ARGV_PLACEHOLDERS = ("goal", "context", "id", "workspace")
RESUME_PLACEHOLDERS = (*ARGV_PLACEHOLDERS, "session", "message")
# Formats that report the CLI's own session id, which `steer = "resume"` continues.
SESSION_FORMATS: tuple[OutputFormat, ...] = ("claude-stream-json", "codex-json")


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """How a `provider = "command"` route runs each of its tasks as a process."""

    argv: tuple[str, ...]
    stdin: bool = False  # the prompt also goes to the process on stdin
    workspace: WorkspaceMode = "shared"
    keep_worktrees: bool = False  # keep each child's copy or worktree after it ends
    env_pass: tuple[str, ...] = ()  # environment names passed on, beyond the allowlist
    format: OutputFormat = "plain"
    kill_grace_s: float = 5.0  # after SIGTERM to the process group, before SIGKILL
    steer: SteerMode = "none"
    resume_argv: tuple[str, ...] = ()  # steer = "resume": continue {session} with {message}
    # Lines of the fields in the settings file, for errors found at start (a program not on
    # PATH, a workspace that is no git repository): field name -> line.
    lines: Mapping[str, int | None] = field(
        default_factory=lambda: MappingProxyType({}), compare=False
    )


LoopStep = Literal["nudge", "steer_now", "stop"]
LOOP_STEPS: tuple[LoopStep, ...] = ("nudge", "steer_now", "stop")


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """When a route's children count as looping (child/loops.py; 0 turns a check off), and
    what the engine does about it on its own (`policy`, one step every `policy_wait_s`)."""

    repeat_calls: int = 5  # the same (or near-same) tool call this many times in a row
    stale_turns: int = 4  # this many tool turns in a row whose results were all seen before
    # Tool turns in a row whose tokens grew while the workspace stayed the same. Off by
    # default: a reviewer that only reads never changes its workspace, and is not looping.
    still_turns: int = 0
    policy: tuple[LoopStep, ...] = ()
    policy_wait_s: float = 60.0  # from one step to the next, while the child still loops


@dataclass(frozen=True, slots=True)
class Route:
    """A named way to reach a model: provider, model, limits, price, provider options."""

    name: str
    provider: ProviderName
    model: str
    max_concurrent: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_tokens: int = 1024
    price: Price | None = None  # None: look the model up in genai-prices
    retry: RetrySettings = field(default_factory=RetrySettings)
    # The prompt-cache warm-up gate's cap in seconds (0: no gate); see control/gate.py.
    cache_gate_s: float = 0.0
    # Whether its children are offered the `delegate` tool (see child/delegate.py).
    delegate: bool = False
    # Whether its children are offered the `ask_operator` tool (see child/ask.py).
    ask_operator: bool = False
    # Provider-specific options, already validated (sim: time_scale, latency_ms, ...;
    # openai/anthropic: base_url, api_key_env, connect_timeout_s, read_timeout_s).
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Where it was configured, for messages: the line of api_key_env if given, else of
    # [routes.NAME] (None for a route not read from a file).
    key_line: int | None = field(default=None, compare=False)
    command: CommandSpec | None = None  # provider "command": the process each task runs
    loops: LoopSettings = field(default_factory=LoopSettings)
    # A model route's children's folder: the batch workspace, or each its own copy or git
    # worktree, whose changes the operator accepts or discards (a command route's is its spec's).
    workspace: WorkspaceMode = "shared"

    @property
    def own_workspace(self) -> WorkspaceMode:
        """Where each of its children works: the batch's folder, or its own copy or worktree."""
        return self.command.workspace if self.command is not None else self.workspace

    @property
    def time_scale(self) -> float:
        """Multiplier on every simulated delay (sim only; 1.0 elsewhere)."""
        return float(self.options.get("time_scale", 1.0)) if self.provider == "sim" else 1.0


ExecutorName = Literal["threads", "ray"]
EXECUTORS: tuple[ExecutorName, ...] = ("threads", "ray")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    max_concurrent: int | Literal["auto"] = "auto"
    # Where children's work runs: threads of the owner process, or a Ray cluster (`[ray]`).
    executor: ExecutorName = "threads"
    state_dir: Path = DEFAULT_STATE_DIR
    state_dir_line: int | None = field(default=None, compare=False)  # for messages
    default_route: str = DEFAULT_ROUTE
    stall_after_s: float = 120.0  # idle (no chunk, no call) outside a tool
    tool_stall_after_s: float = 600.0  # idle inside a tool
    stall_grace_s: float = 5.0  # after interrupting a stalled child, before finalizing it
    max_task_chars: int = DEFAULT_MAX_TASK_CHARS  # per goal, context or group of a task
    max_tasks: int = DEFAULT_MAX_TASKS  # tasks one batch file may become
    store_retry_s: float = 60.0  # how long a commit the disk refuses is tried again
    executor_line: int | None = field(default=None, compare=False)  # for messages


@dataclass(frozen=True, slots=True)
class Budget:
    max_cost_usd: Decimal | None = None
    max_runs: int | None = None
    max_depth: int = 2  # how deep children may delegate (0: no delegation at all)
    max_delegates: int = 8  # sub-tasks one `delegate` call may submit
    # Admission holds (and the operator is asked) once the projected cost or the spend crosses it.
    soft_cost_usd: Decimal | None = None
    # The line of max_cost_usd in the settings file, for messages (None: not from a file).
    cost_line: int | None = field(default=None, compare=False)
    soft_cost_line: int | None = field(default=None, compare=False)  # of soft_cost_usd


@dataclass(frozen=True, slots=True)
class RaySettings:
    """The `[ray]` table: the cluster children run on with `executor = "ray"`."""

    address: str = "local"  # "local" (start one here) or "auto" (join the one running here)
    num_cpus: int | None = None  # a local cluster's CPUs (None: this machine's)
    workers_per_node: int = 2  # worker actors per node, each running many children
    # A local cluster's object store: flightdeck's messages stay small, so little is needed.
    object_store_mb: int | None = 128
    line: int | None = field(default=None, compare=False)  # of [ray], for messages
    address_line: int | None = field(default=None, compare=False)  # for messages


DEFAULT_LOOP_STEER = (
    "You are repeating {summary}. Try a different approach or finish with what you have."
)
# What a canned steer may name: the looping child's evidence and its id.
CANNED_PLACEHOLDERS = ("summary", "kind", "id")


@dataclass(frozen=True, slots=True)
class CannedSteers:
    """`[steer.canned]`: the messages one key sends (`n`: `loop`, to a looping child)."""

    loop: str = DEFAULT_LOOP_STEER


DesktopNotify = Literal["off", "osc777", "osc9"]
DESKTOP_NOTIFY: tuple[DesktopNotify, ...] = ("off", "osc777", "osc9")


@dataclass(frozen=True, slots=True)
class TuiSettings:
    """The `[tui]` table: when the "since you last looked" digest shows, how alerts are given."""

    digest_idle_s: float = 300.0  # no key for this long: the digest shows (0: never on idle)
    bell: bool = True  # ring the terminal bell when a child fails or loops or a budget holds
    desktop: DesktopNotify = "off"  # a desktop notification too (OSC 777 or OSC 9), opt-in
    notify_every_s: float = 30.0  # at most one alert this often, with the counts since


@dataclass(frozen=True, slots=True)
class Settings:
    engine: EngineSettings = field(default_factory=EngineSettings)
    routes: Mapping[str, Route] = field(default_factory=lambda: MappingProxyType({}))
    budget: Budget = field(default_factory=Budget)
    canned: CannedSteers = field(default_factory=CannedSteers)
    tui: TuiSettings = field(default_factory=TuiSettings)
    ray: RaySettings = field(default_factory=RaySettings)
    source: Path | None = None

    def route(self, name: str | None) -> Route:
        return self.routes[name or self.engine.default_route]


SIM_PRICE = Price(
    input_per_mtok=Decimal("1.00"),
    output_per_mtok=Decimal("4.00"),
    cache_read_per_mtok=Decimal("0.10"),
    cache_write_per_mtok=Decimal("1.25"),
)


def default_sim_route(name: str = DEFAULT_ROUTE, **options: Any) -> Route:
    """The built-in simulated route used when no config names one."""
    return Route(
        name=name,
        provider="sim",
        model="sim-1",
        price=SIM_PRICE,
        options=MappingProxyType(dict(options)),
    )
