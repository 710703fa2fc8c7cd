"""Streaming consumers' micro-batches (the Spark data source's protocol)."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq import defaults
from atomq.api.schemas.common import SUBSCRIBER_DOC, SUBSCRIBER_NAME, Int, Strict
from atomq.api.schemas.messages import BrowsedMessageSchema

GENERATION_DOC = {"description": "the generation the query's open answered: a call of a query that another "
                                  "one opened since is refused (409); leave it out to share the name unfenced"}


class OpenSchema(Strict):
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)


class OpenedSchema(Strict):
    generation = fields.Integer(required=True)


class PlanSchema(Strict):
    max = Int(load_default=defaults.STREAM_PLAN_MESSAGES, validate=validate.Range(1, defaults.MAX_STREAM_BATCH))
    partitions = Int(load_default=1, validate=validate.Range(1, defaults.MAX_STREAM_PARTITIONS))
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)
    generation = Int(validate=validate.Range(1, defaults.MAX_STREAM_COUNTER), metadata=GENERATION_DOC)
    wait_ms = Int(load_default=0, validate=validate.Range(0, defaults.MAX_WAIT_MS),
                  metadata={"description": "how long to wait for a first message when none is ready"})


class PlannedSchema(Strict):
    count = fields.Integer(required=True, metadata={"description": "messages in the batch (0: nothing to read)"})
    partitions = fields.Integer(required=True)


class PartitionArgs(Strict):
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)


class PartitionSchema(Strict):
    messages = fields.List(fields.Nested(BrowsedMessageSchema), required=True)


class CommitSchema(Strict):
    through = Int(required=True, validate=validate.Range(0, defaults.MAX_STREAM_COUNTER),
                  metadata={"description": "every planned batch up to this number is acked"})
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)
    generation = Int(validate=validate.Range(1, defaults.MAX_STREAM_COUNTER), metadata=GENERATION_DOC)


class ExtendBatchesSchema(Strict):
    batches = fields.List(Int(validate=validate.Range(0, defaults.MAX_STREAM_COUNTER)), required=True,
                          validate=validate.Length(max=1000),
                          metadata={"description": "the planned batches the query works on"})
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)
    generation = Int(validate=validate.Range(1, defaults.MAX_STREAM_COUNTER), metadata=GENERATION_DOC)


class CommittedSchema(Strict):
    acked = fields.Integer(required=True)


class StreamExtendedSchema(Strict):
    extended = fields.Integer(required=True)
