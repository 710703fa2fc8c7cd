"""SendMessage, ReceiveMessage, DeleteMessage on the same queues and services as the native API.

A message sent through SQS is a native message of one document, the body; its
MessageAttributes are the message's properties, one a name: a ``String``
attribute is the property's text, any other type an object ``{"DataType",
"StringValue" | "BinaryValue" (base64)}`` so that the type round-trips. Read
back, a text property is a ``String`` attribute, a number a ``Number`` one, such
an object its own type, and other properties of natively sent messages are
left out. Visibility is the ack deadline, DeleteMessage an ack by receipt.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from atomq.api.sqs.checksums import check_body, md5_of_attributes, md5_of_body
from atomq.api.sqs.context import SqsContext, integer, required, string_list
from atomq.errors import InvalidInput, SqsError
from atomq.platform.models import Delivery, OutgoingDocument, OutgoingMessage
from atomq.platform.queues.names import RECEIPT

MAX_MESSAGE_BYTES = 262_144
MAX_ATTRIBUTES = 10
ATTRIBUTE_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!(?i:aws\.|amazon\.))[A-Za-z0-9_.-]{1,256}(?<!\.)")
DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]{1,250})?")
MAX_RECEIVE = 10
MAX_WAIT_S = 20
MAX_VISIBILITY_S = 43_200


def _attributes(raw: Any) -> dict[str, dict[str, Any]]:
    """Checked MessageAttributes, each ``{"DataType", "StringValue" | "BinaryValue" (base64 text)}``."""
    if not isinstance(raw, dict) or len(raw) > MAX_ATTRIBUTES:
        raise SqsError("InvalidParameterValue", f"MessageAttributes maps at most {MAX_ATTRIBUTES} names to values")
    out = {}
    for name, value in raw.items():
        if not ATTRIBUTE_NAME.fullmatch(name):
            raise SqsError("InvalidParameterValue", f"message attribute name {name!r} breaks SQS's rule: letters, "
                                                    "digits, _ - and ., not starting with AWS. or Amazon.")
        data_type = value.get("DataType") if isinstance(value, dict) else None
        if not isinstance(data_type, str) or not DATA_TYPE.fullmatch(data_type):
            raise SqsError("InvalidParameterValue", f"message attribute {name} needs a DataType of String, Number "
                                                    "or Binary (or one of those and .<custom>)")
        kind = "BinaryValue" if data_type.startswith("Binary") else "StringValue"
        given = value.get(kind)
        if not isinstance(given, str) or not given:
            raise SqsError("InvalidParameterValue", f"message attribute {name} of type {data_type} needs a "
                                                    f"non-empty {kind}")
        if kind == "BinaryValue":
            try:
                base64.b64decode(given, validate=True)
            except binascii.Error:
                raise SqsError("InvalidParameterValue", f"message attribute {name}'s BinaryValue is not "
                                                        "base64") from None
        else:
            check_body(given, f"MessageAttributes.{name}")
        out[name] = {"DataType": data_type, kind: given}
    return out


def _property(attribute: dict[str, Any]) -> Any:
    return attribute["StringValue"] if attribute["DataType"] == "String" else attribute


def _attribute(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"DataType": "Number", "StringValue": json.dumps(value)}
    if isinstance(value, dict) and isinstance(value.get("DataType"), str) and DATA_TYPE.fullmatch(value["DataType"]):
        kind = "BinaryValue" if value["DataType"].startswith("Binary") else "StringValue"
        if isinstance(value.get(kind), str):
            return {"DataType": value["DataType"], kind: value[kind]}
    return None


def _md5_attributes(attributes: dict[str, dict[str, Any]]) -> str | None:
    return md5_of_attributes({name: {**a, "BinaryValue": base64.b64decode(a["BinaryValue"])} if "BinaryValue" in a
                              else a for name, a in attributes.items()})


def send_message(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params)
    body = required(params, "MessageBody")
    if not isinstance(body, str) or not body:
        raise SqsError("MissingParameter", "MessageBody must be a non-empty string")
    check_body(body)
    if integer(params, "DelaySeconds", 0, 900, 0):
        raise SqsError("InvalidParameterValue", "atomq does not take DelaySeconds yet: send with 0")
    attributes = _attributes(params.get("MessageAttributes", {}))
    size = len(body.encode()) + sum(len(n) + len(json.dumps(a)) for n, a in attributes.items())
    if size > MAX_MESSAGE_BYTES:
        raise SqsError("InvalidParameterValue", f"the message is {size} bytes; at most {MAX_MESSAGE_BYTES}")
    message = OutgoingMessage(documents=(OutgoingDocument(body),),
                              properties={n: _property(a) for n, a in attributes.items()})
    sent = ctx.services.send(ctx.tenant, name, [message], ctx.content_length)
    out = {"MessageId": sent.ids[0], "MD5OfMessageBody": md5_of_body(body)}
    md5 = _md5_attributes(attributes)
    if md5 is not None:
        out["MD5OfMessageAttributes"] = md5
    return out


def _wanted(names: list[str], name: str) -> bool:
    return any(w in ("All", ".*", name) or (w.endswith(".*") and name.startswith(w[:-1])) for w in names)


def _body(delivery: Delivery) -> str:
    """The message's one document as text; several documents as a JSON array of their data."""
    data = [d.data if isinstance(d.data, str) else base64.b64encode(d.data).decode() for d in delivery.documents]
    return data[0] if len(data) == 1 else json.dumps(data)


