"""Request bodies on a served node: a body is read on the poller, not by a thread, and has a deadline.

A client that sends its head and then trickles its body gets a 408 in the error shape after the
body deadline, and holds no thread meanwhile; a body over the limit gets its 413 at once; one
address's bodies still arriving are bounded. The node here has short deadlines and few threads.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from atomq.node.request_framing import ChunkedBody, Framing, framing_of
from support.in_process_app import send_body, strict_loads
from support.served_node import AtomqServe, ServeFactory

THREADS = 4
DEADLINE_S = 2
MAX_BODY = 65536
LENGTH = 60000
"""A body under the node's limit, announced and never all sent."""


@dataclass
class Node:
    served: AtomqServe
    key: str

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.served.url.removeprefix("http://").partition(":")
        return host, int(port)

    def connect(self) -> socket.socket:
        return socket.create_connection(self.address, timeout=20)

    def head(self, length: int | None = None, path: str = "/v1/queues/q/messages") -> bytes:
        framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
        return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {self.key}\r\n"
                f"Content-Type: application/json\r\n{framing}\r\n\r\n").encode()

    def depth(self) -> int:
        answer = requests.get(self.served.url + "/v1/queues/q", headers={"Authorization": f"Bearer {self.key}"},
                              timeout=10)
        return int(answer.json()["depth"])


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> Node:
    served = serve_for_module("--head-deadline", str(DEADLINE_S), "--body-deadline", str(DEADLINE_S),
                              "--threads", str(THREADS), "--max-request-bytes", str(MAX_BODY))
    owner = {"Authorization": f"Bearer {served.owner_key}"}
    tenant = requests.post(served.url + "/v1/tenants", json={"name": "uploader"}, headers=owner, timeout=10).json()
    headers = {"Authorization": f"Bearer {tenant['api_key']}"}
    assert requests.put(served.url + "/v1/queues/q", json={"model": "point_to_point"}, headers=headers,
                        timeout=10).status_code == 201
    return Node(served, tenant["api_key"])


