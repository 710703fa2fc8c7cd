"""Publishing to a topic, ``/v1/topics/<topic>/messages``, or each message to its own,
``/v1/topics/messages``."""

from __future__ import annotations

from typing import Any

from flask import Response, request
from flask.views import MethodView

from atomq import defaults
from atomq.api.auth import current_tenant
from atomq.api.blueprint import (
    IDEMPOTENCY_HEADER,
    SEND_HEADERS,
    ApiBlueprint,
    idempotency_key,
    send_refusals,
    services,
    with_memory_state,
)
from atomq.api.messages import json_body
from atomq.api.schemas.messages import PublishManyResultSchema, PublishManySchema, PublishResultSchema, SendSchema
from atomq.api.services import Services
from atomq.api.wire import render
from atomq.api.wire.send_body import parse_publish_many, parse_send
from atomq.platform import OutgoingMessage
from atomq.platform.queues.stored_nowhere import StoredNowhere, after_publish, after_publish_many
from atomq.platform.queues.topics import TOPIC_PATTERN, check_topic
from atomq.telemetry import stamp_traceparents

blp = ApiBlueprint("topics", __name__, url_prefix="/v1/topics", description="Topics", tenant_scoped=True)
blp.after_request(with_memory_state)


@blp.route("/<topic:topic>/messages")
class TopicMessages(MethodView):
    @blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": SendSchema}}},
             parameters=[{"in": "path", "name": "topic", "required": True,
                          "schema": {"type": "string", "pattern": TOPIC_PATTERN, "maxLength": defaults.MAX_TOPIC_CHARS},
                          "description": "levels [A-Za-z0-9._-]+ joined by '/', sent as they are (not escaped)"},
                         IDEMPOTENCY_HEADER])
    @blp.response(201, PublishResultSchema, headers=SEND_HEADERS)
    @send_refusals(blp)
    def post(self, topic: str) -> Response:
        """Publishes a batch to every queue whose topic patterns match, stored in all of them or in none.

        One id a message, the same in every queue; no match stores nothing and
        answers empty lists. Counted, limited and checked like a send.
        """
        check_topic(topic)
        messages = parse_send(json_body())
        return render.json_response(*answer_publish(services(), current_tenant(), topic, messages,
                                                    request.content_length or 0, idempotency_key()))


@blp.route("/messages")
class ManyTopicsMessages(MethodView):
    @blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": PublishManySchema}}},
             parameters=[IDEMPOTENCY_HEADER])
    @blp.response(201, PublishManyResultSchema, headers=SEND_HEADERS)
    @send_refusals(blp)
    def post(self) -> Response:
        """Publishes each message to its own topic (its ``topic`` field): what a process whose outputs
        each have a topic (``orders/eu/<id>``) sends in one request instead of one a message.

        The messages whose topics reach the same queues are stored together, all or nothing, in
        one step; a refusal (a quota, a queue's limit, the memory state) refuses the messages of
        its step and of the steps after it, and when steps before it were stored, its
        ``details.ids`` holds their ids (null for the messages not stored): retried with the same
        dedupe ids, those are not stored twice. A dedupe id counts per topic. Counted, limited and
        checked as one send.
        """
        topics, messages = parse_publish_many(json_body())
        return render.json_response(*answer_publish_many(services(), current_tenant(), topics, messages,
                                                         request.content_length or 0, idempotency_key()))


# What the views do once the request is read: shared with ``atomq.api.hot_path``.


def answer_publish(s: Services, tenant: str, topic: str, messages: list[OutgoingMessage], incoming_bytes: int,
            idempotency_key: str | None) -> render.Answer:
    stamp_traceparents(messages)
    published = s.publish(tenant, topic, messages, incoming_bytes, idempotency_key)
    return _created({"ids": published.ids, "queues": published.queues, "copies": published.copies},
                    after_publish(topic, published.queues, len(messages), published.copies), published.dropped)


def answer_publish_many(s: Services, tenant: str, topics: list[str], messages: list[OutgoingMessage], incoming_bytes: int,
                 idempotency_key: str | None) -> render.Answer:
    stamp_traceparents(messages)
    published = s.publish_many(tenant, topics, messages, incoming_bytes, idempotency_key)
    return _created({"ids": published.ids, "topics": published.topics, "copies": sum(published.copies.values())},
                    after_publish_many(topics, published), published.dropped)


def _created(out: dict[str, Any], warnings: list[StoredNowhere], dropped: int) -> render.Answer:
    """A publish's 201 with its ``warnings`` (empty when every message was stored somewhere), and
    ``dropped`` only when the queues' overflow dropped messages."""
    out["warnings"] = [w.as_dict() for w in warnings]
    if dropped:
        out["dropped"] = dropped
    return out, 201
