"""Send, get, ack, nack, extend and browse: ``/v1/queues/<qname:name>/...``."""

from __future__ import annotations

from typing import Any

from flask import Response, request
from flask.views import MethodView

from atomq.api import links
from atomq.api.auth import current_tenant, request_holder
from atomq.api.blueprint import (
    IDEMPOTENCY_HEADER,
    SEND_HEADERS,
    ApiBlueprint,
    idempotency_key,
    send_refusals,
    services,
    with_memory_state,
)
from atomq.api.schemas.common import BulkSelector, Selector
from atomq.api.schemas.messages import (
    AckedSchema,
    BrowseArgs,
    BrowsePageSchema,
    DeletedSchema,
    DeliveriesSchema,
    ExtendedSchema,
    ExtendSchema,
    GetSchema,
    NackedSchema,
    NackSchema,
    ReleasedSchema,
    ReleaseSchema,
    SendResultSchema,
    SendSchema,
)
from atomq.api.wire import render, strict_json
from atomq.api.wire.send_body import parse_send
from atomq.api.services import Services
from atomq.errors import InvalidInput
from atomq.platform import OutgoingMessage
from atomq.platform.queues.stored_nowhere import after_send
from atomq.telemetry import stamp_traceparents

blp = ApiBlueprint("messages", __name__, url_prefix="/v1/queues", description="Messages",
                   tenant_scoped=True)
blp.after_request(with_memory_state)


def json_body() -> Any:
    """The send's body, read as the app's strict JSON reads every body (a 400 naming what is
    wrong with it), but for the depth: only properties can nest, and ``parse_send`` measures
    them, which costs a send of 100 messages nothing when they are flat."""
    if not request.is_json:
        raise InvalidInput("the body must be JSON (Content-Type: application/json)", field="body")
    try:
        return strict_json.parse(request.get_data(cache=False), checked_by_caller=True)
    except ValueError as exc:
        request.on_json_loading_failed(exc)
        raise


