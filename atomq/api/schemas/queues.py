"""Queue components and their subscribers."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq import defaults
from atomq.api.schemas.common import NEXT_DOC, Bool, Int, Number, Strict
from atomq.platform.models import Durability, Overflow, QueueOrdering
from atomq.platform.queues.topics import PATTERN_PATTERN, PATTERN_RULE


class QueuePutSchema(Strict):
    model = fields.String(required=True, validate=validate.OneOf(["point_to_point", "publish_subscribe"]))
    max_redeliveries = Int(validate=validate.Range(*defaults.MAX_REDELIVERIES_RANGE),
                           metadata={"description": f"Left out: kept (a new queue: {defaults.MAX_REDELIVERIES})"})
    ack_timeout_s = Number(validate=validate.Range(*defaults.ACK_TIMEOUT_RANGE_S),
                           metadata={"description": f"Left out: kept (a new queue: {defaults.ACK_TIMEOUT_S:g})"})
    message_ttl_s = Number(validate=validate.Range(0, defaults.MAX_MESSAGE_TTL_S),
                           metadata={"description": "every message expires this long after its send; 0: none. "
                                                    "Left out: kept (a new queue: 0)"})
    topics = fields.List(fields.String(validate=[validate.Length(1, defaults.MAX_TOPIC_CHARS),
                                                 validate.Regexp(PATTERN_PATTERN, error=PATTERN_RULE)]),
                         validate=validate.Length(max=defaults.MAX_TOPICS_PER_QUEUE),
                         metadata={"description": "topic patterns the queue attracts ('*' one level, 'abc*' a "
                                                  "level starting with abc, '>' last: one or more levels). Left "
                                                  "out: kept"})
    on_expire = fields.String(validate=validate.OneOf(["dead_letter", "discard"]),
                              metadata={"description": "what happens to an expired message. Left out: kept "
                                                       "(a new queue: dead_letter)"})
    last_value = Bool(metadata={"description": "point-to-point only: at most one waiting message per value of "
                                               "the property last_value_key, a new one replacing it. Left out: "
                                               "kept (a new queue: false)"})
    access = fields.String(validate=validate.OneOf(["exclusive", "non_exclusive"]),
                           metadata={"description": "exclusive (point-to-point only): one consumer at a time gets "
                                                    "the messages, in send order; every call names its consumer. "
                                                    "Left out: kept (a new queue: non_exclusive)"})
    last_value_key = fields.String(validate=validate.Length(max=defaults.MAX_PROPERTY_NAME_CHARS),
                                   metadata={"description": "the message property whose value keys a last-value "
                                                            "queue; \"\": one message for the whole queue. Left "
                                                            "out: kept (a new queue: \"\")"})

    max_messages = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT),
                       metadata={"description": "most messages neither acked nor dead (ready, scheduled or in "
                                                "flight; per subscriber on a publish/subscribe queue); 0: no "
                                                "limit. Left out: kept (a new queue: 0)"})
    max_bytes = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT),
                    metadata={"description": "most bytes of those messages (each its documents' data and "
                                             "properties and its envelope); 0: no limit. Left out: kept"})
    max_message_bytes = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT),
                            metadata={"description": "largest message a send may hold (413 past it); 0: no "
                                                     "limit. Left out: kept"})
    max_dead_letters = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT),
                           metadata={"description": "most dead letters; past it the oldest are dropped; 0: no "
                                                    "limit. Left out: kept"})
    overflow = fields.String(validate=validate.OneOf([o.value for o in Overflow]),
                             metadata={"description": "what a send that would pass max_messages or max_bytes "
                                                      "gets: reject_new (507 queue_full), drop_oldest or "
                                                      "drop_lowest_priority (waiting messages make room), "
                                                      "flow_control (held until there is room, then 429). Left "
                                                      "out: kept (a new queue: reject_new)"})
    overflow_to_dead_letters = Bool(metadata={"description": "messages the overflow drops go to the dead letter "
                                                             "queue with reason overflow. Left out: kept (a new "
                                                             "queue: false)"})
    dead_letter_queue = fields.String(
        validate=validate.Length(max=128),
        metadata={"description": "another point-to-point queue of the tenant (not a last-value one) that the "
                                 "queue's dead letters move to, as ordinary messages with the properties "
                                 "dead_letter_reason, dead_letter_source and dead_letter_delivery_count; a "
                                 "dead letter it cannot take (full, gone) stays in the queue's own. \"\": the "
                                 "queue's own dead letters. Left out: kept (a new queue: \"\")"})
    durability = fields.String(validate=validate.OneOf([d.value for d in Durability]),
                               metadata={"description": "async: a send is answered once the store holds it in "
                                                        "memory and in its append-only file (synced every second); "
                                                        "sync: once its data is synced to disk and on min_replicas "
                                                        "replicas, else 503 not_durable after sync_timeout_ms. "
                                                        "Left out: kept (a new queue: async)"})
    delay_s = Number(validate=validate.Range(0, defaults.MAX_DELAY_S),
                     metadata={"description": "each message sent to the queue is first delivered this long after its "
                                              "send, unless it (or its send) gives a delay_s of its own; 0: at once. "
                                              "Not on an exclusive queue, which delivers in send order. Left out: "
                                              "kept (a new queue: 0)"})
    ordering = fields.String(validate=validate.OneOf([o.value for o in QueueOrdering]),
                             metadata={"description": "group: one message of a group (a message's group) out at "
                                                      "a time, ready, in flight or waiting out a redelivery delay; "
                                                      "a group's messages in send order, also across redeliveries; "
                                                      "groups independent; a message of no group ordered with no "
                                                      "other. none: any number out at once. A change applies to "
                                                      "what is sent after it. Left out: kept (a new queue: none)"})


class ConsumerSchema(Strict):
    name = fields.String(required=True)
    active = fields.Boolean(required=True)
    last_seen = fields.Float(required=True, metadata={"description": "its last call, in seconds since the epoch"})


class CountsSchema(Strict):
    depth = fields.Integer(required=True, metadata={"description": "ready (waiting behind their group's head "
                                                                   "included), or scheduled (for a redelivery, or "
                                                                   "delayed by their send)"})
    in_flight = fields.Integer(required=True)
    dead_letters = fields.Integer(required=True)
    scheduled = fields.Integer(required=True, metadata={"description": "of depth, those waiting out a delay: a "
                                                                       "redelivery's, or their send's"})
    delayed = fields.Integer(required=True, metadata={"description": "of scheduled, those never delivered yet, "
                                                                     "waiting out their send's delay"})
    held_bytes = fields.Integer(required=True, metadata={"description": "bytes of the messages neither acked nor "
                                                                       "dead: what max_bytes holds"})


class SubscriberSchema(CountsSchema):
    name = fields.String(required=True)


class TotalsSchema(Strict):
    sent = fields.Integer(required=True)
    delivered = fields.Integer(required=True)
    acked = fields.Integer(required=True)
    nacked = fields.Integer(required=True)
    dead_lettered = fields.Integer(required=True)
    expired = fields.Integer(required=True)
    superseded = fields.Integer(required=True)
    dropped = fields.Integer(required=True)


class QueueSchema(CountsSchema):
    name = fields.String(required=True)
    model = fields.String(required=True)
    max_redeliveries = fields.Integer(required=True)
    ack_timeout_s = fields.Float(required=True)
    message_ttl_s = fields.Float(required=True)
    on_expire = fields.String(required=True)
    topics = fields.List(fields.String(), required=True)
    last_value = fields.Boolean(required=True)
    last_value_key = fields.String(required=True)
    access = fields.String(required=True)
    consumers = fields.List(fields.Nested(ConsumerSchema), required=True,
                            metadata={"description": "an exclusive queue's consumers in line, the active one first"})
    depth_by_priority = fields.Dict(keys=fields.String(), values=fields.Integer(), required=True,
                                    metadata={"description": "ready messages by priority, for the priorities "
                                                             "that have some"})
    totals = fields.Nested(TotalsSchema, required=True, metadata={"description": "counts since the queue was created"})
    max_messages = fields.Integer(required=True)
    max_bytes = fields.Integer(required=True)
    max_message_bytes = fields.Integer(required=True)
    max_dead_letters = fields.Integer(required=True)
    overflow = fields.String(required=True, validate=validate.OneOf([o.value for o in Overflow]))
    overflow_to_dead_letters = fields.Boolean(required=True)
    durability = fields.String(required=True, validate=validate.OneOf([d.value for d in Durability]))
    delay_s = fields.Float(required=True, metadata={"description": "the delay of a message that gives none"})
    ordering = fields.String(required=True, validate=validate.OneOf([o.value for o in QueueOrdering]))
    dead_letter_queue = fields.String(required=True, metadata={"description": "the queue its dead letters move "
                                                                              "to; \"\": its own dead letters"})
    subscribers = fields.List(fields.Nested(SubscriberSchema))


class QueueListSchema(Strict):
    queues = fields.List(fields.Nested(QueueSchema), required=True)
    next = fields.String(required=True, allow_none=True, metadata=NEXT_DOC)
