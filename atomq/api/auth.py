"""Who a request acts as: the runtime owner or a tenant, from its bearer key.

Every request but the public ones presents ``Authorization: Bearer <key>``;
the key is resolved on every request (nothing is cached), so a revoked key
stops working at once on every node. The owner acts for a tenant with the
``X-Atomq-Tenant`` header, which takes the tenant's id or its name. A key
that keeps failing from an address is refused there for a while before it
is looked at (``atomq.api.key_checks``). On the message routes' hot path a
tenant's key is read in the same round trip as the request's operation
(``claim_principal``; ``atomq.platform.store.carried_check``). A request
for no route, or with a method its route does not take, gets its 404 or 405
without a key: the routes are public in the OpenAPI document.
"""

from __future__ import annotations

from flask import current_app, g, request

from atomq.api.key_checks import KeyCheckThrottle
from atomq.api.services import Services
from atomq.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from atomq.platform.store.carried_check import KeyCheck
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
    services = current_app.extensions["atomq"]
    g.principal = resolve_principal(services, current_app.extensions["atomq_key_checks"],
                                    request.headers.get("Authorization", ""), request.remote_addr or "")
    admit(services, g.principal, request.endpoint, request.method)


def resolve_principal(services: Services, throttle: KeyCheckThrottle, authorization: str, address: str) -> Principal:
    """Who the ``Authorization`` header's bearer key acts as (401 when it is missing or unknown,
    429 while its address is throttled for it); a failed key counts against ``address``.
    The one key check of both request paths (Flask's and ``atomq.api.hot_path``), which the hot
    path makes through ``claim_principal``."""
    presented = _presented(authorization)
    if presented:
        throttle.check(address, presented)
    return _authenticated(services, throttle, presented, address)


def claim_principal(services: Services, throttle: KeyCheckThrottle, authorization: str,
                    address: str) -> tuple[Principal, KeyCheck | None]:
    """``resolve_principal`` for a front whose operations' scripts can carry the key check
    (``atomq.api.hot_path``): for a tenant's key of the current form, the principal it claims and
    its check, for the front to hold pending while it serves the request
    (``atomq.platform.store.carried_check``) and to count with ``key_failed`` once it is refused;
    for any other key, what ``resolve_principal`` answers, and None. Throttled alike."""
    presented = _presented(authorization)
    if presented:
        throttle.check(address, presented)
    claim = services.tenants.claim(presented)
    if claim is not None:
        return claim
    return _authenticated(services, throttle, presented, address), None


def key_failed(throttle: KeyCheckThrottle, authorization: str, address: str) -> None:
    """Counts the failed check of a key ``claim_principal`` claimed, as ``resolve_principal`` counts one."""
    throttle.failed(address, _presented(authorization))


def _presented(authorization: str) -> str:
    """The bearer key of an ``Authorization`` header ("" for none)."""
    scheme, _, key = authorization.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def _authenticated(services: Services, throttle: KeyCheckThrottle, presented: str, address: str) -> Principal:
    try:
        return services.tenants.authenticate(presented)
    except Unauthorized:
        if presented and not is_execution_token(presented):
            throttle.failed(address, presented)
        raise


def admit(services: Services, who: Principal, endpoint: str | None, method: str) -> None:
    """Lets ``who`` call ``endpoint``: an execution token only what EXECUTION_ENDPOINTS names, while
    its execution runs. Kept apart from ``resolve_principal`` because a refusal here still answers
    as the principal's (its tenant's memory state on a send)."""
    grant = who.execution
    if grant is not None:
        if (endpoint, method) not in EXECUTION_ENDPOINTS:
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
    tenant = tenant_of(principal(), request.headers.get("X-Atomq-Tenant", ""),
                       current_app.extensions["atomq"].tenants)
    g.atomq_tenant = tenant  # the request's tenant for its latency and log records
    return tenant


def tenant_of(who: Principal, header: str, tenants: TenantStore) -> str:
    """The tenant ``who`` acts for: its key's, or for the owner the tenant ``header`` (the value
    of ``X-Atomq-Tenant``) names (400 when it names none)."""
    if who.tenant_id is not None:
        return who.tenant_id
    given = header.strip()
    if not given:
        raise InvalidInput("the owner key acts for a tenant named in the X-Atomq-Tenant header (its id or name)",
                           field="X-Atomq-Tenant")
    return _tenant_id(given, tenants)


def request_holder() -> str:
    """Who a get made by this request leaves holding its deliveries when it names no consumer."""
    return holder_of(principal())


def holder_of(who: Principal) -> str:
    """``key:<key id>`` for a tenant's API key (the id is no secret and is the tenant's own), else
    ``owner`` (the runtime owner acting for the tenant)."""
    return f"key:{who.key_id}" if who.key_id else "owner"


def _tenant_id(given: str, tenants: TenantStore) -> str:
    """The id of the tenant ``X-Atomq-Tenant`` names: its id, or its name (names are unique, and
    none has the form of an id, so the two never clash), found through the index of names, one
    read, not a scan of the tenants. An unknown one is 404 either way. A name whose bytes read as
    two names (see ``_readings``) that are two tenants' is refused rather than guessed."""
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
