"""Joining the Ray cluster `[ray] address` names: "local" starts one in this process, "auto"
joins the one running on this machine (or at `RAY_ADDRESS`). A cluster that cannot be joined is
a ConfigError on `ray.address`: found before the batch writes anything when nothing answers, before
any child starts when the cluster refuses this process (a token it asks for, another version),
the batch's folder then removed again (owner/batchdir.py's `Claimed`)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import RaySettings
from flightdeck.engine.inputs.settings.cluster import RAY_CLIENT
from flightdeck.engine.private import open_private, private_dir
from flightdeck.engine.sanitize import last_line, one_line

# How ray.init itself finds "auto"'s address (RAY_ADDRESS, then a `ray start` cluster's file):
# private, but the same code path, within the `ray>=2.60,<3` the extra pins.
from ray._private.services import canonicalize_bootstrap_address
from ray.exceptions import AuthenticationError

log = logging.getLogger(__name__)

ANSWER_S = 5.0  # how long a cluster's address may take to accept a connection

START_ONE = 'start one (`ray start --head`), or use address = "local" to start one for the batch'


def join_address(settings: RaySettings, source: Path | None) -> str:
    """The address of the running cluster "auto" finds, as `ray.init` finds it; ConfigError if
    there is none or nothing answers there (`ray.init` alone waits over 10 minutes)."""
    where = (source, settings.address_line, "ray.address")
    if settings.address.startswith("ray://"):  # a batch stored before it was refused
        raise ConfigError(*where, RAY_CLIENT)
    # "auto" takes RAY_ADDRESS first: an error about it names it, as the file does not show it.
    given = one_line(os.environ.get("RAY_ADDRESS", ""))
    named = f" (RAY_ADDRESS={given})" if given else ""
    if given.startswith("ray://"):
        raise ConfigError(*where, f"RAY_ADDRESS={given}: {RAY_CLIENT}")
    try:
        found = canonicalize_bootstrap_address(settings.address)
    except ConnectionError:  # no RAY_ADDRESS, no `ray start` cluster on this machine
        raise ConfigError(
            *where, f'"auto" found no Ray cluster running here: {START_ONE}'
        ) from None
    except ValueError as exc:  # a RAY_ADDRESS that is no address
        if not given:
            raise ConfigError(*where, f"cannot join a Ray cluster: {one_line(str(exc))}") from None
        found = None
    if found is None:
        raise ConfigError(
            *where, f"RAY_ADDRESS must be the host:port of a Ray cluster's head, got {given!r}"
        )
    host, _, port = found.rpartition(":")
    try:
        said = first_words(host.strip("[]"), int(port))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            *where, f"no Ray cluster answers at {found}{named} ({exc}): {START_ONE}"
        ) from None
    if said is None:
        raise ConfigError(*where, f"no Ray cluster answers at {found}{named}: {SILENT}")
    # With RAY_USE_TLS the GCS expects TLS, and answers these plain words with an alert.
    tls = os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true")
    if said[3:4] != SETTINGS and not tls:
        raise ConfigError(*where, f"what answers at {found}{named} {NOT_GRPC}")
    return found


# The HTTP/2 client preface and an empty SETTINGS frame: a head's GCS (gRPC) sends its own
# SETTINGS frame back at once. ray.init waited 10 minutes and more on a listener that never
# answers, or on one that answers but speaks no gRPC (the dashboard's HTTP, say).
HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS = b"\x04"  # an HTTP/2 frame's type, its fourth byte
GCS_PORT = "the head's GCS port (the one `ray start --head` prints, 6379 by default)"
SILENT = (
    f"something accepts connections there but did not answer in {ANSWER_S:g} s: check that it "
    f"is {GCS_PORT} and that the head is not stopped or overloaded"
)
NOT_GRPC = (
    f"is not a Ray cluster (it does not speak gRPC): check that it is {GCS_PORT}, not the "
    "dashboard's (8265) or another program's"
)


def first_words(host: str, port: int) -> bytes | None:
    """The first bytes (up to 4) of what listens at host:port answers a gRPC client's first
    words with (fewer if it closed); None if it said nothing in ANSWER_S; OSError if nothing
    listens there."""
    deadline = time.monotonic() + ANSWER_S
    said = b""
    with socket.create_connection((host, port), timeout=ANSWER_S) as conn:
        conn.sendall(HELLO)
        while len(said) < 4:
            conn.settimeout(max(0.01, deadline - time.monotonic()))  # 0 would not wait
            try:
                chunk = conn.recv(4 - len(said))
            except TimeoutError:
                return said or None
            if not chunk:  # closed
                break
            said += chunk
    return said


def errors_to_log() -> None:
    """Ray's driver prints what the cluster publishes to every driver (a raylet that ended, a
    node marked dead: each with 20 lines of its log) on this process's stdout, which a headless
    run keeps for its own lines, even with `log_to_driver=False`. Each goes to the log instead,
    its first line alone: the executor says what a lost node cost its children."""
    import ray._private.worker as driver  # its listener looks this name up for each message

    def to_log(data: dict[str, Any], ignore_prefix: bool) -> None:
        lines = [line.strip() for each in data.get("lines", ()) for line in str(each).split("\n")]
        first = next((line for line in lines if line), None)
        if first is not None:
            log.warning("Ray (%s): %s", data.get("pid", "?"), first)

    driver.print_to_stdstream = to_log


# Where Ray says, on every run's stderr, that token authentication is on ("Set
# RAY_AUTH_MODE=disabled to opt out"): Ray's default, which flightdeck keeps and docs/ray.md
# describes. Its only other line, that tokens are off, Ray never prints for how this joins.
RAY_TOKEN_NOTICE = "ray._private.authentication.authentication_token_setup"


def connect(settings: RaySettings, source: Path | None) -> bool:
    """Start a local cluster, or join the one at `settings.address` (ConfigError if none).
    True if Ray turned token authentication on by itself as it joined (see TOKEN_IMPLIED)."""
    errors_to_log()
    logging.getLogger(RAY_TOKEN_NOTICE).setLevel(logging.ERROR)
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    if settings.address == "local":
        kwargs["num_cpus"] = settings.num_cpus
        if settings.object_store_mb is not None:
            kwargs["object_store_memory"] = settings.object_store_mb * 1024 * 1024
        private_token()
        try:
            # Named, not left out: without an address Ray joins the cluster a `ray start` left
            # on this machine (and refuses num_cpus for it) instead of starting one.
            ray.init(address="local", **kwargs)
        except ValueError as exc:
            # Ray checks the node's resources against this machine's first (an object store
            # larger than its memory, say) and says so in terms of ray.init's arguments.
            ray.shutdown()
            raise ConfigError(
                source,
                settings.line,
                "ray",
                f"cannot start a local Ray cluster: {one_line(str(exc), 400)} ([ray] "
                "object_store_mb and num_cpus set what ray.init is given here: within this "
                "machine's memory and CPUs)",
            ) from None
        return False
    # Checked again here: the cluster may have ended since the engine was made.
    address = join_address(settings, source)
    chosen = os.environ.get(AUTH_MODE)
    try:
        # "auto", not the address found: Ray then joins as its own "auto" does, which also
        # takes the token of a cluster with token authentication (~/.ray/auth_token) when it
        # found the cluster on this machine.
        with core_lines_held():
            ray.init(address=settings.address, **kwargs)
    except (ConnectionError, AuthenticationError) as exc:
        raise ConfigError(
            source, settings.address_line, "ray.address", refused(address, exc)
        ) from None
    except RuntimeError as exc:
        # Ray refuses a driver whose Ray or Python version is not the cluster's, in a message
        # of several lines ("Version mismatch: The cluster was started with: ...").
        if not str(exc).startswith("Version mismatch"):
            raise
        said = " ".join(str(exc).split())
        raise ConfigError(
            source,
            settings.address_line,
            "ray.address",
            f"cannot join the Ray cluster at {address}: {said} (run flightdeck with the Ray "
            "and Python versions the cluster runs)",
        ) from None
    return chosen is None and os.environ.get(AUTH_MODE) == "token"


AUTH_MODE = "RAY_AUTH_MODE"  # Ray sets it to "token" in this process when it sends a token
# Ray's "auto" sends ~/.ray/auth_token to a cluster it found on this machine whenever that file
# exists; one `ray start` started before it existed answers the owner but never runs its actors.
TOKEN_IMPLIED = (
    "Ray sent this cluster the token in ~/.ray/auth_token, as it does to every cluster it finds "
    "on this machine, and one started without token authentication starts no worker for a "
    "driver that sends one: set RAY_AUTH_MODE=disabled where flightdeck runs, or start the "
    "cluster again (`ray stop`, `ray start --head`: it then takes that token)"
)


def private_token() -> None:
    """The token Ray makes for a new local cluster (~/.ray/auth_token, where none is set),
    made here first, 0600 in a new ~/.ray 0700: Ray writes it with the umask's modes (0644),
    and whoever reads it can run code on every cluster that token opens, later `ray start`
    ones included. Ray then finds and uses it as its own."""
    names = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    if any(os.environ.get(name) for name in names):
        return  # the operator says how: Ray makes none
    path = Path.home() / ".ray" / "auth_token"  # Ray's _get_default_token_path()
    if path.exists():
        return  # the user's own, or an earlier batch's
    draft = path.with_name(f".auth_token.{os.getpid()}")
    try:
        private_dir(path.parent, tighten=False)
        fd = open_private(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write(secrets.token_hex(32))  # as Ray's generate_new_authentication_token()
        # Whole, or not there: Ray must never read a token half written.
        os.link(draft, path)
    except FileExistsError:
        pass  # another batch made it meanwhile
    except OSError as exc:  # Ray makes it, or says why it cannot
        log.warning("could not make Ray's token file %s: %s", path, exc)
    finally:
        draft.unlink(missing_ok=True)


TOKEN = (
    "it asks for a token (Ray's token authentication): set RAY_AUTH_MODE=token where flightdeck "
    "runs, with the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN"
)


NO_TOKEN = (
    "token authentication is on here (RAY_AUTH_MODE=token) but no token was found: put the "
    "cluster's token in ~/.ray/auth_token, or set RAY_AUTH_TOKEN where flightdeck runs"
)
WRONG_TOKEN = (
    "it refused the token this process sent (RAY_AUTH_TOKEN, else RAY_AUTH_TOKEN_PATH, else "
    "~/.ray/auth_token): give flightdeck the token the cluster was started with"
)


def refused(address: str, exc: BaseException) -> str:
    """Why a running cluster would not take this process as a driver, in one line: Ray's
    reason is in what its ConnectionError was raised from, over many lines."""
    said = f"{exc} {exc.__cause__ or ''}"
    if isinstance(exc, AuthenticationError):  # token mode on, and no token anywhere
        return f"cannot join the Ray cluster at {address}: {NO_TOKEN}"
    if "InvalidAuthToken" in said:
        # Token mode on (set by the operator, or by Ray itself on finding ~/.ray/auth_token
        # for a cluster of this machine): a token was sent, and it is not the cluster's.
        sent = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
        return f"cannot join the Ray cluster at {address}: {WRONG_TOKEN if sent else TOKEN}"
    said = last_line(str(exc.__cause__ or exc), 300) or one_line(str(exc), 300)
    return f"cannot join the Ray cluster at {address}: {said}"


# A line of Ray's C++ core on stderr: "[2026-12-06 14:59:20,984 W 23126 23126] gcs_client.cc:…".
_CORE_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d [\d:,.]+ [A-Z] \d+ \d+\] ")


@contextlib.contextmanager
def core_lines_held() -> Iterator[None]:
    """Standard error held in a file while Ray joins a cluster: a refused join is retried for
    20 s by Ray's core, a warning line each straight on fd 2, ahead of the one line that says
    why. If the join fails, those lines go (the ConfigError says it); what else was written
    comes out as it was, after the join, whether it failed or not."""
    try:
        saved = os.dup(2)  # first: with fd 2 closed, the file below would become fd 2
    except OSError:  # no stderr at all (closed by a daemon): nothing to hold
        yield
        return
    try:
        held = tempfile.TemporaryFile()  # noqa: SIM115 (closed by `with held` below)
    except OSError:  # nowhere to hold the lines (a full temp folder): they go out as they come
        os.close(saved)
        yield
        return
    failed = False
    with held:
        _flush_stderr()
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().splitlines(keepends=True)
            text = b"".join(line for line in lines if not (failed and _CORE_LINE.match(line)))
            while text:
                text = text[os.write(2, text) :]


def _flush_stderr() -> None:
    if sys.stderr is not None:  # None under pythonw, or a daemon that closed it
        sys.stderr.flush()
