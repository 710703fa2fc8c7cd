"""CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, GetQueueAttributes, SetQueueAttributes,
PurgeQueue: an SQS queue is the tenant's point-to-point queue of that name, the same one the native
API sees. What each attribute is natively: ``queue_attributes``.
"""

from __future__ import annotations

from typing import Any

from atomq import defaults
from atomq.api.sqs import queue_attributes as qa
from atomq.api.sqs.context import FIFO_SUFFIX, SQS_QUEUE_NAME, SqsContext, integer, required, string_list
from atomq.api.sqs.errors import NO_SUCH_QUEUE
from atomq.api.sqs.tags import checked_tags, tag_fields
from atomq.errors import InvalidInput, SqsError
from atomq.platform.models import QueueModel

MAX_LIST_RESULTS = 1000


def create_queue(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Creates the queue with its attributes and tags, or finds it when it exists with the
    attributes given (QueueNameExists, legacy code QueueAlreadyExists, naming one that differs)."""
    name = required(params, "QueueName")
    attributes = params.get("Attributes", {})
    fifo = isinstance(attributes, dict) and "FifoQueue" in attributes and qa.fifo_flag(attributes["FifoQueue"])
    if not isinstance(name, str) or not SQS_QUEUE_NAME.fullmatch(name) or name.endswith(FIFO_SUFFIX) != fifo:
        if fifo or (isinstance(name, str) and name.endswith(FIFO_SUFFIX)):
            raise SqsError("InvalidParameterValue", "The name of a FIFO queue can only include alphanumeric "
                                                    "characters, hyphens, or underscores, must end with .fifo suffix "
                                                    "and be 1 to 80 in length. A FIFO queue is made with the "
                                                    "attribute FifoQueue true.")
        raise SqsError("InvalidParameterValue", "Can only include alphanumeric characters, hyphens, or underscores. "
                                                "1 to 80 in length")
    values = qa.checked(ctx, attributes, fifo)
    tags = checked_tags(params.get("tags", {}), "tags")
    s = ctx.services
    fields = s.queues.fields.read(ctx.tenant, name, ())
    if fields is None:
        s.check_creation(f"queue {name}", lambda: s.queues.get_queue(ctx.tenant, name), ctx.tenant)
        native, extra = qa.new_queue_settings(values, fifo)
        try:
            s.queues.put_queue(ctx.tenant, name, QueueModel.POINT_TO_POINT.value, **native,
                               extra_fields={**extra, **tag_fields(tags)})
        except InvalidInput as exc:
            raise qa.refused_policy(ctx, exc, values) from None
        ctx.forget(name)
        return {"QueueUrl": ctx.queue_url(name)}
    queue = ctx.named(name)
    other = qa.differing(ctx, s.queues.get_queue(ctx.tenant, name), queue, values)
    if other is not None:
        raise SqsError("QueueNameExists", f"queue {name} exists with another {other}")
    return {"QueueUrl": ctx.queue_url(name)}


def get_queue_attributes(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    queue = ctx.queue(params)
    names = string_list(params, "AttributeNames")
    attributes = qa.described(ctx, ctx.services.queues.get_queue(ctx.tenant, queue.name), queue, names)
    return {"Attributes": attributes} if attributes else {}


def set_queue_attributes(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Sets the attributes given: the native settings and the SQS fields in one script."""
    queue = ctx.queue(params)
    values = qa.checked(ctx, required(params, "Attributes"), queue.fifo)
    native = qa.native_settings(values)
    if native:
        try:
            ctx.services.queues.put_queue(ctx.tenant, queue.name, QueueModel.POINT_TO_POINT.value, **native,
                                          extra_fields=qa.sqs_fields(values))
        except InvalidInput as exc:
            raise qa.refused_policy(ctx, exc, values) from None
    else:
        ctx.services.queues.fields.set(ctx.tenant, queue.name, qa.sqs_fields(values))
    ctx.forget(queue.name)
    return {}


def purge_queue(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Deletes every message of the queue, waiting or in flight (its dead letters stay)."""
    ctx.services.queues.delete_messages(ctx.tenant, ctx.queue_of(params), all=True)
    return {}


def get_queue_url(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    name = required(params, "QueueName")
    owner = params.get("QueueOwnerAWSAccountId")
    if not isinstance(name, str) or (owner is not None and owner != ctx.account_id):
        raise SqsError("QueueDoesNotExist", NO_SUCH_QUEUE)
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
    name = ctx.queue_of(params)
    ctx.services.queues.delete_queue(ctx.tenant, name)
    ctx.forget(name)
    return {}
