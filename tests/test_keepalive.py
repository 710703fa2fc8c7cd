"""A kept-alive connection's next request served by the thread that answered the last one
(``atomq.node.keepalive``): when it may wait, what wakes it, and that a served node answers every
request of a connection alike whether it came within the wait or after it."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
import pytest
import requests

from atomq.node import keepalive
from support.served_node import AtomqServe, ServeFactory


class Buffer:
    def __init__(self, held: bytes) -> None:
        self.held = held

    def getvalue(self) -> bytes:
        return self.held


class Conn:
    """What ``next_request_within`` reads of gunicorn's ``TConn``: its socket and its parser's buffer."""

    def __init__(self, sock: socket.socket, held: bytes = b"") -> None:
        self.sock = sock
        self.parser = type("Parser", (), {"unreader": type("Unreader", (), {"buf": Buffer(held)})()})()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server, client = socket.socketpair()
    try:
        yield server, client
    finally:
        server.close()
        client.close()


def test_a_buffered_request_or_one_on_the_socket_is_next_and_silence_is_not(
        pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair
    assert keepalive.next_request_within(Conn(server, held=b"POST /v1/"), 0.0)
    assert not keepalive.next_request_within(Conn(server), 0.001)
    client.sendall(b"POST /v1/queues/q/messages HTTP/1.1\r\n")
    assert keepalive.next_request_within(Conn(server), 0.0)


def test_a_closed_connection_wakes_the_thread_so_the_parser_sees_the_end(
        pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair
    client.close()
    assert keepalive.next_request_within(Conn(server), 0.0)


def test_a_thread_lingers_only_while_another_is_idle() -> None:
    lingering = keepalive.Lingering(threads=2)
    lingering.enter()
    assert lingering.may_linger()
    lingering.enter()
    assert not lingering.may_linger(), "every thread busy: a request that arrives needs this one"
    lingering.leave()
    assert lingering.may_linger()


@pytest.fixture
def node(serve: ServeFactory) -> AtomqServe:
    return serve(http_workers=1)


def _tenant_session(node: AtomqServe) -> tuple[requests.Session, dict[str, str]]:
    owner = {"Authorization": f"Bearer {node.owner_key}"}
    tenant = requests.post(node.url + "/v1/tenants", json={"name": "kept"}, headers=owner, timeout=10).json()
    headers = {"Authorization": f"Bearer {tenant['api_key']}"}
    assert requests.put(node.url + "/v1/queues/q", json={"model": "point_to_point"}, headers=headers,
                        timeout=10).status_code == 201
    return requests.Session(), headers


def test_requests_of_one_connection_are_answered_alike_within_the_wait_and_after_it(node: AtomqServe) -> None:
    """Requests sent back to back (served by the lingering thread) and one sent after the wait is
    over (the connection back on the poller) are each answered, on the one connection."""
    session, headers = _tenant_session(node)
    with session:
        for i in range(20):
            sent = session.post(node.url + "/v1/queues/q/messages", headers=headers, timeout=10,
                                json={"messages": [{"documents": [{"data": str(i)}]}]})
            assert sent.status_code == 201, sent.text
        time.sleep(keepalive.LINGER_S * 5)  # the gap is what is tested: the thread's wait is over
        got = session.post(node.url + "/v1/queues/q/get", headers=headers, json={"max": 20, "wait_ms": 0},
                           timeout=10)
        assert got.status_code == 200 and len(got.json()["messages"]) == 20
