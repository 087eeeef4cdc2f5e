"""The state folder is the user's alone: every folder flightdeck makes in it 0700, every file
0600, whatever the umask.

The modes are given where each file and folder is made, not by a process-wide umask: an umask
is inherited by agent CLIs, which write into the user's own project (whose files follow the
user's umask, not ours), and the engine runs inside other programs (the Python API), whose
umask is not ours to change. So anything new under the state folder is made through these
helpers (`private_dir`, `open_private`, `private_file`, `private_tree` for a copied tree);
tests/test_private.py walks the state folder after a batch in each mode and checks every entry.
"""

from __future__ import annotations

import os
import stat

DIR_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077  # group and other bits: none may be set


def private_dir(
    path: str | os.PathLike[str], *, exist_ok: bool = True, tighten: bool = True
) -> None:
    """Make `path` (and each missing parent) a folder only its owner can use; with `tighten`,
    an existing one others could use loses their access. FileExistsError as mkdir's without
    `exist_ok`; other OSErrors as mkdir raises them."""
    target = os.fspath(path)
    missing = []
    here = target
    while not os.path.exists(here) and os.path.dirname(here) != here:
        missing.append(here)
        here = os.path.dirname(here) or "."
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:  # made meanwhile by another process
            if folder == target and not exist_ok:
                raise
        _exactly(folder, DIR_MODE)  # mkdir's mode passes through the umask
    if not missing:
        if not exist_ok or not os.path.isdir(target):
            os.mkdir(target)  # raises FileExistsError, as mkdir does
        if tighten:
            _tighten(target)


def open_private(path: str | os.PathLike[str], flags: int) -> int:
    """`os.open(path, flags)` making a new file 0600 (an existing one others could read loses
    their access); returns the descriptor."""
    fd = os.open(path, flags, FILE_MODE)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode) and mode & _OTHERS:
            os.fchmod(fd, stat.S_IMODE(mode) & ~_OTHERS)
    except PermissionError:  # another user's file: using it fails with its own message
        pass
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_file(path: str | os.PathLike[str]) -> None:
    """Take others' access from an existing file (one SQLite or an older version made); a
    missing one is left missing."""
    _tighten(os.fspath(path))


def private_tree(root: str | os.PathLike[str]) -> None:
    """Take group and other access from every folder and file under `root` (a copied
    workspace): folders 0700, files keep their owner's bits (an executable stays one)."""
    for folder, _dirs, files in os.walk(root):
        _exactly(folder, DIR_MODE)
        for name in files:
            _tighten(os.path.join(folder, name))


def _exactly(path: str, mode: int) -> None:
    try:
        if stat.S_IMODE(os.stat(path).st_mode) != mode:
            os.chmod(path, mode)
    except (FileNotFoundError, PermissionError):  # gone, or another user's: left as it is
        pass


def _tighten(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
        if not stat.S_ISLNK(mode) and mode & _OTHERS:
            os.chmod(path, stat.S_IMODE(mode) & ~_OTHERS)
    except (FileNotFoundError, PermissionError):
        pass
