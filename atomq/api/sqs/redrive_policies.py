"""The queue attributes RedrivePolicy and RedriveAllowPolicy, and what each is natively.

- **RedrivePolicy** ``{"deadLetterTargetArn", "maxReceiveCount"}`` is the queue's native
  ``dead_letter_queue`` (the target's name) and ``max_redeliveries`` (``maxReceiveCount - 1``):
  a message received that many times without a delete moves to the target (on a queue made
  through SQS every receive counts, also one given back with a visibility of 0). Taking it off
  (``""`` or ``{}``) sends the queue's dead letters back to its own dead letters, after
  ``SQS_MAX_REDELIVERIES`` receives.
- **RedriveAllowPolicy** ``{"redrivePermission": "allowAll" | "denyAll" | "byQueue",
  "sourceQueueArns"}`` is kept as given (``ALLOW_FIELD``) and, as the names of the tenant's queues it
  allows, in the native field ``dead_letter_targets.SOURCES_FIELD``, which the native setting of a
  ``dead_letter_queue`` is held to as well (``queue_put.lua``): it decides which queues may name
  this one, when they name it; it does not undo a setting made before it.

An ARN of another account names no queue of this tenant: it reads as a queue that does not exist.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from atomq.api.sqs.context import ALLOW_FIELD, SQS_QUEUE_NAME, SqsContext
from atomq.errors import SqsError
from atomq.platform.queues.dead_letter_targets import SOURCES_FIELD

MAX_RECEIVE_RANGE = (1, 1000)
MAX_SOURCE_ARNS = 10
PERMISSIONS = ("allowAll", "denyAll", "byQueue")


@dataclass(frozen=True)
class Redrive:
    """A RedrivePolicy: the target's name and maxReceiveCount; target None takes the policy off."""

    target: str | None
    max_receives: int | None = None

    def text(self, ctx: SqsContext) -> str | None:
        """The attribute's value as GetQueueAttributes gives it (None: the queue has none)."""
        if self.target is None:
            return None
        return json.dumps({"deadLetterTargetArn": ctx.arn(self.target), "maxReceiveCount": self.max_receives})


@dataclass(frozen=True)
class AllowPolicy:
    """A RedriveAllowPolicy as given (``text``, "" for none) and the source names it allows natively."""

    text: str
    sources: str


def invalid(attribute: str, value: Any, reason: str) -> SqsError:
    """SQS's words for an attribute value it refuses."""
    return SqsError("InvalidParameterValue", f"Value {value} for parameter {attribute} is invalid. Reason: {reason}",
                    attribute=attribute)


def _policy_object(attribute: str, value: Any) -> dict[str, Any] | None:
    """The JSON object a policy attribute holds (a string, or an object as some clients send);
    None for "" or {}, which take the policy off."""
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except ValueError:
            raise invalid(attribute, value, "it is not a JSON object.") from None
    if not isinstance(value, dict):
        raise invalid(attribute, value, "it is not a JSON object.")
    return value or None


def target_name(ctx: SqsContext, arn: Any) -> str | None:
    """The name of the tenant's queue an ARN names (``arn:<partition>:sqs:<region>:<account>:<name>``);
    None when it is malformed or of another account."""
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or parts[4] != ctx.account_id:
        return None
    return parts[5] if SQS_QUEUE_NAME.fullmatch(parts[5]) else None


def checked_redrive(ctx: SqsContext, value: Any) -> Redrive:
    policy = _policy_object("RedrivePolicy", value)
    if policy is None:
        return Redrive(None)
    arn, count = policy.get("deadLetterTargetArn"), policy.get("maxReceiveCount")
    if not isinstance(arn, str) or not arn:
        raise invalid("RedrivePolicy", value, "the deadLetterTargetArn is missing.")
    low, high = MAX_RECEIVE_RANGE
    if isinstance(count, str) and count.strip().isdigit():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high:
        raise invalid("RedrivePolicy", value, f"Invalid value for maxReceiveCount: {count}, valid values are from "
                                              f"{low} to {high} both inclusive.")
    name = target_name(ctx, arn)
    if name is None:
        raise invalid("RedrivePolicy", value, "Dead-letter target does not exist.")
    return Redrive(name, count)


def checked_allow(ctx: SqsContext, value: Any) -> AllowPolicy:
    policy = _policy_object("RedriveAllowPolicy", value)
    if policy is None:
        return AllowPolicy("", "*")
    permission, arns = policy.get("redrivePermission"), policy.get("sourceQueueArns")
    if permission not in PERMISSIONS:
        raise invalid("RedriveAllowPolicy", value, "redrivePermission must be allowAll, denyAll or byQueue.")
    if permission != "byQueue":
        if arns is not None:
            raise invalid("RedriveAllowPolicy", value, "sourceQueueArns is given with redrivePermission byQueue only.")
        return AllowPolicy(json.dumps({"redrivePermission": permission}), "*" if permission == "allowAll" else "")
    if (not isinstance(arns, list) or not 1 <= len(arns) <= MAX_SOURCE_ARNS
            or not all(isinstance(a, str) and a for a in arns)):
        raise invalid("RedriveAllowPolicy", value, f"byQueue takes 1 to {MAX_SOURCE_ARNS} sourceQueueArns.")
    names = sorted({n for n in (target_name(ctx, a) for a in arns) if n is not None})
    return AllowPolicy(json.dumps({"redrivePermission": permission, "sourceQueueArns": arns}),
                       "|" + "|".join(names) + "|")


def allow_fields(policy: AllowPolicy) -> dict[str, str | int]:
    """The config fields of a RedriveAllowPolicy."""
    return {ALLOW_FIELD: policy.text, SOURCES_FIELD: policy.sources}
