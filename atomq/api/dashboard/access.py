"""Who a dashboard request acts as, and the checks every request passes first.

The API's bearer-key check skips ``/dashboard`` (``atomq.api.auth``); this
gate stands in for it. Static files and the sign-in page pass. Every other
request needs the session cookie of a live record whose key still works,
checked again on every request (``TenantStore.reauthenticate``), so a
revoked key or a removed tenant ends the session at once. Without one, a page
sends the browser to sign in and a JSON endpoint answers 401.

Every POST carries the session's CSRF token in the form field
``csrf_token``; a missing or wrong one is 403 before the view runs, so the
request changes nothing. The cookie's SameSite=Strict keeps it off
cross-site requests too; the token holds where SameSite is not enforced.
"""

from __future__ import annotations

import hmac
from typing import Any

from flask import g, redirect, request, url_for
from werkzeug.wrappers import Response

from atomq.api.blueprint import services
from atomq.api.dashboard.blueprint import LIVE_ENDPOINTS, bp
from atomq.api.dashboard.sessions import COOKIE_PATH, SESSION_COOKIE
from atomq.api.errors import error_response
from atomq.errors import AtomqError, Forbidden, NotFound, Unauthorized
from atomq.tenants import Tenant
from atomq.tenants.dashboard_sessions import DashboardSession, SessionStore
from atomq.tenants.records import check_issued_tenant_id, tenant_not_found

OPEN_ENDPOINTS = frozenset({"dashboard.static", "dashboard.signin", "dashboard.signin_submit"})
"""Reachable without a session; the sign-in form checks a token of its own (``signin``)."""
REFRESH_MS = 3000
"""How often a page's script fetches its numbers again."""
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
"""No framing (clickjacking), no script or style but the dashboard's own files."""


def sessions() -> SessionStore:
    return SessionStore(services().queues.storage)


def set_cookie(response: Response, name: str, value: str) -> None:
    """A dashboard cookie: HttpOnly, Secure, SameSite=Strict, sent only to ``/dashboard``."""
    response.set_cookie(name, value, httponly=True, secure=True, samesite="Strict", path=COOKIE_PATH)


def clear_cookie(response: Response, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, secure=True, httponly=True, samesite="Strict")


def tokens_match(given: str | None, expected: str) -> bool:
    """Compares a token from a form with the one kept, in constant time."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


@bp.before_request
def gate() -> Response | None:
    """Resolves ``g.dashboard_session``; refuses what needs a session and has none, and POSTs without the token."""
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    store = sessions()
    session = store.load(request.cookies.get(SESSION_COOKIE), renew=request.endpoint not in LIVE_ENDPOINTS)
    if session is not None and not _key_still_works(session):
        store.delete(session.id)
        session = None
    if session is None:
        response: Response
        if request.endpoint in LIVE_ENDPOINTS:
            response = error_response(401, "unauthorized", "the dashboard session ended; sign in again")
        else:
            response = redirect(url_for("dashboard.signin"), 303)
        clear_cookie(response, SESSION_COOKIE)
        return response
    if request.method == "POST" and not tokens_match(request.form.get("csrf_token"), session.csrf_token):
        raise Forbidden("the form's CSRF token is missing or wrong: reload the page and try again")
    g.dashboard_session = session
    return None


def _key_still_works(session: DashboardSession) -> bool:
    try:
        principal = services().tenants.reauthenticate(session.key_id, session.key_digest)
    except Unauthorized:
        return False
    return principal.tenant_id == session.tenant_id


@bp.after_request
def security_headers(response: Response) -> Response:
    """Every dashboard answer: the headers above; pages and JSON are never cached (they show tenants' data)."""
    response.headers.update(SECURITY_HEADERS)
    if request.endpoint != "dashboard.static":
        response.headers["Cache-Control"] = "no-store"
    return response


def current() -> DashboardSession:
    """The session of this request (the gate has let it through)."""
    return g.dashboard_session  # type: ignore[no-any-return]


def scoped_tenant(tenant_id: str) -> Tenant:
    """The tenant a page of ``/dashboard/tenants/<tenant_id>/...`` shows.

    The owner may open any tenant; a tenant only its own. Another tenant's
    id is 404 with the very error of an id that names no tenant, so ids
    cannot be probed.
    """
    session = current()
    check_issued_tenant_id(tenant_id)
    if not session.is_owner and tenant_id != session.tenant_id:
        raise tenant_not_found(tenant_id)
    return services().tenants.get(tenant_id)


def page_not_found() -> NotFound:
    """The one error for a dashboard page that does not exist, or that this session may not see."""
    return NotFound("there is no such dashboard page")


def owner_only() -> None:
    """Owner pages answer a tenant 404, as pages that do not exist."""
    if not current().is_owner:
        raise page_not_found()


def signed_in_tenant() -> Tenant | None:
    """The tenant a tenant's session acts as, for the header to name it by its name (its id means
    little to people); None for the owner, or when it cannot be read (an error page while the
    store is out of reach must still render)."""
    session = g.get("dashboard_session")
    if session is None or session.is_owner:
        return None
    try:
        return services().tenants.get(session.tenant_id)
    except AtomqError:
        return None


@bp.context_processor
def page_context() -> dict[str, Any]:
    """What every page template may use: the session (``dash``), its CSRF token, the refresh
    period, and ``signed_in_tenant``."""
    session = g.get("dashboard_session")
    return {
        "dash": session,
        "csrf_token": session.csrf_token if session is not None else "",
        "refresh_ms": REFRESH_MS,
        "signed_in_tenant": signed_in_tenant,
    }
