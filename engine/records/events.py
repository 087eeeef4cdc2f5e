"""Transcript events, from the engine to its transcript writer, and their form on the wire.

Each event is a small frozen value. On the wire (the pipe to the writer process) a batch of
them is one frame: a header, then a marshalled list of tuples (an event's kind, then its
fields). `encode` and `decode` here are the only code that knows that form.
"""

from __future__ import annotations

import marshal
import struct
from collections.abc import Iterable
from dataclasses import dataclass

TYPE_CHECKING = False  # `typing` stays out of the writer process, which imports this module
if TYPE_CHECKING:
    from typing import TypeVar, dataclass_transform

    _T = TypeVar("_T")

    @dataclass_transform(frozen_default=True)
    def _event(cls: type[_T]) -> type[_T]:
        """Frozen to mypy; see below."""

else:

    def _event(cls: type) -> type:
        """`model.record`'s rule, here because the writer process imports this module and
        not the model: a plain slotted dataclass at run time (a frozen one sets each field
        through `object.__setattr__`, and a child sends seven events), frozen to mypy."""
        return dataclass(slots=True, unsafe_hash=True)(cls)


@_event
class Write:
    """One event by `role`; multi-line text becomes several lines with the same stamp."""

    path: str
    ts: float
    role: str
    text: str


@_event
class Stream:
    """Streamed assistant text; each line is written once it is complete."""

    path: str
    ts: float
    chunk: str


@_event
class EndStream:
    """The end of a stream: its partial last line, if any, is written (marked as cut off when
    the response was `interrupted`)."""

    path: str
    ts: float
    interrupted: bool = False


@_event
class Release:
    """The transcript is done for now: its stream ends and its file is closed."""

    path: str
    ts: float


@_event
class Raw:
    """Lines formatted already (by the engine, which redacts secrets before they leave it)."""

    path: str
    data: bytes


Event = Write | Stream | EndStream | Release | Raw

# A frame: kind and length, then the data. BATCH carries a list of events; a reader skips
# frames of other kinds.
FRAME = struct.Struct("<BI")
BATCH = 1

# On the wire an event is its kind's index here, then its fields in the order they are declared.
_KINDS = (Write, Stream, EndStream, Release, Raw)


class _Tag:  # the indexes of _KINDS
    WRITE, STREAM, END_STREAM, RELEASE, RAW = range(len(_KINDS))


def encode(events: Iterable[Event]) -> bytes:
    """One frame carrying `events`, in order."""
    # marshal: the fastest stdlib encoding of tuples of str, float and bytes (lone surrogates
    # included), and both ends run the same interpreter.
    data = marshal.dumps([_to_wire(event) for event in events])
    return FRAME.pack(BATCH, len(data)) + data


def decode(buf: bytes | bytearray) -> tuple[list[Event], int]:
    """The events of the complete frames at the start of `buf`, and how many bytes they took."""
    events: list[Event] = []
    pos, size = 0, len(buf)
    while size - pos >= FRAME.size:
        kind, length = FRAME.unpack_from(buf, pos)
        start = pos + FRAME.size
        end = start + length
        if end > size:
            break  # the rest of this frame has not arrived yet
        if kind == BATCH:
            items = marshal.loads(memoryview(buf)[start:end])
            events.extend(_KINDS[item[0]](*item[1:]) for item in items)
        pos = end
    return events, pos


def _to_wire(event: Event) -> tuple[object, ...]:
    # Class patterns without captures: positional captures cost several times more, and this
    # runs on the engine's coordinator thread for every event.
    match event:
        case Write():
            return (_Tag.WRITE, event.path, event.ts, event.role, event.text)
        case Stream():
            return (_Tag.STREAM, event.path, event.ts, event.chunk)
        case EndStream():
            return (_Tag.END_STREAM, event.path, event.ts, event.interrupted)
        case Release():
            return (_Tag.RELEASE, event.path, event.ts)
        case Raw():
            return (_Tag.RAW, event.path, event.data)
