"""ListDeadLetterSourceQueues, StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask:
SQS's dead letter queues and their redrive, on the native ``dead_letter_queue`` and move tasks
(``atomq.platform.queues.move_tasks``).

A move task runs in the node's maintenance, a step a second, and outlives the node that started
it. Its refusals are SQS's, as AWS words them: a source that is not some queue's dead letter
queue, a second task from one source, a TaskHandle that is not one.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from atomq import defaults
from atomq.api.sqs.context import SqsContext, integer, required
from atomq.api.sqs.redrive_policies import target_name
from atomq.errors import Conflict, InvalidInput, NotFound, SqsError
from atomq.platform.models import QueueInfo, QueueModel
from atomq.platform.queues.move_tasks import MAX_RATE, MoveTask, MoveTaskStatus

MAX_SOURCES_LISTED = 1000
MAX_TASKS_LISTED = 10
FAILURE_REASONS = {"no_queue": "AWS.SimpleQueueService.NonExistentQueue"}
"""What ListMessageMoveTasks gives as the FailureReason of a task that failed for these reasons
(as SQS does for a queue deleted under a task); the others read as the failure in words."""


def _queues(ctx: SqsContext) -> list[QueueInfo]:
    """The tenant's point-to-point queues, by name."""
    out: list[QueueInfo] = []
    cursor = None
    while True:
        page = ctx.services.queues.list_queues(ctx.tenant, defaults.PAGE_LIMIT, cursor)
        out += [q for q in page if q.model is QueueModel.POINT_TO_POINT]
        if len(page) < defaults.PAGE_LIMIT:
            return out
        cursor = page[-1].name


def _sources_of(ctx: SqsContext, name: str) -> list[str]:
    """The tenant's queues whose dead letters move to queue ``name``, by name."""
    return [q.name for q in _queues(ctx) if q.dead_letter_queue == name]


def list_dead_letter_source_queues(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """The queues whose RedrivePolicy (``dead_letter_queue``) names this one; ``NextToken`` is the
    last name of the page, given when ``MaxResults`` is."""
    queue = ctx.queue(params)
    limit = integer(params, "MaxResults", 1, MAX_SOURCES_LISTED, MAX_SOURCES_LISTED)
    after = params.get("NextToken")
    if after is not None and not isinstance(after, str):
        raise SqsError("InvalidParameterValue", "NextToken is a string")
    names = [n for n in _sources_of(ctx, queue.name) if after is None or n > after]
    out: dict[str, Any] = {"queueUrls": [ctx.queue_url(n) for n in names[:limit]]}
    if len(names) > limit and "MaxResults" in params:
        out["NextToken"] = names[limit - 1]
    return out


def _queue_of_arn(ctx: SqsContext, params: dict[str, Any], name: str) -> str:
    """The point-to-point queue ARN parameter ``name`` names; ResourceNotFoundException when there is none."""
    arn = params[name]
    if not isinstance(arn, str) or len(arn.split(":")) != 6 or not arn.startswith("arn:"):
        raise SqsError("InvalidParameterValue", f"You must use this format to specify the {name}: "
                                                "arn:<partition>:<service>:<region>:<account-id>:<resource-id>")
    queue = target_name(ctx, arn)
    try:
        if queue is not None and ctx.services.queues.get_queue(ctx.tenant, queue).model is QueueModel.POINT_TO_POINT:
            return queue
    except (NotFound, InvalidInput):
        pass
    raise SqsError("ResourceNotFoundException", f"The resource that you specified for the {name} parameter "
                                                "doesn't exist.")


def start_message_move_task(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Starts moving a dead letter queue's messages back to their sources, or to ``DestinationArn``,
    at most ``MaxNumberOfMessagesPerSecond`` a second (as fast as the maintenance goes without)."""
    required(params, "SourceArn")
    source = _queue_of_arn(ctx, params, "SourceArn")
    destination = _queue_of_arn(ctx, params, "DestinationArn") if params.get("DestinationArn") else None
    rate = None
    if params.get("MaxNumberOfMessagesPerSecond") is not None:
        rate = integer(params, "MaxNumberOfMessagesPerSecond", 1, MAX_RATE, 1)
    if not _sources_of(ctx, source):
        raise SqsError("InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue.")
    try:
        task = ctx.services.queues.start_move_task(ctx.tenant, source, destination, rate)
    except Conflict:
        raise SqsError("InvalidParameterValue", "There is already a task running. Only one active task is allowed "
                                                "for a source queue arn at a given time.") from None
    except InvalidInput as exc:  # the destination is the source itself
        raise SqsError("InvalidParameterValue", exc.message) from None
    return {"TaskHandle": _handle(ctx, task)}


def _handle(ctx: SqsContext, task: MoveTask) -> str:
    """A task's TaskHandle: its id and its source's ARN, as SQS's handles carry them."""
    raw = json.dumps({"taskId": task.id, "sourceArn": ctx.arn(task.source)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _entry(ctx: SqsContext, task: MoveTask) -> dict[str, Any]:
    out: dict[str, Any] = {"Status": task.status.value.upper(), "SourceArn": ctx.arn(task.source),
                           "ApproximateNumberOfMessagesMoved": task.moved,
                           "ApproximateNumberOfMessagesToMove": task.to_move,
                           "StartedTimestamp": round(task.started_at * 1000)}
    if task.status is MoveTaskStatus.RUNNING:
        out["TaskHandle"] = _handle(ctx, task)
    if task.destination is not None:
        out["DestinationArn"] = ctx.arn(task.destination)
    if task.rate is not None:
        out["MaxNumberOfMessagesPerSecond"] = task.rate
    if task.failure is not None:
        out["FailureReason"] = FAILURE_REASONS.get(task.failure, task.failure_text)
    return out


def list_message_move_tasks(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """The tasks of a source queue, the newest first: ``MaxResults`` of them (1 to 10, 1 by default)."""
    required(params, "SourceArn")
    source = _queue_of_arn(ctx, params, "SourceArn")
    most = integer(params, "MaxResults", 1, MAX_TASKS_LISTED, 1)
    return {"Results": [_entry(ctx, t) for t in ctx.services.queues.move_tasks(ctx.tenant, source, most)]}


def cancel_message_move_task(ctx: SqsContext, params: dict[str, Any]) -> dict[str, Any]:
    """Stops a running task at once: nothing moves after the answer, which says how many did."""
    handle = required(params, "TaskHandle")
    try:
        held = json.loads(base64.urlsafe_b64decode(handle.encode()))
        task_id, arn = held["taskId"], held["sourceArn"]
    except (AttributeError, TypeError, KeyError, ValueError, binascii.Error):
        raise SqsError("InvalidParameterValue", "Value for parameter TaskHandle is invalid.") from None
    source = _queue_of_arn(ctx, {"SourceArn": arn}, "SourceArn")
    try:
        task, was_running = ctx.services.queues.cancel_move_task(ctx.tenant, task_id)
    except (NotFound, InvalidInput):
        task, was_running = None, False
    if task is None or task.source != source:
        raise SqsError("ResourceNotFoundException", "Task does not exist.")
    if not was_running:
        raise SqsError("InvalidParameterValue", "Only a task with a Status of RUNNING can be cancelled; this one is "
                                                f"{task.status.value.upper()}.")
    return {"ApproximateNumberOfMessagesMoved": task.moved}
