"""gunicorn's own refusals (a request line, header or length it cannot read) in atomq's error shape.

gunicorn answers what it refuses before the app sees it with an HTML page of its own, and has no
hook for that page: its workers call ``gunicorn.util.write_error``, which a worker of the node
replaces with :func:`write_json_error` when it starts (``NodeWorker.init_process``), so a client
that reads every error as JSON reads these too.
"""

from __future__ import annotations

import json
from typing import Any

from gunicorn import util

CODES = {400: "invalid_input", 403: "forbidden", 414: "uri_too_long", 417: "expectation_failed",
         431: "headers_too_large", 500: "internal_error", 501: "not_implemented"}
"""The codes of the statuses gunicorn refuses with (``gunicorn.workers.base.Worker.handle_error``)."""


def write_json_error(sock: Any, status: int, reason: str, message: str) -> None:
    """What gunicorn's ``write_error`` sends, as the one JSON error shape."""
    body = json.dumps({"error": {"code": CODES.get(status, "invalid_input"),
                                 "message": f"the server could not read the request: {message or reason}",
                                 "details": {}}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")
    util.write_nonblock(sock, head + body)


def install() -> None:
    """Makes this process's gunicorn write its refusals with :func:`write_json_error`."""
    util.write_error = write_json_error