def _rendered(delivery: Delivery, system: list[str], names: list[str]) -> dict[str, Any]:
    body = _body(delivery)
    out: dict[str, Any] = {"MessageId": delivery.id, "ReceiptHandle": delivery.receipt,
                           "MD5OfBody": md5_of_body(body), "Body": body}
    known = {"ApproximateReceiveCount": str(delivery.delivery_count),
             "SentTimestamp": str(int(delivery.enqueued_at * 1000))}
    chosen = {k: v for k, v in known.items() if "All" in system or k in system}
    if chosen:
        out["Attributes"] = chosen
    attributes = {n: a for n, v in delivery.properties.items() if _wanted(names, n) and (a := _attribute(v))}
    if attributes:
        out["MessageAttributes"] = attributes
        out["MD5OfMessageAttributes"] = _md5_attributes(attributes)
    return out


def receive_message(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params)
    most = integer(params, "MaxNumberOfMessages", 1, MAX_RECEIVE, 1)
    wait_s = integer(params, "WaitTimeSeconds", 0, MAX_WAIT_S, 0)
    visibility = integer(params, "VisibilityTimeout", 0, MAX_VISIBILITY_S, -1) if "VisibilityTimeout" in params \
        else None
    system = string_list(params, "AttributeNames") + string_list(params, "MessageSystemAttributeNames")
    names = string_list(params, "MessageAttributeNames")
    s = ctx.services
    with s.longpolls.hold(ctx.tenant, wait_s * 1000) as wait_ms:
        taken = s.queues.take(ctx.tenant, name, most, wait_ms, stop=s.stopping, holder=f"key:{ctx.key_id}")
    receipts = [d.receipt for d in taken.deliveries]
    if receipts and visibility == 0:  # visible again at once: given back, no failed delivery counted
        s.queues.release(ctx.tenant, name, receipts=receipts, delay_s=0)
    elif receipts and visibility is not None:
        s.queues.extend(ctx.tenant, name, receipts=receipts, seconds=visibility)
    if not taken.deliveries:
        return {}
    return {"Messages": [_rendered(d, system, names) for d in taken.deliveries]}


def delete_message(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Acks the delivery the receipt names; a receipt that no longer holds one changes nothing (as SQS)."""
    name = ctx.queue_of(params)
    receipt = required(params, "ReceiptHandle")
    if not isinstance(receipt, str) or not RECEIPT.fullmatch(receipt):
        raise SqsError("ReceiptHandleIsInvalid", "the receipt handle is not one this queue gave")
    try:
        ctx.services.queues.ack(ctx.tenant, name, receipts=[receipt])
    except InvalidInput as exc:
        raise SqsError("ReceiptHandleIsInvalid", exc.message) from None
    return {}