@blp.route("/<qname:name>/messages")
class Messages(MethodView):
    @blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": SendSchema}}},
             parameters=[IDEMPOTENCY_HEADER])
    @blp.response(201, SendResultSchema, headers=SEND_HEADERS)
    @send_refusals(blp)
    @blp.doc(**links.AFTER_SEND)
    def post(self, name: str) -> Response:
        """Sends a batch of messages, stored all or nothing; the only request rate limits count.

        Checked in this order: key, size, body, the node's window, the tenant's
        window, the server's limits, the tenant's quota (507), then the
        queue's limits in the store; a refused send takes no room in either window.
        """
        tenant = current_tenant()
        return render.json_response(*answer_send(services(), tenant, name, parse_send(json_body()),
                                                 request.content_length or 0, idempotency_key()))

    @blp.arguments(BrowseArgs, location="query")
    @blp.response(200, BrowsePageSchema)
    def get(self, args: dict[str, Any], name: str) -> Response:
        """Browses waiting and in-flight messages without consuming them; ``state`` lists one state
        only. A message in flight says who holds it (``holder``), since when (``delivered_at``) and
        until when (``deadline``): what an operator needs to find a delivery stuck with a consumer
        that is gone, and release it."""
        page = services().queues.browse(current_tenant(), name, args["limit"], args.get("after"),
                                        args.get("subscriber"), args.get("state"))
        return render.json_response({"messages": [render.message(m) for m in page.items], "next": page.next})

    @blp.arguments(BulkSelector)
    @blp.response(200, DeletedSchema)
    def delete(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """Deletes selected or all waiting and in-flight messages."""
        return {"deleted": services().queues.delete_messages(
            current_tenant(), name, body.get("ids"), bool(body.get("all")), body.get("subscriber"))}


@blp.route("/<qname:name>/get")
class Get(MethodView):
    @blp.arguments(GetSchema, required=False)
    @blp.response(200, DeliveriesSchema)
    @blp.doc(**links.AFTER_GET)
    def post(self, body: dict[str, Any], name: str) -> Response:
        """Delivers up to ``max`` messages, waiting up to ``wait_ms`` for the first; acks ``ack`` first."""
        return render.json_response(*answer_get(services(), current_tenant(), name, body, request_holder()))


@blp.route("/<qname:name>/ack")
class Ack(MethodView):
    @blp.arguments(Selector)
    @blp.response(200, AckedSchema)
    def post(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """Acks in-flight messages; a receipt of an earlier delivery acks nothing."""
        return answer_ack(services(), current_tenant(), name, body)


@blp.route("/<qname:name>/nack")
class Nack(MethodView):
    @blp.arguments(NackSchema)
    @blp.response(200, NackedSchema)
    def post(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """Fails deliveries now: redelivered after their delay, or dead-lettered."""
        return answer_nack(services(), current_tenant(), name, body)


@blp.route("/<qname:name>/extend")
class Extend(MethodView):
    @blp.arguments(ExtendSchema)
    @blp.response(200, ExtendedSchema)
    def post(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """More time before the ack time-out (default: the queue's ``ack_timeout_s``)."""
        return answer_extend(services(), current_tenant(), name, body)


@blp.route("/<qname:name>/release")
class Release(MethodView):
    @blp.arguments(ReleaseSchema)
    @blp.response(200, ReleasedSchema)
    def post(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """Gives in-flight messages back to the queue at once, not counted as failed deliveries: for a
        consumer known to be gone, or a stuck message an operator frees. They come back with
        ``redelivered: true``; on an exclusive queue, whoever holds them, in their order."""
        return answer_release(services(), current_tenant(), name, body)


# What the views do once the request is read: shared with ``atomq.api.hot_path``, which serves these
# routes without Flask. ``body`` is what the route's schema loads.


def answer_send(s: Services, tenant: str, name: str, messages: list[OutgoingMessage], incoming_bytes: int,
         idempotency_key: str | None) -> render.Answer:
    stamp_traceparents(messages)
    sent = s.send(tenant, name, messages, incoming_bytes, idempotency_key)
    out: dict[str, Any] = {"ids": sent.ids, "copies": sent.copies,
                           "warnings": [w.as_dict() for w in after_send(name, len(sent.ids), sent.copies)]}
    if sent.dropped:
        out["dropped"] = sent.dropped
    return out, 201


def answer_get(s: Services, tenant: str, name: str, body: dict[str, Any], holder: str) -> render.Answer:
    ack = body.get("ack", {})
    with s.longpolls.hold(tenant, body["wait_ms"]) as wait_ms:
        taken = s.queues.take(tenant, name, body["max"], wait_ms, body.get("subscriber"), stop=s.stopping,
                              consumer=body.get("consumer"), ack_ids=ack.get("ids"),
                              ack_receipts=ack.get("receipts"), holder=holder)
    out: dict[str, Any] = {"messages": [render.message(m) for m in taken.deliveries]}
    if taken.active is not None:
        out["active"] = taken.active
    if taken.acked is not None:
        out["acked"] = taken.acked
    return out, 200


def answer_ack(s: Services, tenant: str, name: str, body: dict[str, Any]) -> dict[str, int]:
    return {"acked": s.queues.ack(tenant, name, body.get("ids"), body.get("receipts"), body.get("subscriber"),
                                  consumer=body.get("consumer"))}


def answer_nack(s: Services, tenant: str, name: str, body: dict[str, Any]) -> dict[str, int]:
    result = s.queues.nack(tenant, name, body.get("ids"), body.get("receipts"), body.get("subscriber"),
                           body["reason"], consumer=body.get("consumer"))
    return {"requeued": result.requeued, "dead_lettered": result.dead_lettered}


def answer_extend(s: Services, tenant: str, name: str, body: dict[str, Any]) -> dict[str, int]:
    return {"extended": s.queues.extend(tenant, name, body.get("ids"), body.get("receipts"), body.get("subscriber"),
                                        body.get("seconds"), consumer=body.get("consumer"))}


def answer_release(s: Services, tenant: str, name: str, body: dict[str, Any]) -> dict[str, int]:
    return {"released": s.queues.release(tenant, name, body.get("ids"), body.get("receipts"), body.get("subscriber"),
                                         delay_s=0)}
