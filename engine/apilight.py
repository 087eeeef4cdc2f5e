"""What the UI and scripts use of the engine besides `Engine`: the settings loader, the filter
language, outliers and error signatures of rows, forecasts, who is in which completion unit, the
transcript line format. api.py re-exports all of it beside `Engine`; a process that runs no batch
(`attach`, `serve`, the client commands) imports this one, which starts none of the engine's
machinery (its coordinator, children and owner parts)."""

from __future__ import annotations

from flightdeck.engine.inputs.settings import (
    MAX_CONCURRENT,
    DesktopNotify,
    Settings,
    TuiSettings,
    load_settings,
    state_dir_from,
)
from flightdeck.engine.model.units import Membership
from flightdeck.engine.records.forecast import Forecast, burn_rate, forecast
from flightdeck.engine.records.lines import CONTINUED, SEPARATOR, STAMP_WIDTH, parse
from flightdeck.engine.records.meter import route_totals
from flightdeck.engine.triage.needs import Need, needs
from flightdeck.engine.triage.outliers import Kind, MedianRows, Medians
from flightdeck.engine.triage.query import (
    STATUS_ALIASES,
    QueryError,
    RowFilter,
    is_retrying,
    parse_filter,
)
from flightdeck.engine.triage.signatures import error_signature

__all__ = [
    "CONTINUED",
    "MAX_CONCURRENT",
    "SEPARATOR",
    "STAMP_WIDTH",
    "STATUS_ALIASES",
    "DesktopNotify",
    "Forecast",
    "Kind",
    "MedianRows",
    "Medians",
    "Membership",
    "Need",
    "QueryError",
    "RowFilter",
    "Settings",
    "TuiSettings",
    "burn_rate",
    "error_signature",
    "forecast",
    "is_retrying",
    "load_settings",
    "needs",
    "parse",
    "parse_filter",
    "route_totals",
    "state_dir_from",
]
