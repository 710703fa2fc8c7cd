"""Who a request acts as: the runtime owner or a tenant, from its bearer key.

Every request but the public ones presents ``Authorization: Bearer <key>``;
the key is resolved on every request (nothing is cached), so a revoked key
stops working at once on every node. The owner acts for a tenant with the
``X-Atomq-Tenant`` header, which takes the tenant's id or its name. A key
that keeps failing from an address is refused there for a while before it
is looked at (``atomq.api.key_checks``). A request
for no route, or with a method its route does not take, gets its 404 or 405
without a key: the routes are public in the OpenAPI document.
"""

from __future__ import annotations

from flask import current_app, g, request

from atomq.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from atomq.tenants import Principal, TenantStore
from atomq.tenants.execution_tokens import is_execution_token
from atomq.tenants.records import TENANT_ID

PUBLIC_PATHS = frozenset({"/v1/health", "/v1/ready", "/openapi.json"})
METRICS_PATH = "/metrics"
METRICS_PUBLIC = "METRICS_PUBLIC"
"""Public too when the app's ``METRICS_PUBLIC`` is set (``atomq serve --metrics-public``)."""
SQS_BLUEPRINT = "sqs"
DASHBOARD_PATH = "/dashboard/"
"""The dashboard's pages sign people in with a session of their own (``atomq.api.dashboard.access``)."""
EXECUTION_ENDPOINTS = frozenset({
    ("messages.Messages", "POST"),
    ("messages.Messages", "GET"),
    ("topics.TopicMessages", "POST"),
    ("topics.ManyTopicsMessages", "POST"),
    ("listeners.ExecutionStart", "POST"),
    ("listeners.ExecutionExtend", "POST"),
    ("listeners.ExecutionFinish", "POST"),
})
"""What an execution token may call: take its batch, send, publish, browse (a checkpoint), extend its
batch, finish."""


def authenticate() -> None:
    """``before_request``: resolves ``g.principal`` (401 when the key is missing or unknown)."""
    if request.routing_exception is not None or request.method == "OPTIONS":
        return
    if request.path in PUBLIC_PATHS or f"{request.path}/".startswith(DASHBOARD_PATH):
        return
    if request.path == METRICS_PATH and current_app.config.get(METRICS_PUBLIC):
        return
    if request.blueprint == SQS_BLUEPRINT:
        return  # signed with SigV4, checked by the SQS endpoint itself (atomq.api.sqs.signing)
    header = request.headers.get("Authorization", "")
    scheme, _, key = header.partition(" ")
    presented = key.strip() if scheme.lower() == "bearer" else ""
    services = current_app.extensions["atomq"]
    throttle = current_app.extensions["atomq_key_checks"]
    address = request.remote_addr or ""
    if presented:
        throttle.check(address, presented)
    try:
        g.principal = services.tenants.authenticate(presented)
    except Unauthorized:
        if presented and not is_execution_token(presented):
            throttle.failed(address, presented)
        raise
    grant = g.principal.execution
    if grant is not None:
        if (request.endpoint, request.method) not in EXECUTION_ENDPOINTS:
            raise Forbidden("an execution token can only take its batch, send, publish, browse, extend and finish")
        if not services.listeners.execution_alive(grant.tenant, grant.listener, grant.execution):
            raise Unauthorized("the execution token's execution is over")
    services.current_settings()


def principal() -> Principal:
    return g.principal  # type: ignore[no-any-return]


def require_owner() -> None:
    """Forbidden unless the owner's key signed the request; OPTIONS, which names the methods
    of a route to anyone (and carries no key, see ``authenticate``), passes."""
    if request.method == "OPTIONS":
        return
    if not principal().is_owner:
        raise Forbidden("this call needs the runtime owner's key")


def current_tenant() -> str:
    """The tenant a queue call acts for: the key's tenant, or the owner's ``X-Atomq-Tenant``."""
    p = principal()
    if p.tenant_id is not None:
        g.atomq_tenant = p.tenant_id
        return p.tenant_id
    given = request.headers.get("X-Atomq-Tenant", "").strip()
    if not given:
        raise InvalidInput("the owner key acts for a tenant named in the X-Atomq-Tenant header (its id or name)",
                           field="X-Atomq-Tenant")
    tenant = _tenant_id(given)
    g.atomq_tenant = tenant  # the request's tenant for its latency and log records
    return tenant


def request_holder() -> str:
    """Who a get made by this request leaves holding its deliveries when it names no consumer:
    ``key:<key id>`` for a tenant's API key (the id is no secret and is the tenant's own), else
    ``owner`` (the runtime owner acting for the tenant)."""
    key_id = principal().key_id
    return f"key:{key_id}" if key_id else "owner"


def _tenant_id(given: str) -> str:
    """The id of the tenant ``X-Atomq-Tenant`` names: its id, or its name (names are unique, and
    none has the form of an id, so the two never clash), found through the index of names, one
    read, not a scan of the tenants. An unknown one is 404 either way. A name whose bytes read as
    two names (see ``_readings``) that are two tenants' is refused rather than guessed."""
    tenants: TenantStore = current_app.extensions["atomq"].tenants
    if TENANT_ID.fullmatch(given):
        if tenants.exists(given):
            return given
        raise NotFound(f"tenant {given!r} does not exist", tenant=given)
    found = {named.id for named in map(tenants.named, _readings(given)) if named is not None}
    if len(found) > 1:
        raise Conflict(f"X-Atomq-Tenant {given!r} names two tenants, read as UTF-8 and as Latin-1: give the "
                       "tenant's id", field="X-Atomq-Tenant", tenants=sorted(found))
    if not found:
        raise NotFound(f"tenant {given!r} does not exist", tenant=given)
    return found.pop()


def _readings(value: str) -> list[str]:
    """What a header's text may have been written as: the server reads a header's bytes as
    Latin-1, and a client such as curl sends a name's UTF-8, which reads back here (so does
    ``AtomqClient.act_for``); bytes that are no UTF-8 were Latin-1 indeed (what Python's
    http.client sends). ASCII reads one way only."""
    try:
        utf8 = value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return [value]
    return [utf8] if utf8 == value else [utf8, value]
