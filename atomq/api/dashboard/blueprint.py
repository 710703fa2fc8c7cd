"""The dashboard's Flask blueprint: pages at ``/dashboard/``, its templates and static files.

A plain Flask blueprint, registered apart from flask-smorest's Api, so none of
its pages enters the OpenAPI document: they are for people, not clients.
"""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("dashboard", __name__, url_prefix="/dashboard", template_folder="templates",
               static_folder="static", static_url_path="/static")

LIVE_ENDPOINTS = frozenset({"dashboard.overview_live", "dashboard.tenant_live", "dashboard.queue_live",
                            "dashboard.listener_live"})
"""The JSON endpoints the pages' script refreshes from: they answer errors as JSON, not pages."""
