"""flightdeck.toml + environment: routes, limits, prices, budgets, paths.

The parts: `values` (the frozen settings), `load` (reading flightdeck.toml), `checks` (one
TOML value each, with its line in errors).
"""

from __future__ import annotations

from flightdeck.engine.inputs.settings.load import load_settings, state_dir_error, state_dir_from
from flightdeck.engine.inputs.settings.values import (
    API_KEY_ENV,
    CANNED_PLACEHOLDERS,
    CONFIG_NAME,
    DEFAULT_LOOP_STEER,
    DEFAULT_ROUTE,
    DEFAULT_STATE_DIR,
    DESKTOP_NOTIFY,
    MAX_CONCURRENT,
    PROVIDERS,
    SIM_OPTION_DEFAULTS,
    SIM_PRICE,
    Budget,
    CannedSteers,
    CommandSpec,
    DesktopNotify,
    EngineSettings,
    LoopSettings,
    LoopStep,
    Price,
    ProviderName,
    RaySettings,
    RetrySettings,
    Route,
    Settings,
    TuiSettings,
    default_sim_route,
)

__all__ = [
    "API_KEY_ENV",
    "CANNED_PLACEHOLDERS",
    "CONFIG_NAME",
    "DEFAULT_LOOP_STEER",
    "DEFAULT_ROUTE",
    "DEFAULT_STATE_DIR",
    "DESKTOP_NOTIFY",
    "MAX_CONCURRENT",
    "PROVIDERS",
    "SIM_OPTION_DEFAULTS",
    "SIM_PRICE",
    "Budget",
    "CannedSteers",
    "CommandSpec",
    "DesktopNotify",
    "EngineSettings",
    "LoopSettings",
    "LoopStep",
    "Price",
    "ProviderName",
    "RaySettings",
    "RetrySettings",
    "Route",
    "Settings",
    "TuiSettings",
    "default_sim_route",
    "load_settings",
    "state_dir_error",
    "state_dir_from",
]
