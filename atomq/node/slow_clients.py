"""A request's head is read without holding a thread: a slow or idle client costs a socket, not a
worker thread the tenants need.

gunicorn's threaded worker hands a connection to a thread as soon as its first bytes arrive, and
the thread then blocks until the whole head is read: 100 connections that send a header line every
2 s held every thread of a node, and every tenant's send timed out. gunicorn has no setting for
this, so the node's worker reads what a connection has sent without blocking, keeps it in the
connection's own parser buffer, and hands the connection back to gunicorn's poller until the head
is complete (gunicorn's own "pending" state, which costs no thread); only then does a thread take it.
A head not complete within ``HEAD_DEADLINE_S`` of its first byte gets a 408 and the connection is
closed. Bodies are still read by the thread that serves the request.
"""

from __future__ import annotations

import errno
import json
import socket
import time
from typing import Any

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
    body = json.dumps({"error": {"code": "request_timeout", "message": f"the request's line and headers did not "
                                 f"arrive within {HEAD_DEADLINE_S:g} s", "details": {}}}).encode()
    head = (f"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    try:
        sock.setblocking(False)
        sock.send(head + body)
    except OSError:
        pass
