"""Errors under ``/dashboard`` as HTML pages with the error's own status.

The API's JSON error handlers (``atomq.api.errors``) are the app's; these are
the blueprint's, which Flask prefers for the blueprint's requests, so the
API's answers keep their JSON shape and a person gets a page. The JSON
endpoints the pages' script reads keep the JSON shape. Anything that is not
an atomq or HTTP error is a bug: logged with its traceback, a 500 page.
"""

from __future__ import annotations

import logging

from flask import render_template, request
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response

from atomq.api.dashboard.blueprint import LIVE_ENDPOINTS, bp
from atomq.api.errors import atomq_error_response, error_response, http_error_response
from atomq.errors import AtomqError, RateLimited

log = logging.getLogger("atomq.api.dashboard")

TITLES = {400: "Not done", 401: "Signed out", 403: "Refused", 404: "Not found", 405: "Not allowed",
          409: "Conflict", 413: "Too large", 429: "Too many requests", 503: "Unavailable",
          507: "Quota reached"}


def _page(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    html = render_template("error.html", status=status, title=TITLES.get(status, "Error"), message=message)
    return Response(html, status, headers, mimetype="text/html")


@bp.errorhandler(AtomqError)
def atomq_error(exc: AtomqError) -> Response:
    if request.endpoint in LIVE_ENDPOINTS:
        return atomq_error_response(exc)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, RateLimited) else None
    return _page(exc.http_status, exc.message, headers)


@bp.errorhandler(HTTPException)
def http_error(exc: HTTPException) -> Response:
    if request.endpoint in LIVE_ENDPOINTS:
        return http_error_response(exc)
    return _page(exc.code or 500, exc.description or exc.name)


@bp.errorhandler(Exception)
def unexpected(exc: Exception) -> Response:
    log.exception("unexpected error serving a dashboard page")
    if request.endpoint in LIVE_ENDPOINTS:
        return error_response(500, "internal_error", "the server failed; this is a bug and was logged")
    return _page(500, "The server failed; this is a bug and was logged.")
