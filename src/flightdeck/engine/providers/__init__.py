"""Model clients behind one Protocol (base.py); `make_provider` picks one for a route."""

from __future__ import annotations

from collections.abc import Mapping

from ..settings import Route
from .base import Provider


def make_provider(route: Route, env: Mapping[str, str] | None = None) -> Provider:
    """Build the client for `route`; SDK modules are imported only when a route uses them."""
    if route.provider == "sim":
        from .sim import SimProvider

        return SimProvider(route)
    raise NotImplementedError(f"provider {route.provider!r} is not available yet")
