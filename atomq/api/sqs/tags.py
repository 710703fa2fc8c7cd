"""TagQueue, UntagQueue, ListQueueTags: a queue's tags are fields of its config (``sqs:tag:<key>``),
so they go with the queue, and each change is one script that holds SQS's bound of 50 tags.

Tags are SQS's rule: keys of 1 to 128 characters, not starting with ``aws:``, values of 0 to 256;
natively they are not read by anything (they label a queue for its owner's tools).
"""

from __future__ import annotations

from typing import Any

from atomq.api.sqs.context import TAG_PREFIX, SqsContext, required, string_list
from atomq.api.sqs.errors import NO_SUCH_QUEUE
from atomq.errors import QuotaExceeded, SqsError

MAX_TAGS = 50
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 256


def checked_tags(raw: Any, name: str = "Tags") -> dict[str, str]:
    """Tags as SQS takes them; InvalidParameterValue naming the first that breaks its rule."""
    if not isinstance(raw, dict):
        raise SqsError("InvalidParameterValue", f"{name} must map tag keys to values")
    if len(raw) > MAX_TAGS:
        raise SqsError("InvalidParameterValue", f"a queue has at most {MAX_TAGS} tags")
    for key, value in raw.items():
        if not 1 <= len(key) <= MAX_KEY_CHARS or key.lower().startswith("aws:"):
            raise SqsError("InvalidParameterValue", f"tag key {key[:40]!r} must have 1 to {MAX_KEY_CHARS} "
                                                    "characters and not start with aws:")
        if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
            raise SqsError("InvalidParameterValue", f"the value of tag {key} must be a string of at most "
                                                    f"{MAX_VALUE_CHARS} characters")
    return raw


def tag_fields(tags: dict[str, str]) -> dict[str, str | int]:
    """The config fields of ``tags``."""
    return {TAG_PREFIX + key: value for key, value in tags.items()}


def tag_queue(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params)
    raw = required(params, "Tags")
    if isinstance(raw, dict) and len(raw) > MAX_TAGS:
        raise SqsError("InvalidParameterValue", f"Too many tags added for queue {name}.")
    tags = checked_tags(raw)
    if not tags:  # as SQS: a TagQueue that tags nothing is refused
        raise SqsError("MissingParameter", "The request must contain the parameter Tags.")
    try:
        ctx.services.queues.fields.set(ctx.tenant, name, tag_fields(tags), prefix=TAG_PREFIX, most=MAX_TAGS)
    except QuotaExceeded:
        raise SqsError("InvalidParameterValue", f"Too many tags added for queue {name}.") from None
    return {}


def untag_queue(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params)
    required(params, "TagKeys")
    keys = string_list(params, "TagKeys")
    if not keys or not all(1 <= len(key) <= MAX_KEY_CHARS for key in keys):
        raise SqsError("InvalidParameterValue", "Tag keys must be between 1 and 128 characters in length.")
    ctx.services.queues.fields.delete(ctx.tenant, name, [TAG_PREFIX + key for key in keys], prefix=TAG_PREFIX)
    return {}


def list_queue_tags(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = ctx.queue_of(params)
    tags = ctx.services.queues.fields.with_prefix(ctx.tenant, name, TAG_PREFIX)
    if tags is None:
        raise SqsError("QueueDoesNotExist", NO_SUCH_QUEUE, queue=name)
    return {"Tags": dict(sorted(tags.items()))} if tags else {}
