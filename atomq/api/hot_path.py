"""The message routes without Flask: a WSGI callable in front of the app that serves send, publish,
get, ack, nack, extend and release itself, and hands every other request to Flask.

Why: Flask's dispatch, webargs and marshmallow cost one of these requests three times what the
store does (BENCHMARKS.md, "What one request costs the node"). Here a request costs a match of
its path, the body's decoding (``parse_send``; msgspec for the rest, ``atomq.api.wire.selections``)
and the same calls the views make: the key check (``auth.resolve_principal``, ``auth.admit``), the
tenant (``auth.tenant_of``), the view's own work (``messages.answer_*``, ``topics.answer_*``), the
memory state header (``blueprint.memory_state``), the latency record (``LatencyRecorder.record``),
and for an error raised on the way the app's error answers (``errors.response_for``). A tenant's
key is read in the same round trip as the view's script (``auth.claim_principal``): one store
round trip a request where Flask's path makes two.

It answers only what it is sure of. A request goes to Flask unchanged when its method, path, name
or topic is not one of these routes' plain forms, when its body is not a JSON body with its length
given and within the limit, when the body's decoder refuses it (Flask then answers the error, in
the one shape and with the same message, having paid nothing else), and whenever tracing is on (the
Flask instrumentation makes the request's span and its children). A body already read is handed on
as it came (``wsgi.input`` over the same bytes). Nothing with an effect (a key check that counts a
failure, a send) happens before the request is known to be served here, so no request is served
twice. ``HOT_PATH`` (True by default) in the app's config turns it off.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from flask import Flask, Response
from werkzeug.http import HTTP_STATUS_CODES

from atomq import telemetry
from atomq.api import auth, errors, messages, topics
from atomq.api.blueprint import MEMORY_STATE_HEADER, memory_state
from atomq.api.latency import LatencyRecorder, route_label
from atomq.api.schemas.common import NAME_PATTERN
from atomq.api.services import Services
from atomq.api.wire import render, selections, strict_json
from atomq.api.wire.send_body import parse_publish_many, parse_send
from atomq.errors import InvalidInput, Unauthorized
from atomq.platform.queues.topics import check_topic
from atomq.platform.store import carried_check
from atomq.telemetry import log_context
from atomq.tenants import Principal

HOT_PATH = "HOT_PATH"
"""The app's setting: False leaves every request to Flask (the hot path is on by default)."""

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Serve = Callable[[Services, str, str, Any, dict[str, Any], Principal], render.Answer | dict[str, int]]

_QUEUE_ROUTE = re.compile(rf"/v1/queues/({NAME_PATTERN[1:-1]})/(messages|get|ack|nack|extend|release)")
_TOPIC_ROUTE = re.compile(r"/v1/topics/(.+?)/messages")
_PUBLISH_MANY = "/v1/topics/messages"


@dataclass(frozen=True)
class Route:
    """One of the routes served here: its Flask endpoint (what an execution token may call is
    named by endpoint), its latency label, whether its answer carries the memory state, how its
    body is decoded (None: not here) and what answers it."""

    endpoint: str
    decode: Callable[[str, bytes], Any]
    serve: Serve
    sends: bool


def _sent(s: Services, tenant: str, name: str, body: Any, environ: dict[str, Any], who: Principal) -> render.Answer:
    return messages.answer_send(s, tenant, name, body, int(environ["CONTENT_LENGTH"]),
                                environ.get("HTTP_IDEMPOTENCY_KEY"))


def _published(s: Services, tenant: str, topic: str, body: Any, environ: dict[str, Any], who: Principal) -> render.Answer:
    return topics.answer_publish(s, tenant, topic, body, int(environ["CONTENT_LENGTH"]),
                                 environ.get("HTTP_IDEMPOTENCY_KEY"))


def _published_many(s: Services, tenant: str, _: str, body: Any, environ: dict[str, Any], who: Principal) -> render.Answer:
    return topics.answer_publish_many(s, tenant, body[0], body[1], int(environ["CONTENT_LENGTH"]),
                                      environ.get("HTTP_IDEMPOTENCY_KEY"))


