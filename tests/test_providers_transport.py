"""The abortable HTTP transport: built on the HTTP stack's public API only, and mapped like httpx.

When an upgrade of httpx2 or httpcore2 moves an extension point the transport relies on, these
tests fail first and name what changed; the stop tests in test_providers_streams.py would fail
too, but less legibly.
"""

from __future__ import annotations

import inspect
import re
import socket
import time
from importlib.metadata import version
from pathlib import Path

import httpcore2
import httpx2
import pytest
from flightdeck.engine.providers import transport
from flightdeck.engine.providers.transport import Abort, bound, http_client

from loopback import OPENAI_PATH, Loopback, Reply

PROVIDERS = Path(transport.__file__).parent
BODY = {"model": "m", "messages": [], "stream": False}


def test_the_providers_import_no_private_module_of_the_http_stack_or_the_sdks() -> None:
    private = re.compile(r"\b(httpx2|httpcore2|openai|anthropic)\._\w+")
    found = [
        f"{path.name}:{n}: {match.group(0)}"
        for path in sorted(PROVIDERS.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if (match := private.search(line))
    ]
    assert not found, f"private parts of a library used: {found}"


def test_httpcore_still_takes_a_network_backend_for_its_pool() -> None:
    wanted = {
        "ssl_context",
        "max_connections",
        "max_keepalive_connections",
        "keepalive_expiry",
        "network_backend",
    }
    missing = wanted - set(inspect.signature(httpcore2.ConnectionPool).parameters)
    assert not missing, (
        f"httpcore2 {version('httpcore2')}: ConnectionPool no longer takes {sorted(missing)}"
    )
    for name in ("connect_tcp", "sleep"):
        assert hasattr(httpcore2.NetworkBackend, name), f"NetworkBackend.{name} is gone"
    for name in ("read", "write", "close", "start_tls", "get_extra_info"):
        assert hasattr(httpcore2.NetworkStream, name), f"NetworkStream.{name} is gone"


def test_every_httpcore_error_becomes_the_httpx_error_of_its_name() -> None:
    mapping = transport._HTTPX_ERRORS
    exported = {
        error
        for name in httpcore2.__all__
        if isinstance(error := getattr(httpcore2, name), type) and issubclass(error, Exception)
    }
    # Raised and retried inside httpcore's pool; httpx's own transport does not map it either.
    exported.discard(httpcore2.ConnectionNotAvailable)
    unmapped = sorted(e.__name__ for e in exported - {core for core, _ in mapping})
    assert not unmapped, f"httpcore2 {version('httpcore2')} has errors not mapped: {unmapped}"
    for i, (core, mapped) in enumerate(mapping):
        assert mapped.__name__ == core.__name__, (core, mapped)
        # The more specific first, or a general entry would hide it.
        assert not any(issubclass(core, earlier) for earlier, _ in mapping[:i]), core


def test_a_request_is_answered_through_the_transport(server: Loopback) -> None:
    with http_client({}) as client:
        for _ in range(2):  # the second on the pooled connection
            response = client.post(server.url + OPENAI_PATH, json=BODY)
            assert response.status_code == 200 and response.read()
    assert len(server.received) == 2


def test_a_pooled_connection_the_server_closed_is_replaced(server: Loopback) -> None:
    with http_client({}) as client:
        assert client.post(server.url + OPENAI_PATH, json=BODY).status_code == 200
        server.drop_connections()
        time.sleep(0.05)  # for the server's close to reach the client's socket
        assert client.post(server.url + OPENAI_PATH, json=BODY).status_code == 200
    assert len(server.received) == 2


def test_a_fired_abort_stops_a_request_before_it_connects(server: Loopback) -> None:
    abort = Abort()
    abort.fire()
    closed = pytest.raises(httpx2.ReadError, match="closed by the controlling thread")
    with http_client({}) as client, bound(abort), closed:
        client.post(server.url + OPENAI_PATH, json=BODY)
    assert server.received == []


def test_socket_failures_surface_as_httpx_errors(server: Loopback) -> None:
    server.script(Reply(stall_before_headers=True))
    with http_client({"read_timeout_s": 0.2}) as client, pytest.raises(httpx2.ReadTimeout):
        client.post(server.url + OPENAI_PATH, json=BODY)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with http_client({}) as client, pytest.raises(httpx2.ConnectError):
        client.post(f"http://127.0.0.1:{port}/", json=BODY)
