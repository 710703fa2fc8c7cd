"""A request is read without holding a thread: a slow or idle client costs a socket and the bytes it
sent, not a worker thread the tenants need; one address holds a bounded number of sockets and bytes.

gunicorn's threaded worker hands a connection to a thread as soon as its first bytes arrive, and
the thread then blocks until the whole request is read: 100 connections that sent a header line
every 2 s, or a complete head and then a body a byte a second, held every thread of a node, and
every tenant's send timed out. gunicorn has no setting for this, so the node's worker reads what a
connection has sent without blocking, keeps it ahead of the connection's parser (``ReadAhead``), and hands the
connection back to gunicorn's poller until the head and then the body (by its Content-Length, or
by its chunked framing: ``request_framing``) are in (gunicorn's own "pending" state, which costs no
thread); only then does a thread take the request, and it finds every byte it reads in memory.
A body arriving fast is read on by the thread that found it (``_still_flowing``) rather than
passed through the poller for each socket buffer's worth.
Each request of a kept-alive connection starts afresh. A client that waits for "100 Continue"
before its body gets it once its head is in (gunicorn sends another when a thread takes the
request; RFC 9110 has clients read any number of 1xx answers).

The deadlines (``Limits``): the head within ``head_deadline_s`` of its first byte, the body within
``body_deadline_s`` of the head's end plus a second per ``MIN_BODY_BYTES_PER_S`` of it received (a
large body on a slow link goes on, a trickle does not); past one, a 408 in the JSON error shape and
the connection closed. A connection that sends nothing for gunicorn's keep-alive time (5 s) while
waiting is closed by gunicorn, with the same 408 when a request had begun (``CountedConn.close``).

A body over the node's limit is answered 413 as soon as its head says so, or as soon as a chunked
body passes it, and then read and thrown away (up to ``DRAIN_LIMIT_BYTES``, so that the client sees
the answer rather than a reset) on the poller too. Bodies still arriving hold at most
``BODIES_PER_ADDRESS`` times the limit per client address (a length counts in full from the head);
past that a request is answered 503. Past ``MAX_CONNECTIONS_PER_ADDRESS`` open connections from one
address, a worker answers a new one from it with a 503 and closes it (``CountedConn``).
"""

from __future__ import annotations

import enum
import errno
import select
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gunicorn.workers.gthread import TConn

from atomq import defaults
from atomq.api.errors import DRAIN_LIMIT_BYTES
from atomq.node import refusals
from atomq.node.request_buffers import BodyBudget, ReadAhead
from atomq.node.request_framing import ChunkedBody, Framing, framing_of

MAX_CONNECTIONS_PER_ADDRESS = 256
"""Per HTTP worker: room for a proxy in front of many clients, far below the descriptors a worker
has; a client past it is refused, not the others."""
BODIES_PER_ADDRESS = 8
"""Bodies of the largest size one address may have arriving at once, per HTTP worker: a proxy's
uploads side by side, while 256 connections that each announce the limit hold 80 MiB, not 2.5 GiB."""
HEAD_END = b"\r\n\r\n"
MAX_HEAD_BYTES = 64 * 1024
"""Past this, the head is handed to gunicorn's parser, which refuses it by its own limits."""
READ_BYTES = 1024 * 1024
"""The most one read takes from a socket: a fast body comes in a few reads per wake."""
FLOW_WAIT_S = 0.002
"""How long a thread waits for more of a body that is arriving fast (``_still_flowing``)."""
FAST_BYTES_PER_S = 4 * 1024 * 1024
"""A body arriving at least this fast keeps the thread that reads it: one client holding a thread
this way spends the bandwidth of a fast upload, not a trickle."""
CHUNKED_OVERHEAD = 2
"""A chunked body may take this many times the limit with its framing; past it (chunks of a byte or
two) it is refused as too large, whatever its data adds up to."""


class Step(enum.Enum):
    """What the worker does with a connection after a read."""

    SERVE = "serve"
    """A thread parses and serves the request: it is in (or its parser refuses it from what is in)."""
    WAIT = "wait"
    """Back to the poller until more arrives."""
    CLOSE = "close"
    """The connection was answered (408, 413 or 503) and is closed."""


