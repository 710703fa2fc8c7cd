"""The dashboard's pages: the owner's overview, a tenant's queues and listeners, one queue.

Each page gathers its data through the platform calls the API uses (no Redis
of its own) and its numbers through ``figures``, which the page's JSON
endpoint (``live``) repeats every few seconds.
"""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from atomq import defaults
from atomq.api.blueprint import services
from atomq.api.dashboard import access, figures, formatting
from atomq.api.dashboard.blueprint import bp
from atomq.api.dashboard.figures import Figures
from atomq.api.server import server_state
from atomq.platform import Page, QueueInfo, QueueModel
from atomq.platform.listeners import Listener
from atomq.tenants import Tenant
from atomq.workers.liveness import WorkerProblems

PAGE_SIZE = 50
"""Messages and dead letters a queue page lists at once; ``next`` links page on."""


def overview_figures() -> tuple[dict[str, Any], list[Tenant], Figures]:
    """The server's state, every tenant, and the numbers the overview shows of them."""
    s = services()
    state = server_state(s)
    tenants = s.tenants.list()
    f = figures.server(state).add(figures.workers(WorkerProblems(s.queues.storage).of_node(s.node_id)))
    for t in tenants:
        f.add(figures.tenant(t, s.queues.usage(t.id)))
    return state, tenants, f


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


def _render(template: str, **context: Any) -> str:
    """A page, with the notice the last action left (shown once)."""
    notice = access.sessions().take_notice(access.current())
    return render_template(template, notice=notice, fmt=formatting, **context)


@bp.get("/")
def home() -> Response | str:
    """The owner's overview; a tenant goes straight to its own page."""
    session = access.current()
    if not session.is_owner:
        return redirect(url_for(".tenant_page", tenant_id=session.tenant_id))
    state, tenants, f = overview_figures()
    return _render("overview.html", state=state, tenants=tenants, figures=f,
                   live_url=url_for(".overview_live"))


@bp.get("/tenants/<tenant_id>/")
def tenant_page(tenant_id: str) -> str:
    tenant = access.scoped_tenant(tenant_id)
    queues, listeners, f = tenant_figures(tenant)
    return _render("tenant.html", tenant=tenant, queues=queues, listeners=listeners, figures=f,
                   live_url=url_for(".tenant_live", tenant_id=tenant.id))


@bp.get("/tenants/<tenant_id>/queues/<qname:queue>")
def queue_page(tenant_id: str, queue: str) -> str:
    """Counts, the rate chart, messages and dead letters (of one subscriber for publish/subscribe)."""
    tenant = access.scoped_tenant(tenant_id)
    s = services()
    info = s.queues.get_queue(tenant.id, queue)
    subscriber = request.args.get("subscriber") or None
    reason = request.args.get("reason") or None
    if info.model is QueueModel.PUBLISH_SUBSCRIBE and subscriber is None and info.subscribers:
        subscriber = min(info.subscribers)
    messages = dead = Page(items=[], next=None)
    if info.model is QueueModel.POINT_TO_POINT or subscriber is not None:
        messages = s.queues.browse(tenant.id, queue, PAGE_SIZE, request.args.get("after") or None, subscriber)
        dead = s.queues.dead_letters(tenant.id, queue, PAGE_SIZE, request.args.get("dead_after") or None,
                                     subscriber, reason)
    return _render("queue.html", tenant=tenant, queue=info, subscriber=subscriber, messages=messages, dead=dead,
                   reason=reason, common_reasons=defaults.DEAD_LETTER_REASONS, max_reason_chars=defaults.MAX_NACK_REASON_CHARS,
                   totals_shown=figures.QUEUE_TOTALS_SHOWN, figures=figures.queue(info),
                   live_url=url_for(".queue_live", tenant_id=tenant.id, queue=queue))


@bp.route("/<path:rest>", methods=["GET", "POST"])
def unknown_page(rest: str) -> str:
    """Any other path under ``/dashboard``: a 404 page (the app's own 404 would answer JSON)."""
    raise access.page_not_found()
