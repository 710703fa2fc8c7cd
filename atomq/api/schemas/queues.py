"""Queue components and their subscribers."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq import defaults
from atomq.api.schemas.common import Int, Number, Strict


class QueuePutSchema(Strict):
    model = fields.String(required=True, validate=validate.OneOf(["point_to_point", "publish_subscribe"]))
    max_redeliveries = Int(load_default=defaults.MAX_REDELIVERIES,
                           validate=validate.Range(*defaults.MAX_REDELIVERIES_RANGE))
    ack_timeout_s = Number(load_default=defaults.ACK_TIMEOUT_S, validate=validate.Range(*defaults.ACK_TIMEOUT_RANGE_S))


class CountsSchema(Strict):
    depth = fields.Integer(required=True, metadata={"description": "ready or scheduled for redelivery"})
    in_flight = fields.Integer(required=True)
    dead_letters = fields.Integer(required=True)
    scheduled = fields.Integer(required=True, metadata={"description": "of depth, those waiting out a redelivery delay"})


class SubscriberSchema(CountsSchema):
    name = fields.String(required=True)


class QueueSchema(CountsSchema):
    name = fields.String(required=True)
    model = fields.String(required=True)
    max_redeliveries = fields.Integer(required=True)
    ack_timeout_s = fields.Float(required=True)
    subscribers = fields.List(fields.Nested(SubscriberSchema))


class QueueListSchema(Strict):
    queues = fields.List(fields.Nested(QueueSchema), required=True)
