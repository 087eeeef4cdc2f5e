"""A file the operator gives (a batch file, a `for_each_file` list, flightdeck.toml) read as
text: its size bounded before it is read, UTF-8, each failure one error naming the file."""

from __future__ import annotations

from pathlib import Path

from flightdeck.engine.errors import InputError

# A task file (or for_each_file) larger than this is refused before it is read into memory.
MAX_FILE_BYTES = 256 * 1024 * 1024
# flightdeck.toml holds routes and settings, a few KB: one this large is another file.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def read_text(
    path: Path,
    error: type[InputError],
    max_bytes: int | None = None,
    missing: str = "file not found",
) -> str:
    """The file's text; `error` if it is missing, unreadable, over `max_bytes` (default
    MAX_FILE_BYTES) or not UTF-8 (at the line of the first byte that is not)."""
    limit = MAX_FILE_BYTES if max_bytes is None else max_bytes
    too_large = f"too large: over {limit // 2**20} MiB"
    try:
        if path.stat().st_size > limit:  # refused unread
            raise error(path, None, None, too_large)
        with path.open("rb") as fh:  # and bounded: a pipe has no size, a file may grow
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise error(path, None, None, too_large)
    except FileNotFoundError:
        raise error(path, None, None, missing) from None
    except OSError as exc:
        raise error(path, None, None, exc.strerror or str(exc)) from None
    try:
        # utf-8-sig: an editor's byte order mark is not part of the first line
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(path, line, None, "not valid UTF-8 text") from None
