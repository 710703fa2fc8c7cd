"""A queue's dead letters: ``/v1/queues/<qname:name>/dead-letters``."""

from __future__ import annotations

from typing import Any

from flask import Response
from flask.views import MethodView

from atomq.api.auth import current_tenant
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.common import DeadLetterPageArgs, DeadLetterSelector, SubscriberArgs
from atomq.api.schemas.messages import DeadLetterPageSchema, DeadLetterReasonsSchema, DeletedSchema, ResentSchema
from atomq.api.wire import render

blp = ApiBlueprint("dead_letters", __name__, url_prefix="/v1/queues", description="Dead letters",
                   tenant_scoped=True)


@blp.route("/<qname:name>/dead-letters")
class DeadLetters(MethodView):
    @blp.arguments(DeadLetterPageArgs, location="query")
    @blp.response(200, DeadLetterPageSchema)
    def get(self, args: dict[str, Any], name: str) -> Response:
        """Dead letters with their reason and failed deliveries, of one reason with ``reason``."""
        page = services().queues.dead_letters(current_tenant(), name, args["limit"], args.get("after"),
                                              args.get("subscriber"), args.get("reason"))
        return render.json_response({"messages": [render.message(m) for m in page.items], "next": page.next})

    @blp.arguments(DeadLetterSelector)
    @blp.response(200, DeletedSchema)
    def delete(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """Deletes selected dead letters, all of them, or all of one reason."""
        return {"deleted": services().queues.delete_dead_letters(
            current_tenant(), name, body.get("ids"), bool(body.get("all")), body.get("subscriber"),
            body.get("reason"))}


@blp.route("/<qname:name>/dead-letters/resend")
class Resend(MethodView):
    @blp.arguments(DeadLetterSelector)
    @blp.response(200, ResentSchema)
    def post(self, body: dict[str, Any], name: str) -> dict[str, int]:
        """Puts dead letters back (selected, all, or all of one reason): same id and delivery
        count, a fresh redelivery budget, no expiry."""
        return {"resent": services().queues.resend_dead_letters(
            current_tenant(), name, body.get("ids"), bool(body.get("all")), body.get("subscriber"),
            body.get("reason"))}


@blp.route("/<qname:name>/dead-letters/reasons")
class Reasons(MethodView):
    @blp.arguments(SubscriberArgs, location="query")
    @blp.response(200, DeadLetterReasonsSchema)
    def get(self, args: dict[str, Any], name: str) -> dict[str, Any]:
        """The reasons present among the newest dead letters, with how many have each: the values
        ``?reason=`` and a ``{"reason": ...}`` selector may take."""
        found = services().queues.dead_letter_reasons(current_tenant(), name, args.get("subscriber"))
        return {"reasons": [{"reason": r.reason, "count": r.count} for r in found.reasons],
                "counted": found.counted, "complete": found.complete}