@dataclass(frozen=True)
class Limits:
    """A worker's bounds on what a client sends: ``atomq serve``'s ``--head-deadline``,
    ``--body-deadline`` and ``--max-request-bytes``."""

    head_deadline_s: float = defaults.HEAD_DEADLINE_S
    body_deadline_s: float = defaults.BODY_DEADLINE_S
    max_body_bytes: int = defaults.MAX_REQUEST_BYTES
    min_body_bytes_per_s: int = defaults.MIN_BODY_BYTES_PER_S

    @property
    def address_body_bytes(self) -> int:
        return BODIES_PER_ADDRESS * self.max_body_bytes


class Request:
    """What has arrived of one request of a connection, between the reads of its bytes."""

    def __init__(self, now: float) -> None:
        self.since = now
        """The head's first byte."""
        self.head_end = 0
        """The head's length once it is in (0 until then)."""
        self.searched = 0
        self.framing: Framing | None = None
        self.chunked: ChunkedBody | None = None
        self.body_since = 0.0
        self.reserved = 0
        """Bytes counted against the address (``BodyBudget``)."""
        self.discarding = False
        """Answered 413: what still arrives is read and thrown away."""
        self.discard_left = 0
        self.discarded = 0
        self.continued = False

    def body_in(self, held: int) -> int:
        return held - self.head_end

    def body_complete(self, held: int) -> bool:
        if self.chunked is not None:
            return self.chunked.end is not None or self.chunked.broken
        return self.framing is not None and self.body_in(held) >= (self.framing.length or 0)

    def late(self, now: float, held: int, limits: Limits) -> bool:
        if not self.head_end:
            return now - self.since > limits.head_deadline_s
        received = self.discarded if self.discarding else self.body_in(held)
        return now - self.body_since > limits.body_deadline_s + received / limits.min_body_bytes_per_s


def _recv(sock: socket.socket, size: int) -> bytes | None:
    """What the client has sent, up to ``size``, without waiting: None when nothing is there; an
    error other than "nothing yet" reads as the end (the thread meets it, as gunicorn would)."""
    sock.setblocking(False)
    try:
        return sock.recv(size)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError as exc:
        return None if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK) else b""
    finally:
        sock.setblocking(True)


