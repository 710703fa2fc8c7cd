"""A request's head is read without holding a thread: a slow or idle client costs a socket, not a
worker thread the tenants need; and one address holds a bounded number of sockets.

gunicorn's threaded worker hands a connection to a thread as soon as its first bytes arrive, and
the thread then blocks until the whole head is read: 100 connections that send a header line every
2 s held every thread of a node, and every tenant's send timed out. gunicorn has no setting for
this, so the node's worker reads what a connection has sent without blocking, keeps it in the
connection's own parser buffer, and hands the connection back to gunicorn's poller until the head
is complete (gunicorn's own "pending" state, which costs no thread); only then does a thread take it.
A head not complete within ``HEAD_DEADLINE_S`` of its first byte gets a 408 and the connection is
closed. Bodies are still read by the thread that serves the request. Past
``MAX_CONNECTIONS_PER_ADDRESS`` open connections from one address, a worker answers a new one from
it with a 503 and closes it (``CountedConn``).
"""

from __future__ import annotations

import errno
import json
import socket
import time
from collections import Counter
from typing import Any

from gunicorn.workers.gthread import TConn

MAX_CONNECTIONS_PER_ADDRESS = 256
"""Per HTTP worker: room for a proxy in front of many clients, far below the descriptors a worker
has; a client past it is refused, not the others."""
HEAD_DEADLINE_S = 10.0
"""How long a client may take to send a request's head (its line and headers)."""
HEAD_END = b"\r\n\r\n"
MAX_HEAD_BYTES = 64 * 1024
"""Past this, the head is handed to gunicorn's parser, which refuses it by its own limits."""


def head_is_buffered(conn: Any) -> bool | None:
    """Reads what ``conn`` (gunicorn's ``TConn``, initialised) has sent, without blocking, into its
    parser's buffer. True when a thread may parse the request (the head is complete, the client
    closed, or the head is over any limit: the parser answers those); False when it must wait
    for more (back to the poller); None when its time is up (answered 408, to be closed)."""
    unreader = conn.parser.unreader
    held = unreader.buf.getvalue()
    if HEAD_END in held or len(held) > MAX_HEAD_BYTES:
        return True
    now = time.monotonic()
    if not held:
        conn.head_since = now  # an idle connection is gunicorn's to time out; a head starts now
    conn.sock.setblocking(False)
    try:
        chunk = conn.sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        chunk = None
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            chunk = None
        else:
            return True  # the thread meets the error and closes the connection as gunicorn does
    finally:
        conn.sock.setblocking(True)
    if chunk == b"":
        return True  # closed by the client: the parser sees the end
    if chunk:
        unreader.unread(chunk)
        held += chunk
        if HEAD_END in held or len(held) > MAX_HEAD_BYTES:
            return True
    if now - conn.head_since > HEAD_DEADLINE_S:
        refuse_slow_head(conn.sock)
        return None
    return False


def refuse_slow_head(sock: socket.socket) -> None:
    """A 408 in the one JSON error shape, best effort: the client may not be reading either."""
    _refuse(sock, "408 Request Timeout", "request_timeout",
            f"the request's line and headers did not arrive within {HEAD_DEADLINE_S:g} s")


def refuse_connection(sock: socket.socket) -> None:
    """A 503 for a connection past its address's bound, then closed. What the client sent already is
    read first (best effort): a socket closed with unread bytes resets, and the answer may be lost."""
    try:
        sock.setblocking(False)
        sock.recv(65536)
    except OSError:
        pass
    _refuse(sock, "503 Service Unavailable", "too_many_connections",
            f"this address holds {MAX_CONNECTIONS_PER_ADDRESS} connections to this server process already: "
            "close idle ones, or reuse them (keep-alive)")
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.close()
    except OSError:
        pass


def _refuse(sock: socket.socket, status: str, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode()
    head = (f"HTTP/1.1 {status}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    try:
        sock.setblocking(False)
        sock.send(head + body)
    except OSError:
        pass


def address_of(client: Any) -> str:
    """A connection's client address (a unix socket's peer has none)."""
    return str(client[0]) if isinstance(client, tuple) and client else ""


class CountedConn(TConn):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn's connection, counted against its client address while it is open: every way gunicorn
    ends a connection (an answer with close, an idle or pending time-out, a 408) goes through close."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, open_by_address: Counter[str]) -> None:
        super().__init__(cfg, sock, client, server)
        self._open: Counter[str] | None = open_by_address
        self._address = address_of(client)
        open_by_address[self._address] += 1

    def close(self, graceful: bool = False) -> None:
        if self._open is not None:
            self._open[self._address] -= 1
            if self._open[self._address] <= 0:
                del self._open[self._address]
            self._open = None
        super().close(graceful)
