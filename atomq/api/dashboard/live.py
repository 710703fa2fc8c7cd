"""The JSON the pages' script fetches every few seconds to refresh their numbers and the chart.

Each endpoint answers ``{"text": {key: text}, "meters": {key: [used, limit]}}``
with the keys its page marks (see ``figures``); the queue's adds ``rates``,
the chart's buckets. Errors come as the API's JSON errors (``access.gate``
and ``errors``), 401 once the session has ended, so the script knows to
reload into the sign-in page.
"""

from __future__ import annotations

from typing import Any

from flask import request

from atomq.api.blueprint import services
from atomq.api.dashboard import access, figures
from atomq.api.dashboard.blueprint import bp
from atomq.api.dashboard.pages import chosen_order, oldest_waiting_figures, overview_figures, tenant_figures


@bp.get("/live")
def overview_live() -> dict[str, Any]:
    """The overview's numbers, and the platform's rates over the last hour for its chart."""
    access.owner_only()
    _, view, f = overview_figures(chosen_order(), every_tenant=False)
    return {**f.as_json(), "platform_rates": view.rates}


@bp.get("/tenants/<tenant_id>/live")
def tenant_live(tenant_id: str) -> dict[str, Any]:
    return tenant_figures(access.scoped_tenant(tenant_id))[2].as_json()


@bp.get("/tenants/<tenant_id>/queues/<qname:queue>/live")
def queue_live(tenant_id: str, queue: str) -> dict[str, Any]:
    """The queue's counts and its send and ack rates over the last five minutes, in 10-second buckets."""
    tenant = access.scoped_tenant(tenant_id)
    s = services()
    info = s.queues.get_queue(tenant.id, queue)
    rates = s.queues.counters.rates(tenant.id, queue, buckets=figures.RATE_BUCKETS)
    f = figures.queue(info).add(oldest_waiting_figures(tenant.id, info, request.args.get("subscriber") or None))
    return {**f.as_json(), "rates": figures.rates(rates)}