def _taken(s: Services, tenant: str, name: str, body: Any, environ: dict[str, Any], who: Principal) -> render.Answer:
    return messages.answer_get(s, tenant, name, body, auth.holder_of(who))


def _settled(answer: Callable[[Services, str, str, dict[str, Any]], dict[str, int]]) -> Serve:
    return lambda s, tenant, name, body, environ, who: answer(s, tenant, name, body)


def _send_body(_: str, body: bytes) -> Any:
    return parse_send(strict_json.parse(body, checked_by_caller=True))


def _topic_send_body(topic: str, body: bytes) -> Any:
    check_topic(topic)
    return _send_body(topic, body)


def _publish_many_body(_: str, body: bytes) -> Any:
    return parse_publish_many(strict_json.parse(body, checked_by_caller=True))


def _selection(kind: str) -> Callable[[str, bytes], Any]:
    return lambda _, body: selections.decode(kind, body)


QUEUE_ROUTES = {
    "messages": Route("messages.Messages", _send_body, _sent, sends=True),
    "get": Route("messages.Get", _selection("get"), _taken, sends=False),
    "ack": Route("messages.Ack", _selection("ack"), _settled(messages.answer_ack), sends=False),
    "nack": Route("messages.Nack", _selection("nack"), _settled(messages.answer_nack), sends=False),
    "extend": Route("messages.Extend", _selection("extend"), _settled(messages.answer_extend), sends=False),
    "release": Route("messages.Release", _selection("release"), _settled(messages.answer_release), sends=False),
}
TOPIC_ROUTE = Route("topics.TopicMessages", _topic_send_body, _published, sends=True)
PUBLISH_MANY_ROUTE = Route("topics.ManyTopicsMessages", _publish_many_body, _published_many, sends=True)


class PlainAnswer:
    """A served request's answer written without werkzeug's ``Response``: the status line and
    headers that ``Response(body, status, mimetype="application/json")`` writes, in its order
    (``Content-Type``, ``Content-Length``, then what is added), and the body as one item.

    Why: building a ``Response`` (its ``Headers``, the mimetype's parsing) and its WSGI call (its
    headers copied and checked, its body's iterator) cost 3.6% of a one-message send's worker CPU
    (BENCHMARKS.md, "Where a one-message send's worker CPU goes") for two fixed headers. Errors
    still answer with the app's ``Response`` (``errors.response_for``)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        self.headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        start_response(status_line(self.status), self.headers)
        return [self.body]


_STATUS_LINES: dict[int, str] = {}


def status_line(status: int) -> str:
    """``status`` as werkzeug's ``Response`` writes it: ``201 CREATED``."""
    line = _STATUS_LINES.get(status)
    if line is None:
        line = _STATUS_LINES[status] = f"{status} {HTTP_STATUS_CODES.get(status, 'unknown').upper()}"
    return line


def route_of(path: str) -> tuple[Route, str] | None:
    """The route ``path`` names here, with the queue name or topic it holds; None for any other."""
    if path == _PUBLISH_MANY:
        return PUBLISH_MANY_ROUTE, ""
    found = _QUEUE_ROUTE.fullmatch(path)
    if found is not None:
        return QUEUE_ROUTES[found.group(2)], found.group(1)
    found = _TOPIC_ROUTE.fullmatch(path)
    if found is not None:
        return TOPIC_ROUTE, found.group(1)
    return None