def read_answer(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The next final answer on ``conn`` (a 100 Continue before it is skipped)."""
    data = b""
    while True:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            assert chunk, f"closed without an answer after {data[:200]!r}"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        if status != 100:
            break
    fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    headers = {name.lower(): value for name, value in fields.items()}
    length = int(headers["content-length"])
    while len(data) < length:
        chunk = conn.recv(65536)
        assert chunk, "closed in the middle of an answer"
        data += chunk
    return status, headers, data[:length]


def error_code(answer: tuple[int, dict[str, str], bytes], status: int) -> str:
    assert answer[0] == status, answer
    error = strict_loads(answer[2])["error"]
    assert set(error) == {"code", "message", "details"}
    return str(error["code"])


def closed(conn: socket.socket) -> bool:
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True


@contextlib.contextmanager
def trickling(conns: list[socket.socket], piece: bytes = b"x") -> Iterator[None]:
    """Each connection sends ``piece`` five times a second while the block runs."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.2):
            for conn in conns:
                with contextlib.suppress(OSError):
                    conn.sendall(piece)

    trickler = threading.Thread(target=trickle)
    trickler.start()
    try:
        yield
    finally:
        stop.set()
        trickler.join()


def test_a_trickled_body_gets_408_after_its_deadline_and_is_closed(node: Node) -> None:
    with node.connect() as conn:
        conn.sendall(node.head(LENGTH) + b'{"messages": [{"documents": [{"data": "')
        with trickling([conn]):
            answer = read_answer(conn)
            assert error_code(answer, 408) == "request_timeout"
            assert answer[1]["connection"] == "close"
            assert closed(conn)


def test_trickled_bodies_hold_no_thread_the_tenants_need(node: Node) -> None:
    """Three times the node's threads trickle their bodies (half with a length, half chunked; all
    within the bodies one address may have arriving): another client's sends are answered meanwhile,
    each well within its time-out."""
    slow = [node.connect() for _ in range(3 * THREADS * node.served.http_workers)]
    try:
        for i, conn in enumerate(slow):
            conn.sendall(node.head(LENGTH // 10) + b"{" if i % 2 else node.head() + b"ffff\r\n{")
        before = node.depth()
        with trickling(slow), requests.Session() as session:
            for i in range(20):
                sent = session.post(node.served.url + "/v1/queues/q/messages", json=send_body(),
                                    headers={"Authorization": f"Bearer {node.key}"}, timeout=5)
                assert sent.status_code == 201, sent.text
        assert node.depth() == before + 20
        for conn in slow:
            assert error_code(read_answer(conn), 408) == "request_timeout"
    finally:
        for conn in slow:
            conn.close()


def test_a_request_sent_in_pieces_at_a_normal_pace_is_served(node: Node) -> None:
    """The head in two pieces, then the body in three: each piece a read of its own on the node."""
    body = json.dumps(send_body()).encode()
    request = node.head(len(body)) + body
    pieces = [request[:20], request[20:len(request) - len(body)], body[:5], body[5:20], body[20:]]
    with node.connect() as conn:
        for piece in pieces:
            conn.sendall(piece)
            time.sleep(0.05)  # not a race: makes each piece arrive on its own
        assert read_answer(conn)[0] == 201


def test_a_chunked_body_is_served_and_a_slow_one_gets_408(node: Node) -> None:
    body = json.dumps(send_body()).encode()
    chunks = [b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:7], body[7:])] + [b"0\r\nX-Trailer: 1\r\n\r\n"]
    with node.connect() as conn:
        conn.sendall(node.head())
        for chunk in chunks:
            conn.sendall(chunk)
            time.sleep(0.05)  # not a race: makes each chunk arrive on its own
        assert read_answer(conn)[0] == 201
    with node.connect() as conn:
        conn.sendall(node.head() + b"4000\r\n")
        with trickling([conn]):
            assert error_code(read_answer(conn), 408) == "request_timeout"


def test_each_request_of_a_kept_alive_connection_has_its_own_deadline(node: Node) -> None:
    body = json.dumps(send_body()).encode()
    with node.connect() as conn:
        for _ in range(2):
            conn.sendall(node.head(len(body)))
            time.sleep(0.05)  # not a race: the body comes in a read of its own
            conn.sendall(body)
            answer = read_answer(conn)
            assert answer[0] == 201 and answer[1].get("connection", "keep-alive") != "close", answer
        conn.sendall(node.head(LENGTH) + b"{")
        with trickling([conn]):
            assert error_code(read_answer(conn), 408) == "request_timeout"


def test_pipelined_requests_are_each_served(node: Node) -> None:
    """Bytes read ahead past one request (the next one, in the same packet) are the next request's."""
    body = json.dumps(send_body()).encode()
    last = node.head(len(body)).replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n") + body
    with node.connect() as conn:
        conn.sendall((node.head(len(body)) + body) * 2 + last)
        answers = b""
        while chunk := conn.recv(65536):
            answers += chunk
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", answers) == [b"201"] * 3, answers


def test_a_body_over_the_limit_gets_413_at_once_while_it_trickles(node: Node) -> None:
    with node.connect() as conn:
        conn.sendall(node.head(MAX_BODY + 1) + b"{")
        with trickling([conn]):
            assert error_code(read_answer(conn), 413) == "too_large"
    whole = requests.post(node.served.url + "/v1/queues/q/messages", data=b"x" * (MAX_BODY + 1), timeout=10,
                          headers={"Authorization": f"Bearer {node.key}", "Content-Type": "application/json"})
    assert whole.status_code == 413 and whole.json()["error"]["code"] == "too_large"


def test_the_bodies_one_address_has_arriving_are_bounded(node: Node) -> None:
    """Each worker holds 8 bodies of the limit for one address: of 20 that announce nearly that and
    do not come, a worker takes at least 10, and refuses at least 2 with 503 at once."""
    slow = [node.connect() for _ in range(20)]
    try:
        for conn in slow:
            conn.sendall(node.head(LENGTH) + b"{")
        answers = [read_answer(conn) for conn in slow]
    finally:
        for conn in slow:
            conn.close()
    codes = [(answer[0], error_code(answer, answer[0])) for answer in answers]
    assert codes.count((503, "too_many_connections")) >= 2, codes
    assert set(codes) == {(503, "too_many_connections"), (408, "request_timeout")}, codes
    sent = requests.post(node.served.url + "/v1/queues/q/messages", json=send_body(), timeout=10,
                         headers={"Authorization": f"Bearer {node.key}"})
    assert sent.status_code == 201, sent.text



# -- the framing, without a node -------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "framing"), [
    (b"", None),
    (b"Content-Length: 0\r\n", None),
    (b"content-length :  12\r\n", Framing(12, False)),
    (b"Content-Length: 12\r\nExpect: 100-continue\r\n", Framing(12, True)),
    (b"Content-Length: 12\r\nContent-Length: 12\r\n", None),
    (b"Content-Length: -1\r\n", None),
    (b"Transfer-Encoding: gzip, chunked\r\n", Framing(None, False)),
    (b"Transfer-Encoding: chunked, gzip\r\n", None),
    (b"Transfer-Encoding: chunked\r\nContent-Length: 12\r\n", None),
], ids=["none", "zero", "loose name", "expect", "twice", "negative", "gzip then chunked", "chunked not last",
        "chunked with a length"])
def test_the_framing_is_what_gunicorn_reads(fields: bytes, framing: Framing | None) -> None:
    """None where there is no body, or where gunicorn refuses the request before reading one."""
    assert framing_of(b"POST /v1/x HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n") == framing


def test_a_chunked_body_is_followed_as_it_arrives() -> None:
    body = b"5;ext=1\r\nhello\r\n10\r\n" + b"x" * 16 + b"\r\n0\r\nX-T: 1\r\n\r\nNEXT"
    chunked = ChunkedBody()
    for available in range(len(body) + 1):
        chunked.follow(lambda start, end: body[start:min(end, available)], available)
        assert (chunked.end is not None) == (available >= len(body) - 4), available
        assert chunked.data_in(available) <= 21 and not chunked.broken
    assert chunked.end == len(body) - 4 and chunked.data_bytes == 21
    broken = ChunkedBody()
    broken.follow(lambda start, end: b"5\r\nhelloXX0\r\n\r\n"[start:end], 15)
    assert broken.broken
