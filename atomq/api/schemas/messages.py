"""Send, get and the message views of management."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

from atomq import defaults
from atomq.api.schemas.common import (
    CONSUMER_DOC,
    CONSUMER_NAME,
    LATEST_TIME_S,
    SUBSCRIBER_DOC,
    SUBSCRIBER_NAME,
    Int,
    Number,
    PageArgs,
    Selection,
    Selector,
    Strict,
    above_zero,
)
from atomq.platform.queues.management import BROWSE_STATES, REASONS_READ, REASONS_SHOWN
from atomq.platform.queues.names import GROUP, GROUP_PATTERN, GROUP_RULE
from atomq.platform.queues.topics import TOPIC_PATTERN, TOPIC_RULE


def _is_base64(value: str) -> None:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ma.ValidationError("must be base64") from None


def _is_group(value: str) -> None:
    """The whole value is a group (a Regexp's ``$`` also matches before a last newline)."""
    if not GROUP.fullmatch(value):
        raise ma.ValidationError(GROUP_RULE)


class OutgoingDocumentSchema(Strict):
    ONE_OF = [{"required": ["data"]}, {"required": ["data_base64"]}]

    data = fields.String(metadata={"description": "text content (give this or data_base64)"})
    data_base64 = fields.String(validate=_is_base64,
                                metadata={"description": "binary content, base64", "format": "byte"})
    properties = fields.Dict(keys=fields.String(), load_default=dict,
                             metadata={"description": "dynamic document properties"})

    @ma.validates_schema
    def one_content(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("data" in data) == ("data_base64" in data):
            raise ma.ValidationError("give either data or data_base64", "data")


class OutgoingMessageSchema(Strict):
    """The optional fields take null for "not given"."""

    documents = fields.List(fields.Nested(OutgoingDocumentSchema), required=True,
                            validate=validate.Length(min=1))
    properties = fields.Dict(keys=fields.String(), load_default=dict)
    dedupe_id = fields.String(validate=validate.Length(1, defaults.MAX_DEDUPE_ID_CHARS), allow_none=True)
    priority = Int(validate=validate.Range(*defaults.PRIORITY_RANGE), allow_none=True,
                   metadata={"description": f"0 to 9, higher first; null or left out: {defaults.DEFAULT_PRIORITY}"})
    expires_at = Number(validate=validate.Range(0, LATEST_TIME_S), allow_none=True,
                        metadata={"description": "seconds since the epoch; the message expires then"})
    ttl_s = above_zero(defaults.MAX_MESSAGE_TTL_S, allow_none=True,
                       metadata={"description": "seconds from the send (the server's clock); the earliest of this, "
                                                "expires_at and the queue's message_ttl_s applies"})
    traceparent = fields.String(validate=validate.Length(max=defaults.MAX_TRACEPARENT_CHARS), allow_none=True)
    delay_s = Number(validate=validate.Range(0, defaults.MAX_DELAY_S), allow_none=True,
                     metadata={"description": "seconds from the send before the message is first delivered; null or "
                                              "left out: the send's delay_s, else the queue's; 0: at once"})
    group = fields.String(validate=[validate.Regexp(GROUP_PATTERN, error=GROUP_RULE), _is_group], allow_none=True,
                          metadata={"description": "the message's group (SQS's MessageGroupId): on a queue whose "
                                                   "ordering is group, it goes out once every earlier message of "
                                                   "its group is settled; elsewhere it is carried only"})



def _send_delay() -> Number:
    return Number(validate=validate.Range(0, defaults.MAX_DELAY_S), allow_none=True,
                  metadata={"description": "seconds from the send before each message that gives no delay_s of "
                                           "its own is first delivered (every copy of it, in every queue it "
                                           "reaches); null or left out: each queue's own delay_s"})


class SendSchema(Strict):
    messages = fields.List(fields.Nested(OutgoingMessageSchema), required=True,
                           validate=validate.Length(min=1))
    delay_s = _send_delay()


class TopicMessageSchema(OutgoingMessageSchema):
    topic = fields.String(required=True, validate=[validate.Length(1, defaults.MAX_TOPIC_CHARS),
                                                   validate.Regexp(TOPIC_PATTERN, error=TOPIC_RULE)],
                          metadata={"description": "the topic this message is published to"})


class PublishManySchema(Strict):
    messages = fields.List(fields.Nested(TopicMessageSchema), required=True, validate=validate.Length(min=1))
    delay_s = _send_delay()


DROPPED = {"description": "only when the queue's overflow (drop_oldest, drop_lowest_priority) dropped waiting "
                          "messages to make room: how many"}


class StoredNowhereSchema(Strict):
    """Messages the request accepted, gave ids and stored nowhere (``atomq.platform.queues.stored_nowhere``)."""

    code = fields.String(required=True, validate=validate.OneOf(["no_subscribers", "no_queue_attracts_topic"]),
                         metadata={"description": "no_subscribers: the queue (or every queue the topic reaches) "
                                                  "is publish/subscribe and has no subscriber; "
                                                  "no_queue_attracts_topic: no queue's pattern matches the topic"})
    message = fields.String(required=True, metadata={"description": "what happened and what to do, for people"})
    messages = fields.Integer(required=True, metadata={"description": "how many of the request's messages"})
    queue = fields.String(metadata={"description": "a send's queue"})
    topic = fields.String(metadata={"description": "a publish's topic"})
    queues = fields.List(fields.String(), metadata={"description": "the queues without subscribers a topic reached"})


COPIES = {"description": "the message copies stored: each message once a point-to-point queue and once a subscriber "
                         "of a publish/subscribe queue (a subscriber gets only what is sent after it exists), as "
                         "max_copies_per_request counts them; 0: nothing was stored"}
WARNINGS = {"description": "one entry a queue or topic whose messages were stored nowhere; empty when every message "
                           "was stored somewhere"}


class SendResultSchema(Strict):
    ids = fields.List(fields.String(), required=True)
    copies = fields.Integer(required=True, metadata=COPIES)
    warnings = fields.List(fields.Nested(StoredNowhereSchema), required=True, metadata=WARNINGS)
    dropped = fields.Integer(metadata=DROPPED)


class PublishResultSchema(Strict):
    ids = fields.List(fields.String(), required=True,
                      metadata={"description": "one id a message, the same in every queue it reached"})
    queues = fields.List(fields.String(), required=True, metadata={"description": "the queues it reached, sorted"})
    copies = fields.Integer(required=True, metadata=COPIES)
    warnings = fields.List(fields.Nested(StoredNowhereSchema), required=True, metadata=WARNINGS)
    dropped = fields.Integer(metadata=DROPPED)


class PublishManyResultSchema(Strict):
    ids = fields.List(fields.String(allow_none=True), required=True,
                      metadata={"description": "one a message, in order: its id, the same in every queue it reached; "
                                               "null when no queue attracts its topic (nothing stored)"})
    topics = fields.Dict(keys=fields.String(), values=fields.List(fields.String()), required=True,
                         metadata={"description": "each topic of the request: the queues it reached, sorted "
                                                  "(empty: none attracts it)"})
    copies = fields.Integer(required=True, metadata=COPIES)
    warnings = fields.List(fields.Nested(StoredNowhereSchema), required=True, metadata=WARNINGS)
    dropped = fields.Integer(metadata=DROPPED)


class DocumentSchema(Strict):
    id = fields.String(required=True)
    data = fields.String()
    data_base64 = fields.String()
    properties = fields.Dict(required=True)


class MessageSchema(Strict):
    id = fields.String(required=True)
    delivery_count = fields.Integer(required=True)
    redelivered = fields.Boolean(required=True)
    enqueued_at = fields.Float(required=True)
    properties = fields.Dict(required=True)
    documents = fields.List(fields.Nested(DocumentSchema), required=True)
    priority = fields.Integer(required=True)
    expires_at = fields.Float(allow_none=True, metadata={"description": "when it expires; left out when it never does"})
    dedupe_id = fields.String(allow_none=True)
    traceparent = fields.String(allow_none=True)
    topic = fields.String(required=True, allow_none=True,
                          metadata={"description": "the topic it was published to; null when sent to the queue"})
    group = fields.String(metadata={"description": "the message's group; left out when it has none"})


class DeliverySchema(MessageSchema):
    receipt = fields.String(required=True)


IN_FLIGHT_ONLY = "; present only on a message in flight"


class BrowsedMessageSchema(MessageSchema):
    state = fields.String(required=True, validate=validate.OneOf(BROWSE_STATES))
    failed_deliveries = fields.Integer(required=True)
    holder = fields.String(allow_none=True, metadata={"description": (
        "who holds the delivery: the consumer its get named, else key:<key id> of the API key that made "
        "the get, or owner; null when nobody was named or the delivery was made before atomq kept it"
        + IN_FLIGHT_ONLY)})
    delivered_at = fields.Float(allow_none=True, metadata={"description": (
        "when the delivery was made, in seconds since the epoch (an extend does not move it); null for a "
        "delivery made before atomq kept it" + IN_FLIGHT_ONLY)})
    deadline = fields.Float(allow_none=True, metadata={"description": (
        "when its ack is due, in seconds since the epoch, as extends moved it; past it, the delivery "
        "fails at the next sweep" + IN_FLIGHT_ONLY)})
    due_at = fields.Float(allow_none=True, metadata={"description": (
        "when a scheduled message is due, in seconds since the epoch: redelivered then or, with delivery_count "
        "0, first delivered at the end of its send's delay_s; present only on a scheduled message")})


class BrowseArgs(PageArgs):
    state = fields.String(validate=validate.OneOf(BROWSE_STATES), metadata={"description": (
        "only the messages in this state; a page still holds `limit` of them while there are more")})


class DeadLetterSchema(MessageSchema):
    reason = fields.String(required=True)
    failed_deliveries = fields.Integer(required=True)
    dead_lettered_at = fields.Float(required=True)


class GetSchema(Strict):
    max = Int(load_default=defaults.GET_MAX_MESSAGES, validate=validate.Range(1, defaults.MAX_GET))
    wait_ms = Int(load_default=defaults.GET_WAIT_MS, validate=validate.Range(0, defaults.MAX_WAIT_MS))
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)
    consumer = fields.String(validate=CONSUMER_NAME, metadata=CONSUMER_DOC)
    ack = fields.Nested(Selection, metadata={
        "description": "messages to ack first (the previous batch), in the same round trip to the store as the "
                       "get: a consumer loop makes one request a batch. The answer says how many it acked; "
                       "when the ack fails, the request fails and the get takes nothing"})


class DeliveriesSchema(Strict):
    messages = fields.List(fields.Nested(DeliverySchema), required=True)
    active = fields.Boolean(metadata={"description": "exclusive queues only: whether the consumer is the active "
                                                     "one (a standby gets no messages)"})
    acked = fields.Integer(metadata={"description": "only when the get was given messages to ack: how many it acked "
                                                    "(only in-flight ones count)"})


class BrowsePageSchema(Strict):
    messages = fields.List(fields.Nested(BrowsedMessageSchema), required=True)
    next = fields.String(allow_none=True)


class DeadLetterPageSchema(Strict):
    messages = fields.List(fields.Nested(DeadLetterSchema), required=True)
    next = fields.String(allow_none=True)


class ReasonCountSchema(Strict):
    reason = fields.String(required=True, metadata={"description": "what ``?reason=`` selects them by"})
    count = fields.Integer(required=True, metadata={"description": "the dead letters counted that have it"})


class DeadLetterReasonsSchema(Strict):
    reasons = fields.List(fields.Nested(ReasonCountSchema), required=True, metadata={
        "description": "the reasons present, the most frequent first (then by reason), at most "
                       f"{REASONS_SHOWN}"})
    counted = fields.Integer(required=True, metadata={
        "description": f"the dead letters counted: the newest, at most {REASONS_READ:,}"})
    complete = fields.Boolean(required=True, metadata={
        "description": "whether the counts cover every dead letter and every reason is listed"})


class NackSchema(Selector):
    reason = fields.String(load_default="", validate=validate.Length(max=defaults.MAX_NACK_REASON_CHARS))


class ExtendSchema(Selector):
    seconds = above_zero(defaults.ACK_TIMEOUT_RANGE_S[1])


class ReleaseSchema(Selection):
    """In-flight messages to give back to the queue now; no consumer: whoever holds them yields them."""

    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)


class ReleasedSchema(Strict):
    released = fields.Integer(required=True)


class AckedSchema(Strict):
    acked = fields.Integer(required=True)


class NackedSchema(Strict):
    requeued = fields.Integer(required=True)
    dead_lettered = fields.Integer(required=True)


class ExtendedSchema(Strict):
    extended = fields.Integer(required=True)


class DeletedSchema(Strict):
    deleted = fields.Integer(required=True)


class ResentSchema(Strict):
    resent = fields.Integer(required=True)
