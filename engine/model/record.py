"""`record`: how every value type of the engine is declared (frozen to mypy, slotted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[_T]) -> type[_T]:
    """A value type: frozen for the type checker, a slotted dataclass at run time.

    mypy (in `make check`) rejects any assignment to a field, which is what makes these values
    safe to hand between threads. At run time `frozen=True` would route every field of every
    value built through `object.__setattr__`, a cost paid per streamed chunk, with nothing
    gained once the type checker has passed. `unsafe_hash` keeps a frozen dataclass's hash.
    """
    return dataclass(slots=True, unsafe_hash=True)(cls)
