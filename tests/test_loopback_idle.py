"""The loopback server's `idle()`, which tests wait on before counting a dead client's requests:
a connection the server's thread has accepted but not yet handed to a handler is not idle."""

from __future__ import annotations

import socket
import socketserver
import threading

import pytest

from helpers import until
from loopback import Loopback


def test_a_connection_being_accepted_is_not_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server's thread is held between its accept and the handler: a loaded machine can
    # leave it there for any time (a test once slept 0.1 s and hoped).
    accepted, go_on = threading.Event(), threading.Event()
    accept = socketserver.TCPServer.get_request

    def held_accept(self: socketserver.TCPServer) -> tuple[socket.socket, object]:
        got = accept(self)
        accepted.set()
        go_on.wait(60)
        return got

    monkeypatch.setattr(socketserver.TCPServer, "get_request", held_accept)
    with Loopback() as server:
        client = socket.create_connection(("127.0.0.1", server.port))
        try:
            assert accepted.wait(60)
            assert not server.idle()  # out of the backlog, not yet with a handler
        finally:
            go_on.set()
            client.close()
        until(server.idle, what="the closed connection's handler ended")
