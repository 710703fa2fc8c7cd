"""Signing in to the dashboard with an owner or tenant API key, and out again.

Sign-in checks the key as the API does (``TenantStore.authenticate``; an
execution token is no key for people) and opens a new session
(``atomq.tenants.dashboard_sessions``): a fresh id every time, so no id set
before sign-in survives it. A key that does not work gets the form again, 401, saying only that.

Login CSRF is guarded with a pre-session token (double submit): showing the
form sets a random token both in the cookie ``atomq_signin`` (HttpOnly,
Secure, SameSite=Strict, Path=/dashboard) and in the form's hidden
``csrf_token``, and a sign-in whose two do not match is 403. Another site can
neither read that cookie nor make the browser send it, so it cannot sign a
victim's browser into a session of the attacker's key.
"""

from __future__ import annotations

from flask import current_app, make_response, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from atomq.api.blueprint import services
from atomq.api.dashboard import access
from atomq.api.dashboard.blueprint import bp
from atomq.api.dashboard.sessions import SESSION_COOKIE, SIGNIN_COOKIE
from atomq.errors import Forbidden, RateLimited, Unauthorized
from atomq.tenants import api_keys
from atomq.tenants.dashboard_sessions import new_token
from atomq.tenants.execution_tokens import is_execution_token


def _form(error: str | None = None, status: int = 200) -> Response:
    """The sign-in form with a new pre-session token, in the page and in its cookie."""
    token = new_token()
    response = make_response(render_template("signin.html", signin_token=token, error=error), status)
    access.set_cookie(response, SIGNIN_COOKIE, token)
    return response


@bp.get("/signin")
def signin() -> Response:
    return _form()


@bp.post("/signin")
def signin_submit() -> Response:
    expected = request.cookies.get(SIGNIN_COOKIE)
    if not expected or not access.tokens_match(request.form.get("csrf_token"), expected):
        raise Forbidden("the sign-in form expired or came from another site: open the sign-in page again")
    key = request.form.get("key", "").strip()
    throttle, address = current_app.extensions["atomq_key_checks"], request.remote_addr or ""
    try:
        if key:
            throttle.check(address, key)
    except RateLimited as exc:
        response = _form(f"Too many keys that did not work were tried from here: {exc.message}.", 429)
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    try:
        principal = services().tenants.authenticate(key)
    except Unauthorized:
        principal = None
    if principal is None or principal.execution is not None:
        if key and not is_execution_token(key):
            throttle.failed(address, key)
        return _form("That key does not work. Sign in with the owner's key or a tenant's API key.", 401)
    store = access.sessions()
    previous = store.load(request.cookies.get(SESSION_COOKIE))
    if previous is not None:
        store.delete(previous.id)
    session = store.create(principal, api_keys.digest(key))
    response = redirect(url_for(".home"), 303)
    access.set_cookie(response, SESSION_COOKIE, session.id)
    access.clear_cookie(response, SIGNIN_COOKIE)
    return response


@bp.post("/signout")
def signout() -> Response:
    """Ends the session: its record goes, so the cookie names nothing any more."""
    access.sessions().delete(access.current().id)
    response = redirect(url_for(".signin"), 303)
    access.clear_cookie(response, SESSION_COOKIE)
    return response
