"""Publishing to a topic: ``/v1/topics/<topic>/messages``."""

from __future__ import annotations

from flask import Response, request
from flask.views import MethodView

from atomq import defaults
from atomq.api import render
from atomq.api.auth import current_tenant
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.messages import json_body
from atomq.api.schemas.common import ErrorSchema
from atomq.api.schemas.messages import PublishResultSchema, SendSchema
from atomq.api.send_body import parse_send
from atomq.platform.topics import TOPIC_PATTERN, check_topic
from atomq.telemetry import stamp_traceparents

blp = ApiBlueprint("topics", __name__, url_prefix="/v1/topics", description="Topics", tenant_scoped=True)


@blp.route("/<path:topic>/messages")
class TopicMessages(MethodView):
    @blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": SendSchema}}},
             parameters=[{"in": "path", "name": "topic", "required": True,
                          "schema": {"type": "string", "pattern": TOPIC_PATTERN, "maxLength": defaults.MAX_TOPIC_CHARS},
                          "description": "levels [A-Za-z0-9._-]+ joined by '/', sent as they are (not escaped)"}])
    @blp.response(201, PublishResultSchema)
    @blp.alt_response(429, schema=ErrorSchema, description="a rate-limit window is full (Retry-After)")
    @blp.alt_response(507, schema=ErrorSchema, description="the tenant's disk quota or the server's disk limit")
    def post(self, topic: str) -> Response:
        """Publishes a batch to every queue whose topic patterns match, stored in all of them or in none.

        One id a message, the same in every queue; no match stores nothing and
        answers empty lists. Counted, limited and checked like a send.
        """
        check_topic(topic)
        messages = parse_send(json_body())
        stamp_traceparents(messages)
        published = services().publish(current_tenant(), topic, messages, request.content_length or 0)
        return render.json_response({"ids": published.ids, "queues": published.queues}, 201)
