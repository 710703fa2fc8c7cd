"""Queue server objects as the JSON of the HTTP contract.

Responses on the hot paths (get, browse) are built here as plain dicts and
serialised once by ``atomq.api.wire.strict_json.dump_bytes`` (orjson); the marshmallow response schemas
document the same shape in the OpenAPI document. Dumping 100 messages
through marshmallow would cost more than the rest of the request.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flask import Response

from atomq.api.wire import strict_json
from atomq.client import wire
from atomq.platform import BrowsedMessage, DeadLetter, Delivery, Message, MessageState, QueueInfo

TOTALS = ("sent", "delivered", "acked", "nacked", "dead_lettered", "expired", "superseded", "dropped")
"""The queue totals of the contract (the scripts keep a few more; /metrics has them all)."""


Answer = tuple[Any, int]
"""What a message route's work answers, before it is written: the JSON body's value and the
status. The views make it a ``Response`` (:func:`json_response`); the hot path writes the same
bytes without one (``atomq.api.hot_path``)."""


def json_response(body: Any, status: int = 200) -> Response:
    return Response(strict_json.dump_bytes(body), status=status, mimetype="application/json")


def _document(doc: Any) -> dict[str, Any]:
    # A stored document is text or bytes as it was sent: bytes go back in base64 even when they are UTF-8.
    return {"id": doc.id, **wire.content_fields(doc.data), "properties": doc.properties}


def message(m: Message) -> dict[str, Any]:
    env = m.envelope
    out: dict[str, Any] = {
        "id": m.id,
        "delivery_count": m.delivery_count,
        "redelivered": m.delivery_count > 1,
        "enqueued_at": m.enqueued_at,
        "properties": env.properties,
        "documents": [_document(d) for d in m.documents],
        "topic": env.topic,
    }
    out.update(env.optional_fields())
    if isinstance(m, Delivery):
        out["receipt"] = m.receipt
    elif isinstance(m, BrowsedMessage):
        out["state"] = m.state.value
        out["failed_deliveries"] = m.failed_deliveries
        if m.state is MessageState.IN_FLIGHT:
            out["holder"] = m.holder
            out["delivered_at"] = m.delivered_at
            out["deadline"] = m.deadline
        elif m.state is MessageState.SCHEDULED:
            out["due_at"] = m.due_at
    elif isinstance(m, DeadLetter):
        out["reason"] = m.reason
        out["failed_deliveries"] = m.failed_deliveries
        out["dead_lettered_at"] = m.dead_lettered_at
    return out


def queue(info: QueueInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": info.name,
        "model": info.model.value,
        "max_redeliveries": info.max_redeliveries,
        "ack_timeout_s": info.ack_timeout_s,
        "depth": info.depth,
        "in_flight": info.in_flight,
        "dead_letters": info.dead_letters,
        "scheduled": info.scheduled,
        "delayed": info.delayed,
        "message_ttl_s": info.message_ttl_s,
        "on_expire": info.on_expire.value,
        "topics": list(info.topics),
        "last_value": info.last_value,
        "last_value_key": info.last_value_key,
        "access": info.access.value,
        "consumers": [{"name": c.name, "active": c.active, "last_seen": c.last_seen} for c in info.consumers],
        "depth_by_priority": {str(p): n for p, n in info.depth_by_priority.items()},
        "totals": {kind: info.totals.get(kind, 0) for kind in TOTALS},
        "held_bytes": info.held_bytes,
        **dataclasses.asdict(info.limits),
        "overflow": info.limits.overflow.value,
        "durability": info.durability.value,
        "delay_s": info.delay_s,
        "ordering": info.ordering.value,
        "dead_letter_queue": info.dead_letter_queue,
    }
    if info.model.value == "publish_subscribe":
        out["subscribers"] = [
            {"name": name, "depth": c.depth, "in_flight": c.in_flight, "dead_letters": c.dead_letters,
             "scheduled": c.scheduled, "delayed": c.delayed, "held_bytes": c.held_bytes}
            for name, c in sorted(info.subscribers.items())
        ]
    return out
