"""Messages as SQS has them and as atomq stores them.

A message sent through SQS is a native message of one document, the body; its MessageAttributes
are the message's properties, one a name: a ``String`` attribute is the property's text, any
other type an object ``{"DataType", "StringValue" | "BinaryValue" (base64)}`` so that the type
round-trips. Read back, a text property is a ``String`` attribute, a number a ``Number`` one,
such an object its own type, and other properties of natively sent messages are left out.

A message's size is SQS's: its body's UTF-8 and, per attribute, its name, data type and value
(a binary value's bytes), held to the queue's MaximumMessageSize.

A MessageGroupId is the message's native ``group``: on a FIFO queue (ordered by group) it is
required and orders the message; on a standard queue it is carried (SQS's fair queues take it, and
kombu sends it). A FIFO message's MessageDeduplicationId, or with ContentBasedDeduplication the
SHA-256 of its body, is its native ``dedupe_id``: a repeat within the de-duplication window (the
server's ``dedupe_window_s``, 5 minutes as SQS's) answers the first's id and is never delivered.
Its SequenceNumber is the send sequence ending its id, in 20 digits: it grows within the queue.
On a queue whose DeduplicationScope is ``messageGroup`` the native ``dedupe_id`` is the SQS one
behind a digest of its group and a space (which no SQS id holds), so the same id in two groups is
two messages; a receive shows the SQS id (``sqs_dedupe_id``).

Two system attributes are properties of names SQS's attribute rule cannot give (a colon), kept out
of MessageAttributes: ``sqs:sender``, the id of the API key that sent the message (its SenderId; a
message sent natively has none and reads as sent by the tenant's account, as one an AWS account's
root user sends does), and ``sqs:trace_header``, the AWSTraceHeader a send gives in its
MessageSystemAttributes (an X-Ray trace header, the one system attribute SQS lets a sender set).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from atomq.api.sqs.checksums import check_body, md5_of_attributes, md5_of_body
from atomq.api.sqs.context import SqsQueue, integer, required
from atomq.api.sqs.queue_attributes import MAX_DELAY_S
from atomq.errors import SqsError
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from atomq.platform.queues.names import GROUP

MAX_ATTRIBUTES = 10
SENDER_PROPERTY = "sqs:sender"
TRACE_PROPERTY = "sqs:trace_header"
SYSTEM_PROPERTIES = (SENDER_PROPERTY, TRACE_PROPERTY)
"""The properties that carry a message's SenderId and AWSTraceHeader (see the module's notes)."""
TRACE_HEADER = re.compile(r"(?=(?:.*;)?Root=1-[0-9a-fA-F]{8}-[0-9a-fA-F]{24}(?:;|$))[!-~]{1,1024}")
"""An X-Ray trace header: ``key=value`` fields of printable ASCII joined by ``;``, one of them its
Root (``1-<8 hex: time>-<24 hex>``), at most 1,024 characters (what the stored property may add
stays within ``queue_attributes.ATTRIBUTES_ALLOWANCE``)."""
ATTRIBUTE_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!(?i:aws\.|amazon\.))[A-Za-z0-9_.-]{1,256}(?<!\.)")
DATA_TYPE = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]{1,250})?")


def checked_attributes(raw: Any) -> dict[str, dict[str, Any]]:
    """Checked MessageAttributes, each ``{"DataType", "StringValue" | "BinaryValue" (base64 text)}``."""
    if not isinstance(raw, dict) or len(raw) > MAX_ATTRIBUTES:
        raise SqsError("InvalidParameterValue", f"MessageAttributes maps at most {MAX_ATTRIBUTES} names to values")
    out = {}
    for name, value in raw.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]*", name):  # SQS's own words for a character outside its set
            raise SqsError("InvalidParameterValue", f"The message attribute name '{name}' is invalid. Attribute name "
                                                    "can contain A-Z, a-z, 0-9, underscore (_), hyphen (-), and period "
                                                    "(.) characters.")
        if not ATTRIBUTE_NAME.fullmatch(name):
            raise SqsError("InvalidParameterValue", f"message attribute name {name!r} breaks SQS's rule: letters, "
                                                    "digits, _ - and ., not starting with AWS. or Amazon.")
        data_type = value.get("DataType") if isinstance(value, dict) else None
        if not isinstance(data_type, str) or not DATA_TYPE.fullmatch(data_type):
            raise SqsError("InvalidParameterValue", f"The message attribute '{name}' has an invalid message attribute "
                                                    "type, the set of supported type prefixes is Binary, Number, and "
                                                    "String.")
        kind = "BinaryValue" if data_type.startswith("Binary") else "StringValue"
        given = value.get(kind)
        if not isinstance(given, str) or not given:
            raise SqsError("InvalidParameterValue", f"message attribute {name} of type {data_type} needs a "
                                                    f"non-empty {kind}")
        if kind == "BinaryValue":
            try:
                base64.b64decode(given, validate=True)
            except ValueError:  # binascii.Error, or text that is not ASCII
                raise SqsError("InvalidParameterValue", f"message attribute {name}'s BinaryValue is not "
                                                        "base64") from None
        else:
            check_body(given, f"MessageAttributes.{name}")
        out[name] = {"DataType": data_type, kind: given}
    return out


def checked_trace_header(raw: Any) -> str | None:
    """The AWSTraceHeader of a send's MessageSystemAttributes (None without one): the one name SQS
    takes there, a ``String`` holding an X-Ray trace header; InvalidParameterValue else."""
    if not isinstance(raw, dict):
        raise SqsError("InvalidParameterValue", "MessageSystemAttributes maps AWSTraceHeader to its value")
    unknown = [name for name in raw if name != "AWSTraceHeader"]
    if unknown:
        raise SqsError("InvalidParameterValue", f"Message system attribute name '{unknown[0]}' is invalid.")
    if not raw:
        return None
    value = raw["AWSTraceHeader"]
    if not isinstance(value, dict) or value.get("DataType") != "String":
        raise SqsError("InvalidParameterValue", "Message system attribute 'AWSTraceHeader' has an invalid data "
                                                "type: it is a String.")
    header = value.get("StringValue")
    if not isinstance(header, str) or not TRACE_HEADER.fullmatch(header):
        raise SqsError("InvalidParameterValue", "Value for message system attribute AWSTraceHeader is invalid: "
                                                "it is an X-Ray trace header (Root=1-<8 hex>-<24 hex>;...), "
                                                "at most 1,024 characters.")
    return header


def as_property(attribute: dict[str, Any]) -> Any:
    return attribute["StringValue"] if attribute["DataType"] == "String" else attribute


def as_attribute(value: Any) -> dict[str, Any] | None:
    """A message property as the SQS attribute it reads as, or None for one SQS cannot carry: the
    property was sent natively, where nothing checked it against SQS's rules (a BinaryValue that is
    not base64 would otherwise fail every receive of its message, and of the messages got with it)."""
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"DataType": "Number", "StringValue": json.dumps(value)}
    if isinstance(value, dict) and isinstance(value.get("DataType"), str) and DATA_TYPE.fullmatch(value["DataType"]):
        kind = "BinaryValue" if value["DataType"].startswith("Binary") else "StringValue"
        given = value.get(kind)
        if not isinstance(given, str):
            return None
        if kind == "BinaryValue":
            try:
                base64.b64decode(given, validate=True)
            except ValueError:  # binascii.Error, or text that is not ASCII
                return None
        return {"DataType": value["DataType"], kind: given}
    return None


def md5_attributes(attributes: dict[str, dict[str, Any]]) -> str | None:
    return md5_of_attributes({name: {**a, "BinaryValue": base64.b64decode(a["BinaryValue"])} if "BinaryValue" in a
                              else a for name, a in attributes.items()})



def size_of(body: bytes, attributes: dict[str, dict[str, Any]]) -> int:
    """The message's size as SQS counts it (``body`` in UTF-8)."""
    size = len(body)
    for name, a in attributes.items():
        value = base64.b64decode(a["BinaryValue"]) if "BinaryValue" in a else a["StringValue"].encode()
        size += len(name.encode()) + len(a["DataType"].encode()) + len(value)
    return size


