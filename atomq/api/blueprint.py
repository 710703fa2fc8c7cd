"""flask-smorest's Blueprint with this contract's choices made once.

Invalid input is 400 (webargs' default is 422), bodies are read through the
app's strict JSON (``atomq.api.wire.strict_json``, not webargs' own parser), and
every view gets the services of its node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from flask import Request, Response, current_app, g, request
from flask_smorest import Blueprint
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request
from werkzeug.routing import BaseConverter, PathConverter

from atomq.api.schemas.common import NAME_PATTERN, ErrorSchema
from atomq.api.services import Services
from atomq.errors import AtomqError
from atomq.tenants import Principal


class NameConverter(BaseConverter):
    """A queue or subscriber name in a path: documented with its pattern, matched loosely
    so that a name breaking the rule reaches the view and gets a 400 that says why."""

    DOC = {"type": "string", "pattern": NAME_PATTERN}


class TopicConverter(PathConverter):
    """A topic in a path: everything up to the route's next part, empty levels included, so that
    ``/v1/topics//a/messages`` reaches the view and gets a 400 naming the topic's rule (werkzeug's
    path converter refuses a leading "/", a 404 that says nothing of why)."""

    regex = ".+?"
    part_isolating = False  # werkzeug infers it from a "/" in the regex, which this one has not
    DOC = {"type": "string"}


class Parser(FlaskParser):
    DEFAULT_VALIDATION_STATUS = 400

    def _raw_load_json(self, req: Request) -> Any:
        """The body as the app's JSON provider reads it; no body is no value, as webargs has it."""
        if not is_json_request(req) or not req.get_data(cache=True):
            return core.missing
        return req.get_json()


TENANT_HEADER = {
    "in": "header", "name": "X-Atomq-Tenant", "required": False,
    "schema": {"type": "string"},
    "description": "with the owner key, the tenant the call acts for (then required): its id (t_ and 12 lowercase "
                   "hex characters) or its name; a tenant key ignores it",
}


IDEMPOTENCY_HEADER = {
    "in": "header", "name": "Idempotency-Key", "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[ -~]+$"},
    "description": "1 to 128 printable ASCII characters naming this request: for a day, a repeat with the same "
                   "key stores nothing more and answers what the first stored (409 idempotency_key_reused with "
                   "another body). Retry a 503 outcome_unknown with it",
}


def idempotency_key() -> str | None:
    """The request's Idempotency-Key header, checked by the send it names (``RequestToken``)."""
    return request.headers.get("Idempotency-Key")


Decorated = TypeVar("Decorated", bound=Callable[..., Any])


class ApiBlueprint(Blueprint):  # type: ignore[misc]  # flask-smorest ships no type information
    """``tenant_scoped``: its routes act for a tenant, so they document ``X-Atomq-Tenant``.

    flask-smorest's decorators are untyped; the views keep their types through the
    signatures below, which say what each decorator returns: the view it was given.
    """

    ARGUMENTS_PARSER = Parser()

    def __init__(self, *args: Any, tenant_scoped: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_scoped = tenant_scoped

    def route(self, rule: str, *, parameters: list[Any] | None = None,
              **options: Any) -> Callable[[Decorated], Decorated]:
        if self.tenant_scoped:
            parameters = [*(parameters or []), TENANT_HEADER]
        return cast(Callable[[Decorated], Decorated], super().route(rule, parameters=parameters, **options))

    def arguments(self, schema: Any, **kwargs: Any) -> Callable[[Decorated], Decorated]:
        """One instance of ``schema`` for every request: given a class, webargs makes a new one
        per request, and its deep copy of the fields cost a get that acks 0.1 ms. A schema keeps
        no state between loads, so the instance is shared by the worker's threads."""
        instance = schema() if isinstance(schema, type) else schema
        return cast(Callable[[Decorated], Decorated], super().arguments(instance, **kwargs))

    def response(self, status_code: int, schema: Any = None, **kwargs: Any) -> Callable[[Decorated], Decorated]:
        return cast(Callable[[Decorated], Decorated], super().response(status_code, schema, **kwargs))

    def alt_response(self, status_code: int, **kwargs: Any) -> Callable[[Decorated], Decorated]:
        return cast(Callable[[Decorated], Decorated], super().alt_response(status_code, **kwargs))

    def before_request(self, view: Decorated) -> Decorated:
        return cast(Decorated, super().before_request(view))

    def after_request(self, hook: Decorated) -> Decorated:
        return cast(Decorated, super().after_request(hook))

    def doc(self, **kwargs: Any) -> Callable[[Decorated], Decorated]:
        return cast(Callable[[Decorated], Decorated], super().doc(**kwargs))


def services() -> Services:
    return current_app.extensions["atomq"]  # type: ignore[no-any-return]


MEMORY_STATE_HEADER = "X-Atomq-Memory-State"
SEND_HEADERS = {MEMORY_STATE_HEADER: {
    "description": "the store's memory state as the node last read it (green, yellow, orange, red), on a "
                   "cluster the tenant's primary's: a sender may slow down before its sends are refused",
    "schema": {"type": "string", "enum": ["green", "yellow", "orange", "red"]}}}
"""What the answer to a send or publish carries, also when it is refused."""


def with_memory_state(response: Response) -> Response:
    """Adds the memory state to the answer of a send or publish (any status), as this node last read
    it: never a read of the store here, which may be what failed. On a cluster it is the state of the
    tenant's own primary, the one its sends are judged by.

    An error raised here would turn the answer, whatever it was, into a 500 (Flask's error handlers
    do not see it): judging the state needs the thresholds, which a process that has not read the
    server settings yet must read, and the store may be failing over. Then the header is left out."""
    if request.method == "POST" and request.url_rule is not None and request.url_rule.rule.endswith("/messages"):
        state = memory_state(services(), g.get("principal"))
        if state is not None:
            response.headers[MEMORY_STATE_HEADER] = state
    return response


def memory_state(s: Services, who: Principal | None) -> str | None:
    """The memory state the answer to a send by ``who`` (None: a key that failed) carries, or None
    when this process cannot judge it now (see ``with_memory_state``)."""
    try:
        return s.memory.last_state(who.tenant_id if who is not None else None)
    except AtomqError:
        return None


SEND_REFUSALS = {
    409: "idempotency_key_reused: the Idempotency-Key named another request within its day",
    413: "a message over its queue's max_message_bytes, a send over the server's limits on documents, or "
         "too_many_copies: more message copies than max_copies_per_request (details: copies, max)",
    429: "a rate-limit window is full, or a flow_control queue stayed full (queue_full) for flow_control_wait_ms "
         "(Retry-After)",
    503: "memory_low: the memory state refuses the send's lowest priority; not_durable: a sync queue's send was "
         "stored but not synced in time (details.ids; retry with the same dedupe_id); outcome_unknown: the store did "
         "not answer in time and the send may be stored (retry with the same Idempotency-Key). Retry-After",
    507: "quota_exceeded: the tenant's disk quota; queue_full: a queue's limit (details: limit, max, count); "
         "server_full: the server's limits",
}


def send_refusals(blp: ApiBlueprint) -> Callable[[Decorated], Decorated]:
    """Documents the answers that refuse a send or a publish (SEND_REFUSALS) on its view."""
    def document(view: Decorated) -> Decorated:
        for status, description in SEND_REFUSALS.items():
            view = blp.alt_response(status, schema=ErrorSchema, description=description)(view)
        return view
    return document
