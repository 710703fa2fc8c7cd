"""One JSON error shape for every failure: ``{"error": {"code", "message", "details"}}``.

atomq errors carry their own status and data; HTTP errors raised by Flask,
werkzeug or webargs (404 route, 405, 413, a body that fails its schema) are
mapped here to the same shape, so a client parses one thing. The store
being down or failing over is a 503 with ``Retry-After`` wherever it shows,
even as a redis-py exception that escaped the code meant to translate it.
Anything else is a bug: it is logged with its traceback and answered 500
without details.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from atomq.errors import AtomqError, RateLimited, StorageError, StorageFull, class_for_status
from atomq.platform.store.storage import STORE_ERRORS, translate

log = logging.getLogger("atomq.api")

# A body over the limit is read and thrown away up to this size before the 413
# goes out: a client still sending would otherwise see the connection reset
# instead of the answer. Larger bodies are cut off.
DRAIN_LIMIT_BYTES = 64 * 1024 * 1024

HTTP_ONLY_CODES = {405: "method_not_allowed", 415: "unsupported_media_type", 422: "invalid_input",
                   503: "unavailable"}
"""The codes of HTTP errors that no atomq error stands for; any other status takes the code of the
error class that holds it (``atomq.errors.class_for_status``)."""


def code_for_status(status: int) -> str:
    if status in HTTP_ONLY_CODES:
        return HTTP_ONLY_CODES[status]
    cls = class_for_status(status)
    return cls.code if cls is not None else "error"


def error_response(status: int, code: str, message: str, details: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    response = jsonify({"error": {"code": code, "message": message, "details": details or {}}})
    response.status_code = status
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def atomq_error_response(exc: AtomqError) -> Response:
    headers = None
    if isinstance(exc, RateLimited):
        headers = {"Retry-After": str(exc.retry_after)}
    elif isinstance(exc, StorageError) and not isinstance(exc, StorageFull):
        headers = {"Retry-After": str(StorageError.retry_after)}
    return error_response(exc.http_status, exc.code, exc.message, exc.details, headers)


def store_error_response(exc: Exception) -> Response:
    """A store exception that reached the app untranslated: the same 503 as a translated one."""
    return _escaped_store_error(exc, request.method, request.path)


def _escaped_store_error(exc: Exception, method: str, path: str) -> Response:
    log.warning("a store error escaped its translation serving %s %s: %r", method, path, exc)
    return atomq_error_response(translate(exc))


def unexpected_error_response() -> Response:
    """Anything else: a bug, logged with its traceback (call it inside the ``except``)."""
    log.exception("unexpected error serving a request")
    return error_response(500, "internal_error", "the server failed; this is a bug and was logged")


def response_for(exc: Exception, method: str, path: str) -> Response:
    """What the handlers ``register`` installs answer to ``exc``, raised serving ``method path``
    outside a request context (``atomq.api.hot_path``, inside an app context): its view can raise
    an atomq error, a store error or a bug, never an HTTP error of werkzeug's."""
    if isinstance(exc, AtomqError):
        return atomq_error_response(exc)
    if isinstance(exc, STORE_ERRORS):
        return _escaped_store_error(exc, method, path)
    return unexpected_error_response()


def http_error_response(exc: HTTPException) -> Response:
    status = exc.code or 500
    data = getattr(exc, "data", None) or {}
    details: dict[str, Any] = {}
    message = exc.description or exc.name
    if "messages" in data:  # webargs: the schema's messages, by location then field
        details["fields"] = data["messages"]
        message = "the request does not match its schema; details.fields names each problem"
        status = 400
    headers = None
    if status == 405:
        # RFC 9110: a 405 names the methods the resource takes.
        headers = {"Allow": ", ".join(sorted(getattr(exc, "valid_methods", None) or ()))}
    if status == 413:
        message = "the request body is larger than this server accepts"
        _drain_body()
        headers = {"Connection": "close"}
    return error_response(status, code_for_status(status), message, details, headers)


def _drain_body() -> None:
    left = min(request.content_length or 0, DRAIN_LIMIT_BYTES)
    stream = request.environ["wsgi.input"]
    while left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            return
        left -= len(chunk)


def register(app: Flask) -> None:
    """Installs the handlers; flask-smorest's own HTTPException handler is replaced by ours."""
    app.register_error_handler(AtomqError, atomq_error_response)
    app.register_error_handler(HTTPException, http_error_response)
    for store_error in STORE_ERRORS:
        app.register_error_handler(store_error, store_error_response)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        return unexpected_error_response()
