"""SendMessage, ReceiveMessage, DeleteMessage, ChangeMessageVisibility on the same queues and
services as the native API (what a message is natively: ``message_model``).

Visibility is the ack deadline: DeleteMessage is an ack by receipt, ChangeMessageVisibility an
extension of the deadline (0: given back at once, a release, no failed delivery counted).
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from atomq.api.sqs.checksums import md5_of_body
from atomq.api.sqs.errors import INVALID_RECEIPT
from atomq.api.sqs.context import ACK_TIMEOUT_FIELD, SqsContext, SqsQueue, integer, required, string_list
from atomq.api.sqs.message_model import (
    SENDER_PROPERTY,
    SYSTEM_PROPERTIES,
    TRACE_PROPERTY,
    Outgoing,
    as_attribute,
    md5_attributes,
    outgoing,
    sequence_number,
    sqs_dedupe_id,
)
from atomq.errors import InvalidInput, SqsError
from atomq.platform.models import DEAD_LETTER_PROPERTIES, Delivery
from atomq.platform.queues.names import RECEIPT

MAX_RECEIVE = 10
MAX_WAIT_S = 20
MAX_VISIBILITY_S = 43_200
HIDDEN_PROPERTIES = frozenset(DEAD_LETTER_PROPERTIES + SYSTEM_PROPERTIES)
"""The record of a move to a dead letter queue, which SQS keeps out of a message's attributes (its
source is the system attribute DeadLetterQueueSourceArn), and the properties that are system
attributes: a client that sends a message's attributes on must not find more than it sent, or more
than SQS's ten."""


def sent_answer(queue: SqsQueue, message_id: str, out: Outgoing) -> dict[str, Any]:
    """What a send answers of one message; a FIFO queue's with its SequenceNumber (a duplicate's is
    the first's, as its MessageId is)."""
    answer = {"MessageId": message_id, **out.answer}
    if queue.fifo:
        answer["SequenceNumber"] = sequence_number(message_id)
    return answer