@dataclass(frozen=True)
class Outgoing:
    """A message a send checked: what is stored, and what the answer says of it."""

    message: OutgoingMessage
    answer: dict[str, Any]
    size: int


def sequence_number(message_id: str) -> str:
    """A message's SequenceNumber: the send sequence ending its id, in 20 digits as SQS writes one."""
    return f"{int(message_id.rsplit('-', 1)[1]):020d}"


def _fifo_id(params: dict[str, Any], name: str) -> str | None:
    """MessageGroupId or MessageDeduplicationId: 1 to 128 of letters, digits and punctuation."""
    value = params.get(name)
    if value is not None and (not isinstance(value, str) or not GROUP.fullmatch(value)):
        raise SqsError("InvalidParameterValue", f"Value {str(value)[:128]} for parameter {name} is invalid. Reason: "
                                                f"{name} can contain 1 to 128 alphanumeric and punctuation "
                                                "characters.")
    return value


def check_fifo_ids(queue: SqsQueue, params: dict[str, Any]) -> None:
    """A FIFO queue's send names a MessageGroupId, and a MessageDeduplicationId unless the queue has
    ContentBasedDeduplication: SQS refuses a batch whole when an entry lacks one."""
    if params.get("MessageGroupId") is None:
        raise SqsError("MissingParameter", "The request must contain the parameter MessageGroupId.")
    if params.get("MessageDeduplicationId") is None and not queue.content_dedupe:
        raise SqsError("InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or "
                                                "MessageDeduplicationId provided explicitly")


