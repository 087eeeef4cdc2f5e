"""The error tree: one root and its families, drawn in errors.py's docstring."""

from __future__ import annotations

import inspect
import re

import pytest
from flightdeck.engine import errors
from flightdeck.engine.errors import (
    BrokenStream,
    CommandError,
    ConfigError,
    FatalError,
    FlightdeckError,
    InputError,
    LocatedError,
    ProviderError,
    RateLimited,
    SpecError,
    StoreError,
    ToolError,
    TransientError,
)

CLASSES = [
    value
    for value in vars(errors).values()
    if inspect.isclass(value) and value.__module__ == errors.__name__
]


def test_every_family_is_a_flightdeck_error() -> None:
    for family in (InputError, StoreError, ProviderError, ToolError):
        assert issubclass(family, FlightdeckError)
    for cls in (SpecError, ConfigError):
        assert issubclass(cls, InputError)
    assert issubclass(InputError, LocatedError) and issubclass(StoreError, LocatedError)
    for cls in (RateLimited, TransientError, FatalError):
        assert issubclass(cls, ProviderError)
    assert issubclass(BrokenStream, TransientError) and BrokenStream.retryable
    assert all(issubclass(cls, FlightdeckError) for cls in CLASSES)


def test_the_docstring_names_every_class() -> None:
    doc = errors.__doc__ or ""
    assert len(CLASSES) == 15
    for cls in CLASSES:
        assert re.search(rf"^ *\* {cls.__name__}\b", doc, re.M), cls


def test_families_stay_apart() -> None:
    # A handler for one family must not catch another's errors.
    assert not issubclass(ProviderError, LocatedError | ToolError)
    assert not issubclass(ToolError, LocatedError | ProviderError)
    assert not issubclass(InputError, ProviderError | ToolError | StoreError)
    assert not issubclass(StoreError, InputError | ProviderError | ToolError)
    # An operator command refused is a ValueError too (Engine.steer raised one before).
    assert issubclass(CommandError, ValueError) and not issubclass(CommandError, LocatedError)


def test_a_stop_is_not_a_failure() -> None:
    # `except ProviderError` around a call must not catch the stop that interrupts it.
    from flightdeck.engine.providers import base

    assert not issubclass(base.Interrupted, FlightdeckError)


def test_constructors_are_unchanged() -> None:
    error = SpecError("tasks.toml", 3, "goal", "required")
    assert (error.path, error.line, error.field, str(error)) == (
        "tasks.toml",
        3,
        "goal",
        "tasks.toml:3: goal: required",
    )
    limited = RateLimited("429", retry_after=2.0)
    assert limited.retryable and limited.retry_after == 2.0 and str(limited) == "429"
    assert not FatalError("401").retryable
    with pytest.raises(FlightdeckError):
        raise ToolError("no such file")
