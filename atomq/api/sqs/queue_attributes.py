"""SQS's queue attributes on atomq queues: each one that has a native setting is that setting, the
others are fields of the queue's config (``context.QUEUE_FIELDS``).

| attribute | native |
| --- | --- |
| VisibilityTimeout (0–43,200, default 30) | ``ack_timeout_s`` (0 is 10 ms, the least a deadline may be, and a
receive then gives its messages back at once, as one asking for VisibilityTimeout 0 does) |
| MessageRetentionPeriod (60–1,209,600, default 4 days) | ``message_ttl_s``, expired messages discarded |
| MaximumMessageSize (1,024–1,048,576, default 1,048,576) | ``max_message_bytes`` + ``ATTRIBUTES_ALLOWANCE`` |
| ReceiveMessageWaitTimeSeconds (0–20) | a config field: the wait of a receive that names none |
| DelaySeconds (0–900, default 0) | ``delay_s`` (a message's own DelaySeconds is its ``delay_s``) |
| FifoQueue (a name ending in ``.fifo``) | ``ordering: group``, set when the queue is made (a queue's type never changes) |
| ContentBasedDeduplication (FIFO) | a config field: a send without MessageDeduplicationId is de-duplicated by its body's SHA-256 |
| DeduplicationScope (FIFO) | a config field: ``messageGroup`` scopes a send's de-duplication id to its group |
| FifoThroughputLimit (FIFO) | a config field, as set: atomq holds no throughput quota of SQS's |
| RedrivePolicy, RedriveAllowPolicy | ``dead_letter_queue`` and ``max_redeliveries``, and the queues it takes dead letters from: ``redrive_policies`` |

``MaximumMessageSize`` is checked by the front as SQS measures a message (body, attribute names,
types and values); the native limit, which counts the attributes in their stored JSON form, is
set that much higher so the two never disagree on a message SQS would take.

A queue made through SQS also gets what SQS does without asking: a visibility time-out makes the
message visible again at once (``redeliver_now``: no redelivery delay; it counts a receive, as does
a visibility of 0), and, without a RedrivePolicy, a message is dead-lettered only after
``SQS_MAX_REDELIVERIES`` receives (SQS keeps it until its retention ends). Attributes atomq does
not take are refused by name, never ignored: a client must not believe that a setting holds.
"""

from __future__ import annotations

import time
from typing import Any

from atomq import defaults
from atomq.api.sqs.context import (
    ALLOW_FIELD,
    CONTENT_DEDUPE_FIELD,
    CREATED_FIELD,
    DEFAULT_MAX_SIZE,
    LEAST_ACK_TIMEOUT_S,
    MAX_SIZE_FIELD,
    MODIFIED_FIELD,
    REDELIVER_NOW_FIELD,
    SCOPE_FIELD,
    THROUGHPUT_FIELD,
    WAIT_FIELD,
    SqsContext,
    SqsQueue,
    integer,
)
from atomq.api.sqs.redrive_policies import (
    AllowPolicy,
    Redrive,
    allow_fields,
    checked_allow,
    checked_redrive,
    invalid,
)
from atomq.errors import InvalidInput, SqsError
from atomq.platform.models import OnExpire, QueueInfo, QueueOrdering

MAX_VISIBILITY_S = 43_200
DEFAULT_VISIBILITY_S = 30
MAX_DELAY_S = 900
"""SQS's longest DelaySeconds, of a queue or a message (a native delay may be longer)."""
RETENTION_RANGE_S = (60, 1_209_600)
DEFAULT_RETENTION_S = 345_600
SIZE_RANGE = (1_024, 1_048_576)
MAX_WAIT_S = 20
ATTRIBUTES_ALLOWANCE = 4_096
"""What the stored JSON form of ten attributes may add to a message over SQS's measure of it."""
SQS_MAX_REDELIVERIES = defaults.MAX_REDELIVERIES_RANGE[1]