def _group_and_dedupe(queue: SqsQueue, params: dict[str, Any], body: str) -> tuple[str | None, str | None]:
    """The message's group and de-duplication id (see the module's notes); a standard queue takes no
    MessageDeduplicationId."""
    group = _fifo_id(params, "MessageGroupId")
    dedupe = _fifo_id(params, "MessageDeduplicationId")
    if not queue.fifo:
        if dedupe is not None:
            raise SqsError("InvalidParameterValue", f"Value {dedupe} for parameter MessageDeduplicationId is "
                                                    "invalid. Reason: The request include parameter that is not "
                                                    "valid for this queue type.")
        return group, None
    check_fifo_ids(queue, params)
    return group, native_dedupe_id(queue, group, dedupe or hashlib.sha256(body.encode()).hexdigest())


def native_dedupe_id(queue: SqsQueue, group: str | None, dedupe: str) -> str:
    """The native ``dedupe_id`` of a FIFO send (see the module's notes); the group's digest keeps it
    within the native limit whatever the lengths of the two ids."""
    if queue.dedupe_scope != "messageGroup":
        return dedupe
    return f"{hashlib.sha256((group or '').encode()).hexdigest()[:32]} {dedupe}"


def sqs_dedupe_id(native: str) -> str:
    """The MessageDeduplicationId a native ``dedupe_id`` reads as: without its group's digest, if any."""
    return native.rsplit(" ", 1)[-1]


def outgoing(queue: SqsQueue, params: dict[str, Any], sender: str) -> Outgoing:
    """A SendMessage's (or a batch entry's) message from API key ``sender``, checked: its body,
    attributes, size, delay, group and de-duplication id, and trace header (which, as SQS's system
    attributes, counts nothing towards the size)."""
    body = required(params, "MessageBody")
    if not isinstance(body, str) or not body:
        raise SqsError("MissingParameter", "MessageBody must be a non-empty string")
    check_body(body)
    group, dedupe = _group_and_dedupe(queue, params, body)
    delay_s = None  # the queue's DelaySeconds
    if "DelaySeconds" in params:
        delay_s = integer(params, "DelaySeconds", 0, MAX_DELAY_S, 0)
        if queue.fifo and delay_s:  # its messages keep their order: only the queue's delay applies (0 is taken)
            raise SqsError("InvalidParameterValue", f"Value {delay_s} for parameter DelaySeconds is invalid. Reason: "
                                                    "The request include parameter that is not valid for this queue "
                                                    "type.")
    attributes = checked_attributes(params["MessageAttributes"]) if "MessageAttributes" in params else {}
    trace = checked_trace_header(params["MessageSystemAttributes"]) if "MessageSystemAttributes" in params else None
    encoded = body.encode()
    size = size_of(encoded, attributes)
    if size > queue.max_size:
        raise SqsError("InvalidParameterValue", "One or more parameters are invalid. Reason: Message must be "
                                                f"shorter than {queue.max_size} bytes.", size=size)
    answer = {"MD5OfMessageBody": md5_of_body(encoded)}
    md5 = md5_attributes(attributes) if attributes else None
    if md5 is not None:
        answer["MD5OfMessageAttributes"] = md5
    properties = {n: as_property(a) for n, a in attributes.items()}
    properties[SENDER_PROPERTY] = sender
    if trace is not None:
        properties[TRACE_PROPERTY] = trace
        answer["MD5OfMessageSystemAttributes"] = md5_attributes(
            {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}) or ""
    message = OutgoingMessage(documents=(OutgoingDocument(body),), properties=properties, delay_s=delay_s,
                              group=group, dedupe_id=dedupe)
    return Outgoing(message, answer, size)
