"""An error answer of the node as the atomq error the server raised: the client's callers catch
``RateLimited`` (with ``retry_after``) or ``NotFound`` whether they use the library or the API."""

from __future__ import annotations

import orjson

from atomq.client.transport import Answer
from atomq.errors import (
    AtomqError,
    QueueFull,
    QuotaExceeded,
    RateLimited,
    StorageError,
    class_for_code,
    class_for_status,
)


def error_from_response(response: Answer) -> AtomqError:
    """The atomq error an error response carries, with its code, message and details kept: the class
    its status stands for, or the subclass of it that its code names (a 503 ``storage_full`` is a
    StorageFull, still a StorageError), so an ``except`` on the status's class catches it."""
    try:
        body = orjson.loads(response.data)["error"]
        code, message, details = body["code"], body["message"], dict(body.get("details") or {})
    except (ValueError, KeyError, TypeError):
        text = response.data[:200].decode("utf-8", "replace")
        code, message, details = "http_error", f"HTTP {response.status}: {text}", {}
    status = response.status
    by_status, by_code = class_for_status(status), class_for_code(code)
    cls = by_code if by_status and by_code and issubclass(by_code, by_status) else by_status or AtomqError
    if issubclass(cls, (RateLimited, StorageError)):
        details["retry_after"] = int(response.headers.get("Retry-After") or details.get("retry_after", 1))
    elif issubclass(cls, QuotaExceeded) and not issubclass(cls, QueueFull):
        details["limit"], details["used"] = int(details.get("limit", 0)), int(details.get("used", 0))
    error = cls(message, code=code, **details)
    error.http_status = status
    return error