SETTABLE = {
    "VisibilityTimeout": (0, MAX_VISIBILITY_S, DEFAULT_VISIBILITY_S),
    "DelaySeconds": (0, MAX_DELAY_S, 0),
    "MessageRetentionPeriod": (*RETENTION_RANGE_S, DEFAULT_RETENTION_S),
    "MaximumMessageSize": (*SIZE_RANGE, DEFAULT_MAX_SIZE),
    "ReceiveMessageWaitTimeSeconds": (0, MAX_WAIT_S, 0),
}
READ_ONLY = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
             "ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn")
POLICIES = ("RedrivePolicy", "RedriveAllowPolicy")
"""Settable attributes whose values are JSON policies (``redrive_policies``)."""
NOT_TAKEN = {
    "Policy": "atomq's access is its API keys: a queue has no policy",
    "KmsMasterKeyId": "atomq does not encrypt with KMS",
    "KmsDataKeyReusePeriodSeconds": "atomq does not encrypt with KMS",
    "SqsManagedSseEnabled": "atomq does not encrypt messages at rest itself",
}
"""Attributes SQS has and atomq does not take, with why: set, they are refused; asked for, left out."""
FIFO_SETTABLE = {
    "ContentBasedDeduplication": ("false", "true"),
    "DeduplicationScope": ("queue", "messageGroup"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
"""A FIFO queue's own attributes beside FifoQueue, and the values atomq takes (the first: SQS's default)."""


def fifo_flag(value: Any) -> bool:
    """A FifoQueue value: ``true`` or ``false`` in any case; InvalidAttributeValue else."""
    text = str(value).lower()
    if text not in ("true", "false"):
        raise SqsError("InvalidAttributeValue", f"FifoQueue must be true or false, not {str(value)[:40]!r}",
                       attribute="FifoQueue")
    return text == "true"


def _fifo_value(name: str, value: Any, fifo: bool) -> str:
    """A FIFO attribute's value, checked: on a standard queue InvalidAttributeName, as SQS answers."""
    if not fifo:
        raise SqsError("InvalidAttributeName", f"atomq does not take the queue attribute {name} on a standard "
                                               "queue: it applies to FIFO queues (a name ending in .fifo)",
                       attribute=name)
    text = str(value).lower() if name == "ContentBasedDeduplication" else str(value)
    if text not in FIFO_SETTABLE[name]:
        raise SqsError("InvalidAttributeValue", f"{name} must be " + " or ".join(FIFO_SETTABLE[name]),
                       attribute=name)
    return text


def checked(ctx: SqsContext, attributes: Any, fifo: bool) -> dict[str, Any]:
    """The settable attributes given, each checked: numbers, a FIFO queue's (``fifo``) attributes as
    text, and the policies as ``Redrive`` and ``AllowPolicy``; InvalidAttributeName for one atomq
    does not take (a FIFO attribute on a standard queue), InvalidAttributeValue for a value out of
    its range or a FifoQueue that is not the queue's type, InvalidParameterValue for a policy SQS
    would refuse (a FIFO queue's dead letter queue is a FIFO queue, a standard one's standard)."""
    if not isinstance(attributes, dict):
        raise SqsError("InvalidParameterValue", "Attributes must map attribute names to values")
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        if name == "RedrivePolicy":
            redrive = out[name] = checked_redrive(ctx, value)
            if redrive.target is not None and redrive.target.endswith(".fifo") != fifo:
                raise invalid(name, value, "Dead-letter queue must be same type of queue as the source.")
            continue
        if name == "RedriveAllowPolicy":
            out[name] = checked_allow(ctx, value)
            continue
        if name == "FifoQueue":
            if fifo_flag(value) != fifo:
                raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue. Reason: "
                                                        "Modifying queue type is not supported.", attribute=name)
            continue
        if name in FIFO_SETTABLE:
            out[name] = _fifo_value(name, value, fifo)
            continue
        if name in NOT_TAKEN or name in READ_ONLY or name not in SETTABLE:
            why = NOT_TAKEN.get(name) or ("it is read-only" if name in READ_ONLY else "SQS has no such attribute")
            raise SqsError("InvalidAttributeName", f"atomq does not take the queue attribute {name}: {why}",
                           attribute=name)
        low, high, _ = SETTABLE[name]
        try:
            out[name] = integer({name: value}, name, low, high, 0)
        except SqsError as exc:
            raise SqsError("InvalidAttributeValue", exc.message, attribute=name) from None
    retention = ctx.services.current_settings().document_retention_s
    if int(out.get("MessageRetentionPeriod", 0)) > retention:
        raise SqsError("InvalidAttributeValue", f"this node keeps messages at most {retention:g} s (its "
                       "document_retention_s): MessageRetentionPeriod cannot be longer",
                       attribute="MessageRetentionPeriod")
    return out


def native_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The native settings (``put_queue``'s arguments) of the attributes ``values``."""
    out: dict[str, Any] = {}
    if "VisibilityTimeout" in values:
        out["ack_timeout_s"] = values["VisibilityTimeout"] or LEAST_ACK_TIMEOUT_S
    if "MessageRetentionPeriod" in values:
        out["message_ttl_s"] = values["MessageRetentionPeriod"]
    if "DelaySeconds" in values:
        out["delay_s"] = values["DelaySeconds"]
    if "MaximumMessageSize" in values:
        out["max_message_bytes"] = int(values["MaximumMessageSize"]) + ATTRIBUTES_ALLOWANCE
    redrive: Redrive | None = values.get("RedrivePolicy")
    if redrive is not None:
        out["dead_letter_queue"] = redrive.target or ""
        out["max_redeliveries"] = SQS_MAX_REDELIVERIES if redrive.max_receives is None else redrive.max_receives - 1
    return out


def sqs_fields(values: dict[str, Any]) -> dict[str, str | int]:
    """The config fields of the attributes ``values`` that have no native setting, and the time of change."""
    out: dict[str, str | int] = {MODIFIED_FIELD: int(time.time())}
    for name, field in (("MaximumMessageSize", MAX_SIZE_FIELD), ("ReceiveMessageWaitTimeSeconds", WAIT_FIELD),
                        ("ContentBasedDeduplication", CONTENT_DEDUPE_FIELD), ("FifoThroughputLimit", THROUGHPUT_FIELD),
                        ("DeduplicationScope", SCOPE_FIELD)):
        if name in values:
            out[field] = values[name]
    if "RedriveAllowPolicy" in values:
        out.update(allow_fields(values["RedriveAllowPolicy"]))
    return out


def new_queue_settings(values: dict[str, Any], fifo: bool) -> tuple[dict[str, Any], dict[str, str | int]]:
    """The native settings and config fields of a queue made through SQS: the attributes given,
    SQS's defaults for the others, and what SQS does without asking (see the module's notes); a
    FIFO queue is ordered by group."""
    full: dict[str, Any] = {name: values.get(name, default) for name, (_, _, default) in SETTABLE.items()}
    full.update({name: values[name] for name in POLICIES if name in values})
    if fifo:
        full.update({name: values.get(name, allowed[0]) for name, allowed in FIFO_SETTABLE.items()})
    native = {"on_expire": OnExpire.DISCARD, "max_redeliveries": SQS_MAX_REDELIVERIES,
              "ordering": QueueOrdering.GROUP if fifo else QueueOrdering.NONE, **native_settings(full)}
    fields = {**sqs_fields(full), REDELIVER_NOW_FIELD: 1}
    fields[CREATED_FIELD] = fields[MODIFIED_FIELD]
    return native, fields


def refused_policy(ctx: SqsContext, exc: InvalidInput, values: dict[str, Any]) -> SqsError | InvalidInput:
    """A native refusal of the RedrivePolicy's target (``dead_letter_queue``) in SQS's words; others as they are."""
    redrive = values.get("RedrivePolicy")
    if exc.details.get("field") != "dead_letter_queue" or redrive is None:
        return exc
    return invalid("RedrivePolicy", redrive.text(ctx), f"{exc.message}.")


def current(ctx: SqsContext, info: QueueInfo, queue: SqsQueue) -> dict[str, Any]:
    """The settable attributes as the queue holds them now, a FIFO queue's own included."""
    retention = ctx.services.current_settings().document_retention_s
    target = info.dead_letter_queue or None
    out: dict[str, Any] = {
        "VisibilityTimeout": round(info.ack_timeout_s), "DelaySeconds": round(info.delay_s),
        "MessageRetentionPeriod": round(min(info.message_ttl_s or retention, retention)),
        "MaximumMessageSize": queue.max_size, "ReceiveMessageWaitTimeSeconds": queue.wait_s,
        "RedrivePolicy": Redrive(target, info.max_redeliveries + 1 if target else None),
        "RedriveAllowPolicy": queue.fields.get(ALLOW_FIELD, "")}
    if queue.fifo:
        out.update({"FifoQueue": "true", "ContentBasedDeduplication": "true" if queue.content_dedupe else "false",
                    "DeduplicationScope": queue.dedupe_scope,
                    "FifoThroughputLimit": queue.fields.get(THROUGHPUT_FIELD, FIFO_SETTABLE["FifoThroughputLimit"][0])})
    return out


def differing(ctx: SqsContext, info: QueueInfo, queue: SqsQueue, values: dict[str, Any]) -> str | None:
    """The first of the attributes ``values`` the queue holds otherwise; None when it holds them all."""
    now = current(ctx, info, queue)
    return next((name for name, value in values.items()
                 if now[name] != (value.text if isinstance(value, AllowPolicy) else value)), None)


COUNTS = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed")


def counts(ctx: SqsContext, queue: SqsQueue) -> dict[str, int]:
    """The approximate counts as SQS means them, at this moment: visible is what a receive would take
    now (a delivery whose visibility ran out is visible again, whether or not a sweep moved it yet),
    delayed what waits out its send's DelaySeconds, and not visible the rest (deliveries under way,
    and, on a queue made natively, messages waiting out a redelivery delay)."""
    now = ctx.services.queues.counts_now(ctx.tenant, queue.name)
    delayed = min(now.delayed, now.scheduled)  # a delayed message due but not yet moved is visible
    return {"ApproximateNumberOfMessages": now.waiting,
            "ApproximateNumberOfMessagesNotVisible": now.in_flight + now.scheduled - delayed,
            "ApproximateNumberOfMessagesDelayed": delayed}


def described(ctx: SqsContext, info: QueueInfo, queue: SqsQueue, names: list[str]) -> dict[str, str]:
    """GetQueueAttributes' answer: the attributes ``names`` asks for (``All``: every one the queue
    has), as SQS writes them, text; InvalidAttributeName for a name SQS does not know."""
    known = set(SETTABLE) | set(READ_ONLY) | set(NOT_TAKEN) | set(FIFO_SETTABLE) | set(POLICIES) | {"FifoQueue", "All"}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.", attribute=unknown[0])
    held = current(ctx, info, queue)
    redrive, allowed = held.pop("RedrivePolicy").text(ctx), held.pop("RedriveAllowPolicy")
    every: dict[str, Any] = {**held, "QueueArn": ctx.arn(queue.name)}
    if "All" in names or any(n in COUNTS for n in names):
        every.update(counts(ctx, queue))
    if CREATED_FIELD in queue.fields:
        every["CreatedTimestamp"] = queue.fields[CREATED_FIELD]
    if MODIFIED_FIELD in queue.fields:
        every["LastModifiedTimestamp"] = queue.fields[MODIFIED_FIELD]
    if redrive is not None:
        every["RedrivePolicy"] = redrive
    if allowed:
        every["RedriveAllowPolicy"] = allowed
    wanted = every if "All" in names else {n: every[n] for n in names if n in every}
    return {name: str(value) for name, value in wanted.items()}
