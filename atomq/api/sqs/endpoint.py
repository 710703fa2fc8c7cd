"""The SQS endpoint on the node's own port: ``POST /`` (and ``GET``, and queue URLs
``/{account id}/{name}``, for the query protocol), every request SigV4-signed.

One view reads the request (``wire``), checks its signature (``signing``), runs
the action's handler, and writes the answer or the error in the request's own
protocol (``render``); a native error is written in SQS's terms
(``errors.as_sqs_error``). An action of SQS that atomq does not take (yet) is
``UnsupportedOperation``, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Request, Response, current_app, g, request

from atomq.api.key_checks import KeyCheckThrottle
from atomq.api.services import Services
from atomq.api.sqs import batch_actions, message_actions, queue_actions, redrive, render, signing, tags
from atomq.api.sqs.context import SqsContext
from atomq.api.sqs.errors import NO_SUCH_QUEUE, as_sqs_error
from atomq.api.sqs.recent_queues import RecentQueues
from atomq.api.sqs.wire import JSON, QUERY, SqsCall, is_json, read_json, read_query
from atomq.errors import AtomqError, SqsError
from atomq.telemetry import log_context

bp = Blueprint("sqs", __name__)
RECENT_QUEUES = "atomq_sqs_recent_queues"
"""The app's extension holding this process's ``RecentQueues``, made when the blueprint is registered."""


@bp.record_once
def _install(state: Any) -> None:
    state.app.extensions[RECENT_QUEUES] = RecentQueues()

Handler = Callable[[SqsContext, dict[str, Any]], dict[str, Any]]
HANDLERS: dict[str, Handler] = {
    "CreateQueue": queue_actions.create_queue,
    "GetQueueUrl": queue_actions.get_queue_url,
    "ListQueues": queue_actions.list_queues,
    "DeleteQueue": queue_actions.delete_queue,
    "GetQueueAttributes": queue_actions.get_queue_attributes,
    "SetQueueAttributes": queue_actions.set_queue_attributes,
    "PurgeQueue": queue_actions.purge_queue,
    "SendMessage": message_actions.send_message,
    "ReceiveMessage": message_actions.receive_message,
    "DeleteMessage": message_actions.delete_message,
    "ChangeMessageVisibility": message_actions.change_message_visibility,
    "SendMessageBatch": batch_actions.send_message_batch,
    "DeleteMessageBatch": batch_actions.delete_message_batch,
    "ChangeMessageVisibilityBatch": batch_actions.change_message_visibility_batch,
    "TagQueue": tags.tag_queue,
    "UntagQueue": tags.untag_queue,
    "ListQueueTags": tags.list_queue_tags,
    "ListDeadLetterSourceQueues": redrive.list_dead_letter_source_queues,
    "StartMessageMoveTask": redrive.start_message_move_task,
    "ListMessageMoveTasks": redrive.list_message_move_tasks,
    "CancelMessageMoveTask": redrive.cancel_message_move_task,
}


def _call(request: Request) -> SqsCall:
    if is_json(request.headers):
        return read_json(request.headers.get("X-Amz-Target", ""), request.get_data(cache=True))
    return read_query({**request.args.to_dict(), **request.form.to_dict()})


def answer(request: Request, services: Services, throttle: KeyCheckThrottle, recent: RecentQueues,
           account: int | None = None, name: str | None = None) -> tuple[Response, str]:
    """The answer to one SQS request, and the tenant that signed it ("" when none did): for the
    Flask view below and for ``front``, which serves the JSON protocol's requests without Flask."""
    request_id = render.new_request_id()
    protocol = JSON if is_json(request.headers) else QUERY
    tenant = ""
    try:
        identity = signing.authenticate(request, services.tenants.sqs, throttle)
        tenant = identity.tenant_id
        with log_context(tenant=tenant):
            services.current_settings()
            call = _call(request)
            handler = HANDLERS.get(call.action)
            if handler is None:
                raise SqsError("UnsupportedOperation", f"atomq does not take the SQS action {call.action!r}")
            account_id = services.tenants.sqs.account_id(identity.tenant_id)
            if account is not None and str(account) != account_id:
                raise SqsError("QueueDoesNotExist", NO_SUCH_QUEUE)
            ctx = SqsContext(services, identity.tenant_id, identity.key_id, account_id,
                             request.host_url.rstrip("/"), name, request.content_length or 0,
                             signing.region_of(request), recent)
            return render.answer(call.protocol, call.action, handler(ctx, call.params), request_id), tenant
    except AtomqError as exc:
        return render.error(protocol, as_sqs_error(exc), request_id), tenant


@bp.route("/", methods=["GET", "POST"], defaults={"account": None, "name": None})
@bp.route("/<int(fixed_digits=12):account>/<name>", methods=["GET", "POST"])
def sqs(account: int | None, name: str | None) -> Response:
    """Answers one SQS request."""
    response, g.atomq_tenant = answer(request, current_app.extensions["atomq"],
                                      current_app.extensions["atomq_key_checks"],
                                      current_app.extensions[RECENT_QUEUES], account, name)
    return response
