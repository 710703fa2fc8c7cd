"""Queue components and subscribers: ``/v1/queues``."""

from __future__ import annotations

from typing import Any

from flask import Response
from flask.views import MethodView

from atomq.api import links
from atomq.api.auth import current_tenant
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.common import ErrorSchema, ListArgs
from atomq.api.schemas.queues import QueueListSchema, QueuePutSchema, QueueSchema
from atomq.api.services import Services
from atomq.api.wire import render
from atomq.errors import NotFound

blp = ApiBlueprint("queues", __name__, url_prefix="/v1/queues", description="Queue components",
                   tenant_scoped=True)


QUEUE_SETTINGS = ("max_redeliveries", "ack_timeout_s", "message_ttl_s", "on_expire", "topics", "last_value",
                  "last_value_key", "access", "max_messages", "max_bytes", "max_message_bytes", "max_dead_letters",
                  "overflow", "overflow_to_dead_letters", "durability", "delay_s", "ordering",
                  "dead_letter_queue")
"""The settings a PUT may name; one it leaves out is kept."""


@blp.route("")
class Queues(MethodView):
    @blp.arguments(ListArgs, location="query")
    @blp.response(200, QueueListSchema)
    def get(self, args: dict[str, Any]) -> Response:
        """The tenant's queues with their counts, by name, a page at a time."""
        limit = args["limit"]
        queues = services().queues.list_queues(current_tenant(), limit + 1, args.get("after"))
        return render.json_response({"queues": [render.queue(q) for q in queues[:limit]],
                                     "next": queues[limit - 1].name if len(queues) > limit else None})


@blp.route("/<qname:name>")
class QueueByName(MethodView):
    @blp.arguments(QueuePutSchema)
    @blp.response(200, QueueSchema)
    @blp.alt_response(201, schema=QueueSchema, description="created")
    @blp.doc(**links.AFTER_QUEUE_PUT)
    def put(self, body: dict[str, Any], name: str) -> Response:
        """Creates (201) or updates (200) a queue: the settings named change, the others are kept.
        Changing the model of a non-empty queue is 409; so is making a queue exclusive or ordered by
        group while a send stored in steps still owes it copies (again in a moment)."""
        settings = {field: body.get(field) for field in QUEUE_SETTINGS}
        s, tenant = services(), current_tenant()
        s.check_creation(f"queue {name}", lambda: s.queues.get_queue(tenant, name), tenant)
        info, created = s.queues.put_queue(tenant, name, body["model"], **settings)
        return render.json_response(render.queue(info), 201 if created else 200)

    @blp.response(200, QueueSchema)
    def get(self, name: str) -> Response:
        """One queue; publish/subscribe queues list their subscribers."""
        return render.json_response(render.queue(services().queues.get_queue(current_tenant(), name)))

    @blp.response(204)
    def delete(self, name: str) -> None:
        """Removes the queue with its messages, dead letters and subscribers."""
        services().queues.delete_queue(current_tenant(), name)


@blp.route("/<qname:name>/subscribers/<qname:subscriber>")
class Subscriber(MethodView):
    @blp.response(200)
    @blp.alt_response(201, description="created")
    @blp.alt_response(400, schema=ErrorSchema, description="the queue is point-to-point: it has no subscribers")
    def put(self, name: str, subscriber: str) -> Response:
        """Creates a subscriber of a publish/subscribe queue ahead of its first get (a get also creates
        it, also while the memory state is red, when this PUT is refused)."""
        s, tenant = services(), current_tenant()
        s.check_creation(f"subscriber {subscriber}", lambda: _subscriber(s, tenant, name, subscriber), tenant)
        created = s.queues.put_subscriber(tenant, name, subscriber)
        return render.json_response({"name": subscriber}, 201 if created else 200)

    @blp.response(204)
    def delete(self, name: str, subscriber: str) -> None:
        """Removes the subscriber and its messages."""
        services().queues.delete_subscriber(current_tenant(), name, subscriber)


def _subscriber(s: Services, tenant: str, queue: str, subscriber: str) -> None:
    """Raises NotFound unless ``queue`` has ``subscriber``."""
    if subscriber not in s.queues.get_queue(tenant, queue).subscribers:
        raise NotFound(f"queue {queue} has no subscriber {subscriber}", subscriber=subscriber)
