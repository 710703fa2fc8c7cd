"""The JSON protocol's SQS requests served without Flask: a WSGI callable in front of Flask's, behind
``atomq.api.hot_path`` (which serves the native message routes the same way and hands it the rest).

Why: an SQS request is the JSON protocol's ``POST /`` nearly always, and Flask's request context,
URL matching and before/after hooks cost it about a tenth of its CPU, where a native send served
by the hot path pays none (BENCHMARKS.md, "The SQS endpoint"). Here a request costs what
``endpoint.answer`` does, which is the Flask view's own work: the same signature check, handlers
and answers, and the same latency record (route ``/``).

It answers only what it is sure of: ``POST /`` naming an ``X-Amz-Target``, with its length given
and within the app's limit, and tracing off (the Flask instrumentation makes the request's span).
Anything else, a query-protocol request or a queue URL's path included, goes to Flask unchanged.
An error no SQS answer covers (a bug) is answered as Flask's handlers answer it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

from atomq import telemetry
from atomq.api import errors
from atomq.api.latency import LatencyRecorder
from atomq.api.sqs.endpoint import RECENT_QUEUES, answer
from atomq.api.wire.strict_json import StrictRequest

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class SqsFront:
    """The app's WSGI callable, in front of the one it had."""

    def __init__(self, app: Flask, inner: WsgiApp) -> None:
        self.app = app
        self.inner = inner

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if (environ.get("REQUEST_METHOD") != "POST" or environ.get("PATH_INFO") != "/"
                or not environ.get("HTTP_X_AMZ_TARGET") or telemetry.tracing()):
            return self.inner(environ, start_response)
        length = environ.get("CONTENT_LENGTH", "")
        most = self.app.config["MAX_CONTENT_LENGTH"]
        if not length.isdigit() or (most is not None and int(length) > most):
            return self.inner(environ, start_response)
        started = time.perf_counter()
        request = StrictRequest(environ)
        request.max_content_length = most  # as Flask's view has it, without an app context
        extensions = self.app.extensions
        tenant = ""
        try:
            response, tenant = answer(request, extensions["atomq"], extensions["atomq_key_checks"],
                                      extensions[RECENT_QUEUES])
        except Exception as exc:  # answered as Flask's error handlers answer it
            with self.app.app_context():
                response = errors.response_for(exc, "POST", "/")
        recorder: LatencyRecorder | None = extensions.get("atomq_latency")
        if recorder is not None:
            recorder.record(time.perf_counter() - started, tenant, "POST", "/")
        result: Iterable[bytes] = response(environ, start_response)
        return result


def install(app: Flask) -> None:
    """Puts the front before Flask's WSGI callable (the hot path then goes before it)."""
    app.wsgi_app = SqsFront(app, app.wsgi_app)  # type: ignore[method-assign]
