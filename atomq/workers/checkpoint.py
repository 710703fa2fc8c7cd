"""The seed's version 3 de-duplication, for a process that takes it up: a checkpoint of the last
message an execution processed, published to a topic that a last-value queue holds, and read
(browsed, never taken) when redelivered messages arrive.

It is sound only on an exclusive queue, which delivers in send order also across redelivery: a
redelivered message at or before the checkpoint was processed, and its outputs stored, by an
execution that died before its messages were acked. (atomq also recognises a message whose
execution finished but whose ack was lost, without any checkpoint: the listener records what it
processed. The checkpoint covers the execution that died before finishing.) Settings:
``checkpoint_queue``, the last-value queue to read, and ``checkpoint_topic``, where to publish;
both or neither.
"""

from __future__ import annotations

import json
from typing import Any

from atomq.errors import InvalidInput
from atomq.platform.names import check_queue_name
from atomq.platform.topics import check_topic
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


def last_processed(ctx: ExecutionContext) -> str | None:
    """The message id the newest checkpoint names, or None when there is none."""
    current = ctx.browse(ctx.settings["checkpoint_queue"])
    if not current:
        return None
    body = json.loads(current[-1].documents[0].data)
    value = body.get("last_message_id") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def unprocessed(ctx: ExecutionContext) -> tuple[list[InputMessage], list[InputMessage]]:
    """The batch split into the messages to process and the redelivered ones the checkpoint
    shows were processed already (logged, and acked with the batch)."""
    if "checkpoint_queue" not in ctx.settings or not any(m.redelivered for m in ctx.messages):
        return list(ctx.messages), []
    last = last_processed(ctx)
    if last is None:
        return list(ctx.messages), []
    todo, recognised = [], []
    for message in ctx.messages:
        if message.redelivered and sequence(message.id) <= sequence(last):
            ctx.log.info("message %s is redelivered and at or before the checkpoint %s: processed already",
                         message.id, last)
            recognised.append(message)
        else:
            todo.append(message)
    return todo, recognised


def record(ctx: ExecutionContext, processed: list[InputMessage]) -> None:
    """Publishes the checkpoint of the last message processed, after the outputs so far are
    stored: a checkpoint never names a message whose outputs are not."""
    if "checkpoint_topic" not in ctx.settings or not processed:
        return
    ctx.flush()
    last = max(processed, key=lambda m: sequence(m.id))
    ctx.publish(ctx.settings["checkpoint_topic"], [json.dumps({"last_message_id": last.id})], source=last)
    ctx.flush()
