"""gunicorn's own refusals (a request line, header or length it cannot read) in atomq's error shape.

gunicorn answers what it refuses before the app sees it with an HTML page of its own, and has no
hook for that page: its workers call ``gunicorn.util.write_error``, which a worker of the node
replaces with :func:`write_json_error` when it starts (``NodeWorker.init_process``), so a client
that reads every error as JSON reads these too. The node's own answers before the app
(``slow_clients``: 408, 413, 503) are written here in the same shape (:func:`answer`).
"""

from __future__ import annotations

import json
import socket
from typing import Any

from gunicorn import util

CODES = {400: "invalid_input", 403: "forbidden", 414: "uri_too_long", 417: "expectation_failed",
         431: "headers_too_large", 500: "internal_error", 501: "not_implemented"}
"""The codes of the statuses gunicorn refuses with (``gunicorn.workers.base.Worker.handle_error``)."""


def error_body(code: str, message: str) -> bytes:
    """The one JSON error shape, for an answer the server writes before the app sees the request."""
    return json.dumps({"error": {"code": code, "message": message, "details": {}}}).encode()


def error_head(status: int, reason: str, length: int) -> bytes:
    """The head of such an answer: the connection closes after it."""
    return (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode("latin-1")


def answer(sock: socket.socket, status: int, reason: str, code: str, message: str, drain: bool = True) -> None:
    """An answer written before the app sees the request, best effort: the client may not be
    reading either. With ``drain``, what the client sent already is read first: a socket closed
    with unread bytes resets, and the answer may be lost."""
    if drain:
        try:
            sock.setblocking(False)
            sock.recv(65536)
        except OSError:
            pass
    body = error_body(code, message)
    send_now(sock, error_head(status, reason, len(body)) + body)


def send_now(sock: socket.socket, data: bytes) -> None:
    """What the socket takes of ``data`` without waiting (an answer fits its buffer)."""
    try:
        sock.setblocking(False)
        sock.send(data)
    except OSError:
        pass
    finally:
        try:
            sock.setblocking(True)
        except OSError:
            pass


def write_json_error(sock: Any, status: int, reason: str, message: str) -> None:
    """What gunicorn's ``write_error`` sends, as the one JSON error shape."""
    body = error_body(CODES.get(status, "invalid_input"),
                      f"the server could not read the request: {message or reason}")
    util.write_nonblock(sock, error_head(status, reason, len(body)) + body)


def install() -> None:
    """Makes this process's gunicorn write its refusals with :func:`write_json_error`."""
    util.write_error = write_json_error
