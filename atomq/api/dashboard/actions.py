"""What the dashboard's forms do: manage a queue's messages, dead letters and move tasks, the queue,
listeners.

Every action is a POST that ``access.gate`` let through with its CSRF token,
runs one platform call (as the API's endpoint for it does), leaves a notice
saying what it did and sends the browser back to the page (303), so a reload
repeats nothing. Clearing and deleting a queue ask for a confirmation in the
form itself: a ticked box, the queue's name typed again.
"""

from __future__ import annotations

import re
from typing import Any

from flask import redirect, request, url_for
from werkzeug.wrappers import Response

from atomq.api.blueprint import services
from atomq.api.dashboard import access, listener_page
from atomq.api.dashboard.blueprint import bp
from atomq.api.dashboard.formatting import plural
from atomq.errors import InvalidInput, NotFound
from atomq.platform.queues.move_tasks import MAX_RATE

LISTENER_ACTIONS = {"pause": "Paused", "resume": "Resumed", "restart": "Restarted"}
"""The listener controls, with what the notice says once one is done."""


def _notice(text: str) -> None:
    access.sessions().set_notice(access.current(), text)


def _subscriber() -> str | None:
    return request.form.get("subscriber") or None


def _back_to_queue(tenant_id: str, queue: str) -> Response:
    """The queue's page as the form showed it: the same subscriber, the same dead letter reason."""
    return redirect(url_for(".queue_page", tenant_id=tenant_id, queue=queue, subscriber=_subscriber(),
                            reason=request.form.get("reason") or None), 303)


def _selection(noun: str) -> tuple[list[str] | None, bool]:
    """The form's selection: ``(ids, False)``, or ``(None, True)`` when its "all" button was pressed."""
    if request.form.get("all") == "yes":
        return None, True
    ids = request.form.getlist("id")
    if not ids:
        raise InvalidInput(f"select at least one {noun} first", field="id")
    return ids, False


def _dead_selection() -> dict[str, Any]:
    """The dead letter form's selection: ``ids``, ``all``, or, for "all" while the list shows
    one reason, that ``reason``."""
    ids, everything = _selection("dead letter")
    reason = request.form.get("reason") or None
    if everything and reason is not None:
        return {"reason": reason}
    return {"ids": ids, "all": everything}


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/messages/delete")
def delete_messages(tenant_id: str, queue: str) -> Response:
    """Deletes the selected messages (of the subscriber shown, for publish/subscribe)."""
    tenant = access.scoped_tenant(tenant_id)
    ids, _ = _selection("message")
    deleted = services().queues.delete_messages(tenant.id, queue, ids=ids, subscriber=_subscriber())
    _notice(f"Deleted {plural(deleted, 'message')}.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/messages/release")
def release_messages(tenant_id: str, queue: str) -> Response:
    """Gives the selected deliveries back to the queue at once, not counted as failed: the
    operator's way to free a message stuck with a consumer that is gone."""
    tenant = access.scoped_tenant(tenant_id)
    ids, _ = _selection("delivery")
    released = services().queues.release(tenant.id, queue, ids=ids, subscriber=_subscriber(), delay_s=0)
    _notice(f"Released {plural(released, 'delivery', 'deliveries')}: delivered again next, not counted as failed."
            if released else "Released nothing: the selected deliveries had ended meanwhile.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/clear")
def clear_queue(tenant_id: str, queue: str) -> Response:
    """Deletes every waiting and in-flight message, of every subscriber; dead letters stay."""
    tenant = access.scoped_tenant(tenant_id)
    if request.form.get("confirm") != "yes":
        raise InvalidInput("tick the box to confirm that every message of the queue goes", field="confirm")
    deleted = services().queues.delete_messages(tenant.id, queue, all=True)
    _notice(f"Cleared the queue: deleted {plural(deleted, 'message')}.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/dead-letters/resend")
def resend_dead_letters(tenant_id: str, queue: str) -> Response:
    """Puts the selected (or all) dead letters back on the queue with a fresh redelivery budget."""
    tenant = access.scoped_tenant(tenant_id)
    resent = services().queues.resend_dead_letters(tenant.id, queue, subscriber=_subscriber(),
                                                   **_dead_selection())
    _notice(f"Resent {plural(resent, 'dead letter')}.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/dead-letters/delete")
def delete_dead_letters(tenant_id: str, queue: str) -> Response:
    tenant = access.scoped_tenant(tenant_id)
    deleted = services().queues.delete_dead_letters(tenant.id, queue, subscriber=_subscriber(),
                                                    **_dead_selection())
    _notice(f"Deleted {plural(deleted, 'dead letter')}.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/moves/start")
def start_move(tenant_id: str, queue: str) -> Response:
    """Starts a move task of the queue's waiting messages: to the queue named, or (none named)
    back to the queues they left as dead letters; at most the rate given a second."""
    tenant = access.scoped_tenant(tenant_id)
    destination = request.form.get("destination", "").strip() or None
    rate = request.form.get("max_per_second", "").strip()
    if rate and not re.fullmatch("[0-9]{1,6}", rate):
        raise InvalidInput(f"messages a second is a whole number from 1 to {MAX_RATE}", field="max_per_second")
    task = services().queues.start_move_task(tenant.id, queue, destination, int(rate) if rate else None)
    _notice(f"Started moving {plural(task.to_move, 'waiting message')} to {destination or 'their sources'}.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/moves/<task>/cancel")
def cancel_move(tenant_id: str, queue: str, task: str) -> Response:
    """Cancels the queue's running move task: nothing moves after the notice."""
    tenant = access.scoped_tenant(tenant_id)
    found = services().queues.move_task(tenant.id, task)
    if found is None or found.source != queue:
        raise NotFound(f"queue {queue} has no move task {task}", task=task)
    cancelled, was_running = services().queues.cancel_move_task(tenant.id, task)
    _notice(f"Cancelled the move task after {plural(cancelled.moved, 'message')} moved." if was_running
            else f"The move task had ended ({cancelled.status.value}) after {plural(cancelled.moved, 'message')} "
                 "moved.")
    return _back_to_queue(tenant.id, queue)


@bp.post("/tenants/<tenant_id>/queues/<qname:queue>/delete")
def delete_queue(tenant_id: str, queue: str) -> Response:
    """Removes the queue with its messages, dead letters and subscribers, once its name is typed again."""
    tenant = access.scoped_tenant(tenant_id)
    if request.form.get("confirm_name") != queue:
        raise InvalidInput("type the queue's name to confirm that it goes", field="confirm_name")
    services().queues.delete_queue(tenant.id, queue)
    _notice(f"Deleted the queue {queue}.")
    return redirect(url_for(".tenant_page", tenant_id=tenant.id), 303)


@bp.post("/tenants/<tenant_id>/listeners/<qname:name>/<action>")
def control_listener(tenant_id: str, name: str, action: str) -> Response:
    """Pauses, resumes or restarts a listener, then goes back to the page the form was on
    (the form's ``next``: the tenant's page or a listener's, ``listener_page.back_to``)."""
    tenant = access.scoped_tenant(tenant_id)
    if action not in LISTENER_ACTIONS:
        raise access.page_not_found()
    services().listeners.control(tenant.id, name, action)
    _notice(f"{LISTENER_ACTIONS[action]} the listener {name}.")
    return redirect(listener_page.back_to(tenant.id, request.form.get("next")), 303)
