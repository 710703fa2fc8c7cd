"""The dashboard's pages: the owner's overview, a tenant's queues and listeners, one queue.

Each page gathers its data through the platform calls the API uses (no Redis
of its own) and its numbers through ``figures``, which the page's JSON
endpoint (``live``) repeats every few seconds.
"""

from __future__ import annotations

import time
from typing import Any

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from atomq.api.blueprint import services
from atomq.api.dashboard import access, figures, formatting
from atomq.api.dashboard.blueprint import bp
from atomq.api.dashboard.figures import Figures
from atomq.api.platform_view import ORDERS, PlatformView, platform_view
from atomq.api.server import server_state
from atomq.platform import DeadLetterReasons, Page, QueueInfo, QueueModel
from atomq.platform.listeners.deployed import Listener
from atomq.platform.models import InFlight
from atomq.platform.queues.move_tasks import MAX_RATE
from atomq.platform.store import keys as k
from atomq.platform.store import lease
from atomq.platform.watch.nodes import NodeRecords
from atomq.platform.watch.overview import OverviewStore
from atomq.tenants import Tenant
from atomq.workers.liveness import WorkerProblems

SHOWN = 100
"""Tenants the overview lists, the first by the chosen order; the rest are counted."""
PAGE_SIZE = 50
"""Messages and dead letters a queue page lists at once; ``next`` links page on."""


def overview_figures(order: str, every_tenant: bool = True) -> tuple[dict[str, Any], PlatformView, Figures]:
    """The server's state, the tenants ranked by ``order`` (see ``platform_view.ORDERS``) with the
    platform's rates, and the numbers the overview shows of them. Every tenant for the page;
    the refresh only those of the last sample (the rows it updates are the page's)."""
    s = services()
    state = server_state(s)
    view = platform_view(OverviewStore(s.queues.storage), s.tenants.list() if every_tenant else None, order)
    f = figures.server(state).add(figures.workers(WorkerProblems(s.queues.storage).of_node(s.node_id)))
    for row in view.rows[:SHOWN]:
        f.add(figures.tenant_row(row))
    return state, view, f


def oldest_waiting_figures(tenant_id: str, info: QueueInfo, subscriber: str | None) -> Figures:
    """The age of a queue's oldest waiting message (of ``subscriber`` on publish/subscribe)."""
    shown = info.model is QueueModel.POINT_TO_POINT or subscriber is not None
    sent_at = services().queues.oldest_waiting(tenant_id, info.name, subscriber) if shown else None
    return figures.oldest_waiting(info, subscriber, sent_at)


def chosen_order() -> str:
    order = request.args.get("sort") or "traffic"
    return order if order in ORDERS else "traffic"


def tenant_figures(tenant: Tenant) -> tuple[list[QueueInfo], list[Listener], Figures]:
    """A tenant's queues, its listeners, and their numbers with its usage."""
    s = services()
    queues = s.queues.list_queues(tenant.id)
    listeners = s.listeners.of_tenant(tenant.id)
    f = figures.tenant(tenant, s.queues.usage(tenant.id))
    for info in queues:
        f.add(figures.queue(info))
    for item in listeners:
        f.add(figures.listener(item))
    return queues, listeners, f


def render_page(template: str, **context: Any) -> str:
    """A page, with the notice the last action left (shown once)."""
    notice = access.sessions().take_notice(access.current())
    return render_template(template, notice=notice, fmt=formatting, **context)


@bp.get("/")
def home() -> Response | str:
    """The owner's overview; a tenant goes straight to its own page."""
    session = access.current()
    if not session.is_owner:
        return redirect(url_for(".tenant_page", tenant_id=session.tenant_id))
    order = chosen_order()
    state, view, f = overview_figures(order)
    storage = services().queues.storage
    return render_page("overview.html", state=state, view=view, figures=f, order=order, orders=ORDERS, shown=SHOWN,
                   nodes=NodeRecords(storage).all(), lease_node=lease.holder_node(storage, k.MAINTENANCE_LEASE),
                   now=time.time(), live_url=url_for(".overview_live", sort=order))


@bp.get("/tenants/<tenant_id>/")
def tenant_page(tenant_id: str) -> str:
    tenant = access.scoped_tenant(tenant_id)
    queues, listeners, f = tenant_figures(tenant)
    return render_page("tenant.html", tenant=tenant, queues=queues, listeners=listeners, figures=f,
                   live_url=url_for(".tenant_live", tenant_id=tenant.id))


@bp.get("/tenants/<tenant_id>/queues/<qname:queue>")
def queue_page(tenant_id: str, queue: str) -> str:
    """Counts, the rate chart, deliveries under way, messages and dead letters (of one subscriber for
    publish/subscribe), and a point-to-point queue's move tasks."""
    tenant = access.scoped_tenant(tenant_id)
    s = services()
    info = s.queues.get_queue(tenant.id, queue)
    subscriber = request.args.get("subscriber") or None
    reason = request.args.get("reason") or None
    if info.model is QueueModel.PUBLISH_SUBSCRIBE and subscriber is None and info.subscribers:
        subscriber = min(info.subscribers)
    messages = dead = Page(items=[], next=None)
    in_flight: list[InFlight] = []
    reasons = DeadLetterReasons(reasons=[], counted=0, complete=True)
    if info.model is QueueModel.POINT_TO_POINT or subscriber is not None:
        in_flight = s.queues.in_flight(tenant.id, queue, PAGE_SIZE, subscriber)
        messages = s.queues.browse(tenant.id, queue, PAGE_SIZE, request.args.get("after") or None, subscriber)
        dead = s.queues.dead_letters(tenant.id, queue, PAGE_SIZE, request.args.get("dead_after") or None,
                                     subscriber, reason)
        reasons = s.queues.dead_letter_reasons(tenant.id, queue, subscriber)
    moves = s.queues.move_tasks(tenant.id, queue) if info.model is QueueModel.POINT_TO_POINT else []
    return render_page("queue.html", tenant=tenant, queue=info, subscriber=subscriber, messages=messages, dead=dead,
                   in_flight=in_flight, now=time.time(), page_size=PAGE_SIZE, reason=reason, reasons=reasons,
                   totals_shown=figures.QUEUE_TOTALS_SHOWN, moves=moves, max_move_rate=MAX_RATE,
                   figures=figures.queue(info).add(oldest_waiting_figures(tenant.id, info, subscriber)),
                   live_url=url_for(".queue_live", tenant_id=tenant.id, queue=queue, subscriber=subscriber))


@bp.route("/<path:rest>", methods=["GET", "POST"])
def unknown_page(rest: str) -> str:
    """Any other path under ``/dashboard``: a 404 page (the app's own 404 would answer JSON)."""
    raise access.page_not_found()