def next_step(conn: CountedConn, limits: Limits, budget: BodyBudget) -> Step:
    """Reads what ``conn`` (initialised) has sent, without blocking, ahead of its parser
    (``ReadAhead``), and says what comes next. Runs in a pool thread, one at a time per connection."""
    now = time.monotonic()
    unreader: ReadAhead = conn.parser.unreader
    unreader.take_back()
    held = unreader.size
    request = conn.request
    if request is None or (not held and not request.head_end):
        request = conn.request = Request(now)  # a request starts with its first byte
    flowing = 0  # bytes of this wake
    while True:
        step = _advance(conn, request, held, now, limits, budget)
        if step is not None:
            return step
        want = _wanted(request, held, limits)
        chunk = _recv(conn.sock, want)
        if chunk is None:
            if not (request.head_end and not request.discarding and _still_flowing(conn.sock, flowing, now)):
                break
            continue
        flowing += len(chunk)
        if not chunk:
            if request.discarding:
                return _close(conn)
            return _serve(conn, budget)  # closed by the client: the parser sees the end
        if request.discarding:
            request.discard_left = max(0, request.discard_left - len(chunk))
            request.discarded += len(chunk)
            if not request.discard_left:
                return _close(conn)
            continue
        unreader.add(chunk)
        held += len(chunk)
        if request.chunked is not None and not budget.reserve(conn.address, len(chunk)):
            return _refuse_budget(conn, budget)
        request.reserved += len(chunk) if request.chunked is not None else 0
    if request.late(now, held, limits):
        if not request.discarding:
            refuse_slow_request(conn, limits)
        return _close(conn)
    if (request.head_end and request.framing and request.framing.expects_continue and not request.continued
            and not request.discarding):
        request.continued = True
        refusals.send_now(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
    return Step.WAIT


def _still_flowing(sock: socket.socket, flowing: int, since: float) -> bool:
    """Whether a body arriving fast has more within ``FLOW_WAIT_S``: the thread reads on rather
    than pass the connection back and forth through the poller for each socket buffer's worth (a
    body of 9 MB took half as long again). A client slower than ``FAST_BYTES_PER_S`` over this wake
    goes back to the poller, after one such wait at most."""
    if flowing + FAST_BYTES_PER_S * FLOW_WAIT_S < FAST_BYTES_PER_S * (time.monotonic() - since + FLOW_WAIT_S):
        return False
    try:
        return bool(select.select([sock], [], [], FLOW_WAIT_S)[0])
    except (OSError, ValueError):
        return False


def _wanted(request: Request, held: int, limits: Limits) -> int:
    if request.discarding:
        return min(request.discard_left, READ_BYTES)
    if request.head_end and request.framing and request.framing.length is not None:
        return max(1, min(request.framing.length - request.body_in(held), READ_BYTES))
    return READ_BYTES if request.head_end else 65536


def _advance(conn: CountedConn, request: Request, held: int, now: float, limits: Limits,
             budget: BodyBudget) -> Step | None:
    """Where the request stands with ``held`` bytes in: a step when one is due, None to read on."""
    reader: ReadAhead = conn.parser.unreader
    if request.discarding:
        return None
    if not request.head_end:
        window = reader.peek(request.searched, MAX_HEAD_BYTES + len(HEAD_END))
        at = window.find(HEAD_END)
        if at < 0:
            request.searched = max(0, request.searched + len(window) - len(HEAD_END) + 1)
            return _serve(conn, budget) if held > MAX_HEAD_BYTES else None
        request.head_end = request.searched + at + len(HEAD_END)
        request.body_since = now
        request.framing = framing_of(reader.peek(0, request.head_end))
        if request.framing is None:
            return _serve(conn, budget)  # no body, or one gunicorn refuses before reading it
        length = request.framing.length
        if length is None:
            request.chunked = ChunkedBody()
            if not budget.reserve(conn.address, request.body_in(held)):
                return _refuse_budget(conn, budget)
            request.reserved = request.body_in(held)
        elif length > limits.max_body_bytes:
            return _refuse_too_large(conn, request, held, length, budget)
        elif request.body_in(held) >= length:
            return _serve(conn, budget)  # the usual request: its body came with its head
        elif not budget.reserve(conn.address, length):
            return _refuse_budget(conn, budget)
        else:
            request.reserved = length
    if request.chunked is not None:
        request.chunked.follow(lambda start, end: reader.peek(request.head_end + start, request.head_end + end),
                               request.body_in(held))
        over = (request.chunked.data_in(request.body_in(held)) > limits.max_body_bytes
                or request.body_in(held) > CHUNKED_OVERHEAD * limits.max_body_bytes)
        if over and request.chunked.end is None and not request.chunked.broken:
            return _refuse_too_large(conn, request, held, None, budget)
    return _serve(conn, budget) if request.body_complete(held) else None


def _serve(conn: CountedConn, budget: BodyBudget) -> Step:
    conn.forget_request(budget)
    return Step.SERVE


def _close(conn: CountedConn) -> Step:
    conn.answered = True
    return Step.CLOSE


def _refuse_too_large(conn: CountedConn, request: Request, held: int, length: int | None,
                      budget: BodyBudget) -> Step | None:
    """A 413 at once; the body is then read and thrown away on the poller, up to its end or
    ``DRAIN_LIMIT_BYTES``, so that a client still sending does not see a reset instead."""
    body_in = request.body_in(held)
    conn.parser.unreader.drop()
    budget.release(conn.address, request.reserved)
    request.reserved = 0
    request.discarding = True
    request.discarded = body_in
    request.discard_left = max(0, min(length if length is not None else DRAIN_LIMIT_BYTES, DRAIN_LIMIT_BYTES) - body_in)
    refusals.answer(conn.sock, 413, "Payload Too Large", "too_large",
                    "the request body is larger than this server accepts", drain=False)
    conn.answered = True
    return None if request.discard_left else Step.CLOSE


def _refuse_budget(conn: CountedConn, budget: BodyBudget) -> Step:
    _answer(conn, 503, "Service Unavailable", "too_many_connections",
            f"this address's request bodies still arriving at this server process hold "
            f"{budget.held(conn.address)} bytes, its most is {budget.limit}: send fewer at once")
    return _close(conn)


def refuse_slow_request(conn: CountedConn, limits: Limits) -> None:
    """A 408 in the one JSON error shape, best effort: the client may not be reading either."""
    _answer(conn, 408, "Request Timeout", "request_timeout",
            f"the request did not arrive in time: its line and headers are due within {limits.head_deadline_s:g} s "
            f"of their first byte, its body within {limits.body_deadline_s:g} s of the headers' end and 1 s more "
            f"per {limits.min_body_bytes_per_s} bytes, with no pause of the connection's keep-alive time")


def refuse_stopping(conn: CountedConn) -> None:
    """A request still arriving when the worker stops: the client sends it again, to another."""
    _answer(conn, 503, "Service Unavailable", "unavailable",
            "this server process is stopping: send the request again")


def refuse_connection(sock: socket.socket) -> None:
    """A 503 for a connection past its address's bound, then closed."""
    refusals.answer(sock, 503, "Service Unavailable", "too_many_connections",
                    f"this address holds {MAX_CONNECTIONS_PER_ADDRESS} connections to this server process "
                    "already: close idle ones, or reuse them (keep-alive)")
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.close()
    except OSError:
        pass


def _answer(conn: CountedConn, status: int, reason: str, code: str, message: str) -> None:
    """A refusal the connection ends with (``refusals.answer``); its request is over."""
    conn.forget_request(None)
    refusals.answer(conn.sock, status, reason, code, message)
    conn.answered = True


def address_of(client: Any) -> str:
    """A connection's client address (a unix socket's peer has none)."""
    return str(client[0]) if isinstance(client, tuple) and client else ""


class CountedConn(TConn):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn's connection, counted against its client address while it is open, with the request
    it is reading (``next_step``): every way gunicorn ends a connection (an answer with close, an
    idle or pending time-out, a refusal here) goes through close."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, open_by_address: Counter[str],
                 budget: BodyBudget, limits: Limits) -> None:
        super().__init__(cfg, sock, client, server)
        self._open: Counter[str] | None = open_by_address
        self.address = address_of(client)
        self.budget = budget
        self.limits = limits
        self.request: Request | None = None
        self.answered = False
        """Answered by a refusal here: closed at once, not after gunicorn's linger for the client's
        end (which runs in the worker's main thread and would stall every connection meanwhile)."""
        open_by_address[self.address] += 1

    def init(self) -> None:
        """gunicorn's, with the parser reading through ``ReadAhead``."""
        fresh = self.parser is None
        super().init()
        if fresh and not self.is_http2:
            self.parser.unreader = ReadAhead(self.sock)

    def request_done(self) -> None:
        """After a thread served a request: bytes read ahead past it are gunicorn's to find."""
        if self.parser is not None and isinstance(self.parser.unreader, ReadAhead):
            self.parser.unreader.give_back()

    def forget_request(self, budget: BodyBudget | None) -> None:
        """The request is a thread's now, or answered: its bytes count no more against the address."""
        if self.request is not None:
            (budget or self.budget).release(self.address, self.request.reserved)
            self.request = None

    def close(self, graceful: bool = False) -> None:
        if self._open is not None:
            if self.request is not None and not self.answered and self.parser is not None \
                    and self.parser.unreader.size:
                refuse_slow_request(self, self.limits)  # gunicorn's pending time-out: a pause too long
            self.forget_request(None)
            self._open[self.address] -= 1
            if self._open[self.address] <= 0:
                del self._open[self.address]
            self._open = None
        super().close(graceful and not self.answered)