def send_message(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    queue = ctx.queue(params, recent=True)
    out = outgoing(queue, params, ctx.key_id)
    sent = ctx.services.send(ctx.tenant, queue.name, [out.message], ctx.content_length)
    return sent_answer(queue, sent.ids[0], out)


def _wanted(names: list[str], name: str) -> bool:
    return any(w in ("All", ".*", name) or (w.endswith(".*") and name.startswith(w[:-1])) for w in names)


def _body(delivery: Delivery) -> str:
    """The message's one document as text; several documents as a JSON array of their data."""
    data = [d.data if isinstance(d.data, str) else base64.b64encode(d.data).decode() for d in delivery.documents]
    return data[0] if len(data) == 1 else json.dumps(data)


def _rendered(ctx: SqsContext, delivery: Delivery, system: list[str], names: list[str], received_ms: int,
              fifo: bool) -> dict[str, Any]:
    """One received message. ApproximateFirstReceiveTimestamp is this receive's time: atomq keeps
    the time of the delivery under way only, which is the first one's for a first delivery. A
    message's MessageGroupId is shown wherever it has one; its SequenceNumber and
    MessageDeduplicationId on a FIFO queue only, as SQS. SenderId and AWSTraceHeader: see
    ``message_model``."""
    body = _body(delivery)
    out: dict[str, Any] = {"MessageId": delivery.id, "ReceiptHandle": delivery.receipt,
                           "MD5OfBody": md5_of_body(body), "Body": body}
    known = {"ApproximateReceiveCount": str(delivery.delivery_count),
             "SentTimestamp": str(int(delivery.enqueued_at * 1000)),
             "ApproximateFirstReceiveTimestamp": str(received_ms)}
    sender, trace = delivery.properties.get(SENDER_PROPERTY), delivery.properties.get(TRACE_PROPERTY)
    known["SenderId"] = sender if isinstance(sender, str) else ctx.account_id
    if isinstance(trace, str):
        known["AWSTraceHeader"] = trace
    envelope = delivery.envelope
    if envelope.group is not None:
        known["MessageGroupId"] = envelope.group
    if fifo:
        known["SequenceNumber"] = sequence_number(delivery.id)
        if envelope.dedupe_id is not None:
            known["MessageDeduplicationId"] = sqs_dedupe_id(envelope.dedupe_id)
    source = delivery.properties.get(DEAD_LETTER_PROPERTIES[1])
    if isinstance(source, str) and "/" not in source:  # not a subscriber's, which SQS cannot name
        known["DeadLetterQueueSourceArn"] = ctx.arn(source)
    chosen = {k: v for k, v in known.items() if "All" in system or k in system}
    if chosen:
        out["Attributes"] = chosen
    attributes = {n: a for n, v in delivery.properties.items()
                  if n not in HIDDEN_PROPERTIES and _wanted(names, n) and (a := as_attribute(v))}
    if attributes:
        out["MessageAttributes"] = attributes
        out["MD5OfMessageAttributes"] = md5_attributes(attributes)
    return out


def receive_message(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """A get of up to ``MaxNumberOfMessages``, waiting up to ``WaitTimeSeconds`` (the queue's
    ReceiveMessageWaitTimeSeconds when not given) for the first; ``VisibilityTimeout`` moves the
    deliveries' deadline when it is not the queue's own (0, or the queue's VisibilityTimeout of 0:
    given back at once, visible to the next receive, as SQS does)."""
    queue = ctx.queue(params, recent=True)
    most = integer(params, "MaxNumberOfMessages", 1, MAX_RECEIVE, 1)
    wait_s = integer(params, "WaitTimeSeconds", 0, MAX_WAIT_S, queue.wait_s)
    visibility = integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_S, 0) if "VisibilityTimeout" in params \
        else None
    system = string_list(params, "AttributeNames") + string_list(params, "MessageSystemAttributeNames")
    names = string_list(params, "MessageAttributeNames")
    s = ctx.services
    with s.longpolls.hold(ctx.tenant, wait_s * 1000) as wait_ms:
        taken = s.queues.take(ctx.tenant, queue.name, most, wait_ms, stop=s.stopping, holder=f"key:{ctx.key_id}")
    received_ms = int(time.time() * 1000)
    receipts = [d.receipt for d in taken.deliveries]
    if receipts and (visibility == 0 or (visibility is None and queue.visibility_s == 0)):
        # Visible again at once: given back, no failed delivery counted (the receive is: the delivery count).
        s.queues.release(ctx.tenant, queue.name, receipts=receipts, delay_s=0)
    elif receipts and visibility is not None and str(visibility * 1000) != queue.fields.get(ACK_TIMEOUT_FIELD):
        s.queues.extend(ctx.tenant, queue.name, receipts=receipts, seconds=visibility)
    if not taken.deliveries:
        return {}
    return {"Messages": [_rendered(ctx, d, system, names, received_ms, queue.fifo) for d in taken.deliveries]}


def checked_receipt(receipt: Any) -> str:
    """A receipt handle as a receive gave it; ReceiptHandleIsInvalid else."""
    if not isinstance(receipt, str) or not RECEIPT.fullmatch(receipt):
        raise SqsError("ReceiptHandleIsInvalid", INVALID_RECEIPT)
    return receipt


def delete_message(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Acks the delivery the receipt names; a receipt that no longer holds one changes nothing (as SQS)."""
    name = ctx.queue_of(params, recent=True)
    receipt = checked_receipt(required(params, "ReceiptHandle"))
    try:
        ctx.services.queues.ack(ctx.tenant, name, receipts=[receipt])
    except InvalidInput as exc:
        raise SqsError("ReceiptHandleIsInvalid", exc.message) from None
    return {}


def change_visibility(ctx: SqsContext, queue: str, receipt: str, seconds: int) -> None:
    """Moves one delivery's deadline to ``seconds`` from now (0: gives it back at once);
    MessageNotInflight when the receipt no longer holds a delivery."""
    try:
        if seconds == 0:
            done = ctx.services.queues.release(ctx.tenant, queue, receipts=[receipt], delay_s=0)
        else:
            done = ctx.services.queues.extend(ctx.tenant, queue, receipts=[receipt], seconds=seconds)
    except InvalidInput as exc:
        raise SqsError("ReceiptHandleIsInvalid", exc.message) from None
    if not done:
        raise SqsError("MessageNotInflight", "the message is not in flight: it was deleted, or its visibility "
                                             "timeout ran out, or this receipt is of an earlier receive")


def change_message_visibility(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params, recent=True)
    receipt = checked_receipt(required(params, "ReceiptHandle"))
    required(params, "VisibilityTimeout")
    change_visibility(ctx, name, receipt, integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_S, 0))
    return {}