class HotPath:
    """The app's WSGI callable, in front of Flask's (``app.wsgi_app``)."""

    def __init__(self, app: Flask, flask: WsgiApp) -> None:
        self.app = app
        self.flask = flask
        self.labels = {rule.endpoint: route_label(rule.rule) for rule in app.url_map.iter_rules()}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        found = route_of(environ.get("PATH_INFO", "")) if environ.get("REQUEST_METHOD") == "POST" else None
        if found is None or telemetry.tracing() or not self.app.config.get(HOT_PATH, True):
            return self.flask(environ, start_response)
        length = environ.get("CONTENT_LENGTH", "")
        most = self.app.config["MAX_CONTENT_LENGTH"]
        if (not length.isdigit() or (most is not None and int(length) > most)
                or environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower() != "application/json"):
            return self.flask(environ, start_response)
        route, name = found
        body = environ["wsgi.input"].read(int(length))
        decoded = None
        if len(body) == int(length):
            try:
                decoded = route.decode(name, body)
            except (InvalidInput, ValueError):
                decoded = None
        if decoded is None:
            environ["wsgi.input"] = io.BytesIO(body)
            return self.flask(environ, start_response)
        return self._serve(route, name, decoded, environ, started)(environ, start_response)

    def _serve(self, route: Route, name: str, body: Any, environ: dict[str, Any],
               started: float) -> PlainAnswer | Response:
        """What Flask would answer to this request, its body read and found valid: the key, the
        tenant, the view's work; the memory state on a send's answer and the latency record on all.

        A tenant's key is claimed, not read (``auth.claim_principal``): its check stays pending
        while the view works, so the view's script carries it, and nothing is answered before it
        is made (``carried_check``). A key that fails is answered and counted as Flask's path
        does, as if the view had never begun: no tenant in the latency record or the log."""
        extensions = self.app.extensions
        services: Services = extensions["atomq"]
        throttle = extensions["atomq_key_checks"]
        authorization, address = environ.get("HTTP_AUTHORIZATION", ""), environ.get("REMOTE_ADDR") or ""
        who: Principal | None = None
        tenant = ""
        with log_context(queue=name if route.endpoint.startswith("messages.") else None):
            try:
                who, check = auth.claim_principal(services, throttle, authorization, address)
                try:
                    with carried_check.pending(check):
                        try:
                            auth.admit(services, who, route.endpoint, "POST")
                            tenant = auth.tenant_of(who, environ.get("HTTP_X_ATOMQ_TENANT", ""), services.tenants)
                            with log_context(tenant=tenant):
                                answer = route.serve(services, tenant, name, body, environ, who)
                        finally:
                            carried_check.settle()  # a bad key's refusal, in place of whatever else
                except Unauthorized:
                    if check is not None and check.refused:
                        who, tenant = None, ""
                        auth.key_failed(throttle, authorization, address)
                    raise
                response = self._answer(answer)
            except Exception as exc:  # answered as Flask's error handlers answer it
                with self.app.app_context(), log_context(tenant=tenant or (who.tenant_id if who else None)):
                    response = errors.response_for(exc, "POST", environ["PATH_INFO"])
        if route.sends:
            state = memory_state(services, who)
            if state is not None:
                if isinstance(response, PlainAnswer):
                    response.headers.append((MEMORY_STATE_HEADER, state))
                else:
                    response.headers[MEMORY_STATE_HEADER] = state
        recorder: LatencyRecorder | None = extensions.get("atomq_latency")
        if recorder is not None:
            recorder.record(time.perf_counter() - started, tenant, "POST", self.labels[route.endpoint])
        return response

    def _answer(self, answer: render.Answer | dict[str, int]) -> PlainAnswer | Response:
        """The bytes the views answer: a route's ``(value, status)`` as ``render.json_response``
        dumps it, a settle's counts as the app's JSON provider does (compact, with a newline); in
        debug, or with the provider's ``compact`` off, that provider's own (indented) ``Response``."""
        if isinstance(answer, tuple):
            return PlainAnswer(answer[1], strict_json.dump_bytes(answer[0]))
        provider = self.app.json
        if getattr(provider, "compact", None) is False or (getattr(provider, "compact", None) is None and self.app.debug):
            return cast(Response, provider.response(answer))
        return PlainAnswer(200, (provider.dumps(answer, separators=(",", ":")) + "\n").encode())
