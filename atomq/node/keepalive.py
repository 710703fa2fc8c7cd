"""A kept-alive connection's next request, served by the thread that answered the last one.

gunicorn's threaded worker hands every kept-alive connection back to its main thread after each
answer: the thread's future completes, the main thread is woken through a pipe, registers the
socket with its poller, is woken again when the next request arrives, and submits the connection
to the pool once more. For a client that sends its requests one after another (a producer's loop,
a consumer's get then ack) that is two thread hand-offs and half a dozen system calls a request,
about a third of what the node's HTTP worker spent on a one-message send (BENCHMARKS.md, "What one
request costs the node").

So the thread that answered waits a moment (``LINGER_S``) for the connection's next request and
serves it itself when it comes; when it does not, the connection goes back to the poller as
before. A thread lingers only while another thread of the process is idle (``Lingering``): it
never keeps a request that arrives meanwhile from a thread, and an idle client costs a socket,
not a thread, as ``atomq.node.slow_clients`` promises. The next request is served through the
same path as any other (its head read without blocking first), so a slow head still goes back to
the poller, and a stopping worker does not linger.
"""

from __future__ import annotations

import select
import threading
from typing import Any

LINGER_S = 0.01
"""How long a thread waits for a kept-alive connection's next request: longer than a client's own
turn between an answer and its next request in a tight loop, short enough that a client that
thinks longer costs one wake-up of a thread that had nothing else to do."""


class Lingering:
    """Counts a worker process's busy threads; a thread may linger while another is idle."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.busy = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.busy += 1

    def leave(self) -> None:
        with self._lock:
            self.busy -= 1

    def may_linger(self) -> bool:
        """True while a thread other than the caller (counted busy) is idle."""
        return self.busy < self.threads


def next_request_within(conn: Any, seconds: float) -> bool:
    """Whether ``conn`` (gunicorn's ``TConn``) has bytes of its next request buffered already, or its
    socket becomes readable within ``seconds`` (also when the client closes it: the parser then
    sees the end)."""
    if conn.parser.unreader.buf.getvalue():
        return True
    poller = select.poll()
    poller.register(conn.sock.fileno(), select.POLLIN)
    return bool(poller.poll(seconds * 1000))
