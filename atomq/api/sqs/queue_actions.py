"""CreateQueue, GetQueueUrl, ListQueues, DeleteQueue: an SQS queue is the tenant's point-to-point
queue of that name, the same one the native API sees.

Queue attributes: ``VisibilityTimeout`` is the queue's ``ack_timeout_s``; the others of API.md's
list are not taken yet and are refused by name (InvalidAttributeName), never ignored, so a client
never believes a setting holds that does not.
"""

from __future__ import annotations

from typing import Any

from atomq import defaults
from atomq.api.sqs.context import SQS_QUEUE_NAME, SqsContext, integer, required
from atomq.errors import NotFound, SqsError
from atomq.platform.models import QueueModel

MAX_VISIBILITY_S = 43_200
DEFAULT_VISIBILITY_S = 30
MAX_LIST_RESULTS = 1000


def _visibility(attributes: dict[str, Any]) -> int:
    if not isinstance(attributes, dict):
        raise SqsError("InvalidParameterValue", "Attributes must map attribute names to values")
    unknown = sorted(set(attributes) - {"VisibilityTimeout"})
    if unknown:
        raise SqsError("InvalidAttributeName", f"atomq does not take the queue attribute {unknown[0]} yet: "
                                               "VisibilityTimeout only", attribute=unknown[0])
    return integer(attributes, "VisibilityTimeout", 0, MAX_VISIBILITY_S, DEFAULT_VISIBILITY_S)


def create_queue(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Creates the queue, or finds it when it exists with the same attributes (QueueNameExists if not)."""
    name = required(params, "QueueName")
    if not isinstance(name, str) or not SQS_QUEUE_NAME.fullmatch(name):
        raise SqsError("InvalidParameterValue", "QueueName must be 1 to 80 letters, digits, - and _"
                                                " (FIFO queues, ending in .fifo, are not taken yet)")
    visibility = _visibility(params.get("Attributes", {}))
    s = ctx.services
    try:
        existing = s.queues.get_queue(ctx.tenant, name)
    except NotFound:
        s.check_creation(f"queue {name}", lambda: s.queues.get_queue(ctx.tenant, name), ctx.tenant)
        s.queues.put_queue(ctx.tenant, name, QueueModel.POINT_TO_POINT.value, ack_timeout_s=max(visibility, 1))
        return {"QueueUrl": ctx.queue_url(name)}
    ctx.point_to_point(name)
    if "VisibilityTimeout" in params.get("Attributes", {}) and existing.ack_timeout_s != max(visibility, 1):
        raise SqsError("QueueNameExists", f"queue {name} exists with VisibilityTimeout {existing.ack_timeout_s:g}")
    return {"QueueUrl": ctx.queue_url(name)}


def get_queue_url(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = required(params, "QueueName")
    owner = params.get("QueueOwnerAWSAccountId")
    if not isinstance(name, str) or (owner is not None and owner != ctx.account_id):
        raise SqsError("QueueDoesNotExist", "the specified queue does not exist")
    ctx.point_to_point(name)
    return {"QueueUrl": ctx.queue_url(name)}


def list_queues(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """The tenant's point-to-point queues whose names start with ``QueueNamePrefix``, by name;
    ``NextToken`` is the last name of the page."""
    prefix = params.get("QueueNamePrefix", "")
    after = params.get("NextToken")
    limit = integer(params, "MaxResults", 1, MAX_LIST_RESULTS, MAX_LIST_RESULTS)
    if not isinstance(prefix, str) or (after is not None and not isinstance(after, str)):
        raise SqsError("InvalidParameterValue", "QueueNamePrefix and NextToken are strings")
    names: list[str] = []
    cursor = after or None
    while len(names) <= limit:
        page = ctx.services.queues.list_queues(ctx.tenant, defaults.PAGE_LIMIT, cursor)
        names += [q.name for q in page if q.model == QueueModel.POINT_TO_POINT and q.name.startswith(prefix)]
        if len(page) < defaults.PAGE_LIMIT:
            break
        cursor = page[-1].name
    out: dict[str, Any] = {}
    if names:
        out["QueueUrls"] = [ctx.queue_url(n) for n in names[:limit]]
    if len(names) > limit and "MaxResults" in params:
        out["NextToken"] = names[limit - 1]
    return out


def delete_queue(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    ctx.services.queues.delete_queue(ctx.tenant, ctx.queue_of(params))
    return {}
