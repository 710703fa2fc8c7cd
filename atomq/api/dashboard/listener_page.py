"""One listener's page: its definition in words, its state (with why, when it waits or
failed), its counts, and its controls (those its state does not offer disabled).

The platform keeps a listener's totals, its last error, and rings of 10-second buckets of its
executions and failed ones over the last five minutes (``ListenerStore.execution_rates``), which
the page charts; its own JSON endpoint (``listener_live``) refreshes them with its numbers.
"""

from __future__ import annotations

from typing import Any

from flask import url_for

from atomq.api.blueprint import services
from atomq.api.dashboard import access, figures
from atomq.api.dashboard.blueprint import bp
from atomq.api.dashboard.pages import render_page
from atomq.platform.listeners.deployed import Listener
from atomq.platform.queues.names import QUEUE_NAME

CONTROLS = {
    "running": ("pause", "restart"),
    "waiting": ("pause",),
    "error": ("pause", "restart"),
    "paused": ("resume",),
}
"""The controls each state offers (``listener_control.lua`` says what each does).

Pause or Resume, never both: resume acts only on a paused listener. A failed
listener still runs, so it may be paused; restart clears its error. A
running one may hold the slot of a stuck execution until its deadline, which
restart frees. A waiting one waits for a worker whatever is pressed: restart
would clear its reason until the next round only.
"""
ORDER = ("pause", "resume", "restart")
"""Every control, in the order the pages show them whatever the state: a button keeps its
place from one listener to the next (one that does not apply is there, disabled), so a
hand that reaches for Pause on one row never lands on Restart on the next."""


@bp.app_template_global()
def listener_controls(listener: Listener) -> list[tuple[str, bool]]:
    """Every control in ``ORDER``, with whether the listener's state offers it: ``[("pause", True), ...]``."""
    offered = CONTROLS.get(listener.state, ())
    return [(action, action in offered) for action in ORDER]


def back_to(tenant_id: str, path: str | None) -> str:
    """Where a listener control sends the browser back to: ``path`` when it is the tenant's
    page or one of its listeners' pages, else the tenant's page (never elsewhere)."""
    home = url_for(".tenant_page", tenant_id=tenant_id)
    prefix = home + "listeners/"
    if path and (path == home or (path.startswith(prefix) and QUEUE_NAME.fullmatch(path[len(prefix):]))):
        return path
    return home


@bp.get("/tenants/<tenant_id>/listeners/<qname:name>")
def listener_page(tenant_id: str, name: str) -> str:
    tenant = access.scoped_tenant(tenant_id)
    item = services().listeners.get(tenant.id, name)
    return render_page("listener.html", tenant=tenant, listener=item, figures=figures.listener(item),
                   live_url=url_for(".listener_live", tenant_id=tenant.id, name=item.name))


@bp.get("/tenants/<tenant_id>/listeners/<qname:name>/live")
def listener_live(tenant_id: str, name: str) -> dict[str, Any]:
    """The listener's numbers, and its executions and failed ones over the last five minutes."""
    tenant = access.scoped_tenant(tenant_id)
    listeners = services().listeners
    item = listeners.get(tenant.id, name)
    rates = listeners.execution_rates(tenant.id, name, buckets=figures.RATE_BUCKETS)
    return {**figures.listener(item).as_json(), "execution_rates": figures.execution_rates(rates)}
