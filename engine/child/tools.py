"""The tools a child may call, scoped to the batch workspace, and the per-path lock registry."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flightdeck.engine.errors import ToolError
from flightdeck.engine.private import open_private, private_dir
from flightdeck.engine.providers.base import ToolSpec
from flightdeck.engine.sanitize import redact

MAX_READ_BYTES = 64 * 1024
MAX_LIST_ENTRIES = 500


class PathLocks:
    """One process-wide registry of per-path locks, so shared files are written one at a time."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def lock(self, path: Path) -> threading.Lock:
        key = os.path.realpath(path)
        with self._guard:
            found = self._locks.get(key)
            if found is None:
                found = self._locks[key] = threading.Lock()
            return found


PATH_LOCKS = PathLocks()

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "list_dir",
        "List the entries of a folder in the workspace. Folders end with '/'.",
        {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "relative folder"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        "read_file",
        "Read a text file in the workspace (at most 64 KiB).",
        {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "relative file path"}},
            "required": ["path"],
        },
    ),
    ToolSpec(
        "write_file",
        "Write (replace) a text file in the workspace.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "relative file path"},
                "content": {"type": "string"},
            },
            "required": ["path", "content"],
        },
    ),
)


class Toolbox:
    """Runs tool calls inside one workspace folder; paths that escape it are refused."""

    def __init__(
        self,
        workspace: Path,
        locks: PathLocks = PATH_LOCKS,
        secrets: tuple[str, ...] = (),
        *,
        private: bool = False,
    ) -> None:
        self.root = workspace.resolve()
        self._locks = locks
        # A workspace in the batch's own folder (none was given): what is written there is
        # the user's alone, as the rest of the state folder. A workspace the user named keeps
        # their umask: it is their project.
        self._private = private
        # The batch's API keys: never a legitimate payload, so never written to a file.
        self._secrets = secrets
        self._tools: Mapping[str, Callable[[Mapping[str, Any]], str]] = {
            "list_dir": self._list_dir,
            "read_file": self._read_file,
            "write_file": self._write_file,
        }

    @property
    def secrets(self) -> tuple[str, ...]:
        """The batch's API keys (every route's)."""
        return self._secrets

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return TOOL_SPECS

    def rooted(self, workspace: Path) -> Toolbox:
        """The same tools in another folder (a child's own worktree or copy)."""
        return Toolbox(workspace, self._locks, self._secrets)

    def run(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one call; raise ToolError with a message meant for the model."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}; available: {', '.join(self._tools)}")
        try:
            return tool(arguments)
        except ToolError:
            raise
        except OSError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            # Arguments are the model's: a NUL byte in a path, text that is not valid Unicode
            # (UnicodeError is a ValueError). The model is told; the child goes on.
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    def _resolve(self, arguments: Mapping[str, Any], key: str = "path") -> Path:
        raw = arguments.get(key)
        if not isinstance(raw, str) or not raw:
            raise ToolError(f"argument {key!r} must be a non-empty string")
        target = (self.root / raw).resolve()
        # resolve() follows symlinks, so a link pointing outside is refused too.
        if target != self.root and self.root not in target.parents:
            raise ToolError(f"path {raw!r} is outside the workspace")
        return target

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _list_dir(self, arguments: Mapping[str, Any]) -> str:
        folder = self._resolve(arguments)
        if not folder.is_dir():
            raise ToolError(f"{arguments['path']!r} is not a folder")
        names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in os.scandir(folder))
        more = len(names) - MAX_LIST_ENTRIES
        listing = "\n".join(names[:MAX_LIST_ENTRIES])
        return listing + (f"\n… {more} more" if more > 0 else "") if names else "(empty)"

    def _read_file(self, arguments: Mapping[str, Any]) -> str:
        path = self._resolve(arguments)
        if not path.is_file():
            raise ToolError(f"{arguments['path']!r} is not a file")
        with path.open("rb") as fh:
            data = fh.read(MAX_READ_BYTES + 1)
        text = data[:MAX_READ_BYTES].decode("utf-8", errors="replace")
        return text + ("\n… (truncated at 64 KiB)" if len(data) > MAX_READ_BYTES else "")

    def _write_file(self, arguments: Mapping[str, Any]) -> str:
        # A key in the content is redacted; one in the file's name is refused, as in a task's
        # name: "[REDACTED]" would be a name the model never gave.
        name = arguments.get("path")
        if isinstance(name, str) and (shown := self._redact(name)) != name:
            raise ToolError(f"path {shown!r} holds a value the batch redacts: name it otherwise")
        path = self._resolve(arguments)
        content = arguments.get("content")
        if not isinstance(content, str):
            raise ToolError("argument 'content' must be a string")
        if path == self.root or path.is_dir():
            # Checked first: the temp file goes beside the target, which for the workspace
            # itself is the folder above it, outside the workspace.
            raise ToolError(f"{arguments['path']!r} is a folder, not a file")
        # Encoded before any folder or file is made: a lone surrogate fails here, leaving nothing.
        data = self._redact(content).encode("utf-8")
        if self._private:
            private_dir(path.parent)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        with self._locks.lock(path):
            tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
            try:
                if self._private:
                    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    with os.fdopen(fd, "wb") as out:
                        out.write(data)
                else:
                    tmp.write_bytes(data)
                os.replace(tmp, path)  # readers never see a half-written file
            except BaseException:
                tmp.unlink(missing_ok=True)  # a full disk leaves no temp file behind
                raise
        return f"wrote {len(data)} bytes to {arguments['path']}"
