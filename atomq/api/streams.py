"""Streaming consumers of a queue: ``/v1/queues/<q>/streams/<consumer>/...``.

The protocol of the Spark data source's streaming read (see
``atomq.platform.queues.streams``): plan micro-batch n (idempotent), read its
partitions (the same rows on every replay), extend while working, commit
through n (ack), each fenced by the generation the query's open answered.
Tenant key, like every queue call.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from flask.views import MethodView

from atomq.api.auth import current_tenant
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.streams import (
    CommitSchema,
    CommittedSchema,
    ExtendBatchesSchema,
    OpenedSchema,
    OpenSchema,
    PartitionArgs,
    PartitionSchema,
    PlannedSchema,
    PlanSchema,
    StreamExtendedSchema,
)
from atomq.api.wire import render

blp = ApiBlueprint("streams", __name__, url_prefix="/v1/queues", description="Streaming consumers",
                   tenant_scoped=True)


@blp.route("/<qname:name>/streams/<qname:consumer>/open")
class Open(MethodView):
    @blp.arguments(OpenSchema, required=False)
    @blp.response(200, OpenedSchema)
    def post(self, body: dict[str, Any], name: str, consumer: str) -> dict[str, int]:
        """Starts a query under the consumer's name: answers its generation, which the query's
        plans, extends and commits carry; those of queries opened before are refused from now on."""
        return {"generation": services().streams.open(current_tenant(), name, consumer, body.get("subscriber"))}


@blp.route("/<qname:name>/streams/<qname:consumer>/batches/<int:batch>")
class Batch(MethodView):
    @blp.arguments(PlanSchema, required=False)
    @blp.response(200, PlannedSchema)
    def post(self, body: dict[str, Any], name: str, consumer: str, batch: int) -> dict[str, int]:
        """Plans micro-batch ``batch``: answers the plan made before for that number while its
        deliveries are in flight, else takes up to ``max`` deliveries. ``count`` 0: nothing to read."""
        s = services()
        tenant = current_tenant()
        with s.longpolls.hold(tenant, body["wait_ms"]) as wait_ms:
            planned = s.streams.plan(tenant, name, consumer, batch, body["max"], body["partitions"],
                                     body.get("subscriber"), wait_ms, stop=s.stopping,
                                     generation=body.get("generation"))
        return {"count": len(planned.ids), "partitions": planned.partitions} if planned else \
            {"count": 0, "partitions": 0}

    @blp.arguments(PartitionArgs, location="query")
    @blp.response(200, PlannedSchema)
    def get(self, args: dict[str, Any], name: str, consumer: str, batch: int) -> dict[str, int]:
        """Micro-batch ``batch`` as planned (count 0: not planned, or committed)."""
        planned = services().streams.planned(current_tenant(), name, consumer, batch, args.get("subscriber"))
        return {"count": len(planned.ids), "partitions": planned.partitions} if planned else \
            {"count": 0, "partitions": 0}


@blp.route("/<qname:name>/streams/<qname:consumer>/batches/<int:batch>/partitions/<int:partition>")
class Partition(MethodView):
    @blp.arguments(PartitionArgs, location="query")
    @blp.response(200, PartitionSchema)
    def get(self, args: dict[str, Any], name: str, consumer: str, batch: int, partition: int) -> Response:
        """The messages of one partition of a planned batch, the same on every read until the commit."""
        messages = services().streams.read(current_tenant(), name, consumer, batch, partition,
                                           args.get("subscriber"))
        return render.json_response({"messages": [render.message(m) for m in messages]})


@blp.route("/<qname:name>/streams/<qname:consumer>/commit")
class Commit(MethodView):
    @blp.arguments(CommitSchema)
    @blp.response(200, CommittedSchema)
    def post(self, body: dict[str, Any], name: str, consumer: str) -> dict[str, int]:
        """Acks every planned batch up to ``through``."""
        return {"acked": services().streams.commit(current_tenant(), name, consumer, body["through"],
                                                   body.get("subscriber"), body.get("generation"))}


@blp.route("/<qname:name>/streams/<qname:consumer>/extend")
class Extend(MethodView):
    @blp.arguments(ExtendBatchesSchema)
    @blp.response(200, StreamExtendedSchema)
    def post(self, body: dict[str, Any], name: str, consumer: str) -> dict[str, int]:
        """A full ack time-out more for the planned batches the query works on."""
        return {"extended": services().streams.extend(current_tenant(), name, consumer, body["batches"],
                                                      body.get("subscriber"), body.get("generation"))}
