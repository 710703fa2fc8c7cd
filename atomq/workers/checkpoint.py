"""The seed's version 3 de-duplication, for a process that takes it up: a checkpoint of what the
last execution processed, published to a topic that a last-value queue holds, and read (browsed,
never taken) when redelivered messages arrive.

The seed's checkpoint is the last message id, and a redelivered message at or before it counts as
processed: sound only while one batch at a time is processed in send order. Executions may run
side by side, and one that dies after a later batch finished would have its messages taken for
processed and lost; so this checkpoint names every message the execution processed (with the last
one, as the seed's does), and a redelivered message counts as processed only when it names it.
The execution that died is recognised when its checkpoint is the newest, as on an exclusive queue
whose listener runs one execution at a time (the seed's setup); otherwise its messages are
processed again and their outputs' dedupe ids keep them single. (atomq also recognises a message
whose execution finished but whose ack was lost, without any checkpoint: the listener records what
it processed.) Settings: ``checkpoint_queue``, the last-value queue to read, and
``checkpoint_topic``, where to publish; both or neither.
"""

from __future__ import annotations

import json
from typing import Any

from atomq.errors import InvalidInput
from atomq.platform.queues.names import check_queue_name
from atomq.platform.queues.topics import check_topic
from atomq.workers.context import ExecutionContext, InputMessage

SETTINGS = ("checkpoint_queue", "checkpoint_topic")


def validate(settings: dict[str, Any]) -> None:
    """Both checkpoint settings or neither, each well formed."""
    given = [name for name in SETTINGS if name in settings]
    if given and len(given) != len(SETTINGS):
        missing = next(name for name in SETTINGS if name not in settings)
        raise InvalidInput("checkpoint_queue and checkpoint_topic go together", field=f"settings.{missing}")
    if given:
        check_queue_name(settings["checkpoint_queue"], field="settings.checkpoint_queue")
        check_topic(settings["checkpoint_topic"], field="settings.checkpoint_topic")


def sequence(message_id: str) -> int:
    """A message id's place in its tenant's send order (the number after the dash)."""
    return int(message_id.rsplit("-", 1)[1])


def last_checkpoint(ctx: ExecutionContext) -> dict[str, Any] | None:
    """The newest checkpoint, or None when there is none (or it is not one)."""
    current = ctx.browse(ctx.settings["checkpoint_queue"])
    if not current:
        return None
    body = json.loads(current[-1].documents[0].data)
    return body if isinstance(body, dict) and isinstance(body.get("message_ids"), list) else None


def unprocessed(ctx: ExecutionContext) -> list[InputMessage]:
    """The batch's messages to process: a redelivered one the checkpoint shows was processed
    already is logged and left out (it is acked with the batch)."""
    if "checkpoint_queue" not in ctx.settings or not any(m.redelivered for m in ctx.messages):
        return list(ctx.messages)
    mark = last_checkpoint(ctx)
    if mark is None:
        return list(ctx.messages)
    done = set(mark["message_ids"])
    todo = []
    for message in ctx.messages:
        if message.redelivered and message.id in done:
            ctx.log.info("message %s is redelivered and named by the checkpoint (last message %s): "
                         "processed already", message.id, mark.get("last_message_id"))
        else:
            todo.append(message)
    return todo


def record(ctx: ExecutionContext, processed: list[InputMessage]) -> None:
    """Publishes the checkpoint of the messages processed, after their outputs are stored: a
    checkpoint never names a message whose outputs are not. (It is stored with the execution's
    last outputs, or at the process's next ``ctx.flush()``.)"""
    if "checkpoint_topic" not in ctx.settings or not processed:
        return
    ctx.flush()
    last = max(processed, key=lambda m: sequence(m.id))
    body = {"last_message_id": last.id, "message_ids": [m.id for m in processed]}
    ctx.publish(ctx.settings["checkpoint_topic"], [json.dumps(body)], source=last)
