"""The processes atomq registers itself: ``forward`` and ``echo-service``."""

from __future__ import annotations

import json
import re
from typing import Any

from atomq import defaults
from atomq.client import wire
from atomq.errors import InvalidInput
from atomq.platform.queues.names import check_queue_name
from atomq.platform.queues.topics import check_topic
from atomq.workers import checkpoint
from atomq.workers.context import ExecutionContext


def _queue_setting(settings: dict[str, Any], name: str) -> None:
    if name not in settings:
        raise InvalidInput(f"settings.{name} must name a queue", field=f"settings.{name}")
    check_queue_name(settings[name], field=f"settings.{name}")


def forward(ctx: ExecutionContext) -> None:
    """Every input document goes on as a message of its own to the queue ``settings["to"]``,
    or is published to ``settings["topic"]`` (every queue that attracts it)."""
    for message in ctx.messages:
        for document in message.documents:
            if "topic" in ctx.settings:
                ctx.publish(ctx.settings["topic"], [document], message.properties, source=message)
            else:
                ctx.send(ctx.settings["to"], [document], message.properties, source=message)


def validate_forward(settings: dict[str, Any]) -> None:
    if ("to" in settings) == ("topic" in settings):
        raise InvalidInput("settings name either a queue (to) or a topic (topic) to forward to", field="settings.to")
    if "topic" in settings:
        check_topic(settings["topic"], field="settings.topic")
    else:
        _queue_setting(settings, "to")


forward.validate_settings = validate_forward  # type: ignore[attr-defined]


def _payload(data: bytes) -> dict[str, str]:
    text = wire.utf8_text(data)
    return wire.content_fields(data if text is None else text, "payload")


def _invalid_reason(data: bytes) -> tuple[dict[str, Any] | None, str]:
    """The parsed test message, or None and why it is not one."""
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(parsed, dict):
        return None, f"not a JSON object but a {type(parsed).__name__}"
    if "msgId" not in parsed:
        return None, "the field msgId is missing"
    return parsed, ""


def echo_route(message_id: str, data: bytes) -> tuple[str, str, dict[str, str]]:
    """Where one document goes and what it becomes: ``("echo" | "errors", body, properties)``.

    Shared by the fork and the Spark engines, so both give the same results.
    """
    parsed, reason = _invalid_reason(data)
    if parsed is None:
        error: dict[str, Any] = {"type": "error", "reason": reason, "message_id": message_id, **_payload(data)}
        return "errors", json.dumps(error), {"reason": reason}
    echo = {"type": "echo", "msgId": parsed["msgId"], "message_id": message_id, "received": parsed}
    return "echo", json.dumps(echo), {"msgId": str(parsed["msgId"])}


TOPIC_LEVEL_CHARS = 64
"""The most characters of the level an echo-service output's topic ends with."""


def topic_level(text: str) -> str:
    """One topic level made of ``text`` (an echo's msgId, the kind of an error): what a level may
    not hold becomes '-', at most TOPIC_LEVEL_CHARS characters."""
    level = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:TOPIC_LEVEL_CHARS]
    return level or "none"


def echo_topic(settings: dict[str, Any], route: str, properties: dict[str, str]) -> str:
    """The topic an output goes to when the service publishes: ``<echo_topic>/<msgId>`` or
    ``<errors_topic>/<kind of error>``, built from the payload as the seed's version 3 does."""
    if route == "echo":
        return f"{settings['echo_topic']}/{topic_level(properties['msgId'])}"
    return f"{settings['errors_topic']}/{topic_level(properties['reason'].split(':', 1)[0])}"


def echo_service(ctx: ExecutionContext) -> None:
    """The test message validation and echo service (docs/concepts.md, "Listeners and executions").

    A document that parses as a JSON object with a ``msgId`` becomes an echo
    message; any other (a parse error included) becomes an error message with
    the original payload and the reason, and its input is acked like any
    other: bad input never becomes a poison message. Outputs go to the queues
    ``echo_queue`` and ``errors_queue``, or are published under the topics
    ``echo_topic`` and ``errors_topic`` (seed 002, version 3). With
    ``checkpoint_queue`` and ``checkpoint_topic`` it keeps a checkpoint of the
    messages it processed and recognises by it the redelivered messages of an
    execution that died (``atomq.workers.checkpoint``). A redelivered message
    that this listener already processed and finished never reaches the
    process at all (the execution recognises it); one that does arrive
    redelivered, and is not named by the checkpoint, is logged, so that an
    operator sees it was not recognised.
    """
    settings = ctx.settings
    todo = checkpoint.unprocessed(ctx)
    for message in todo:
        if message.redelivered:
            ctx.log.info("message %s is redelivered (delivery %d), not seen before: processing it",
                         message.id, message.delivery_count)
        for document in message.documents:
            route, body, properties = echo_route(message.id, document.data)
            if "echo_topic" in settings:
                ctx.publish(echo_topic(settings, route, properties), [body], properties, source=message)
            else:
                ctx.send(settings[f"{route}_queue"], [body], properties, source=message)
    checkpoint.record(ctx, todo)


def validate_echo(settings: dict[str, Any]) -> None:
    if "echo_topic" in settings or "errors_topic" in settings:
        for name in ("echo_topic", "errors_topic"):
            if name not in settings:
                raise InvalidInput("echo_topic and errors_topic go together", field=f"settings.{name}")
            check_topic(settings[name], field=f"settings.{name}")
            if len(settings[name]) > defaults.MAX_TOPIC_CHARS - TOPIC_LEVEL_CHARS - 1:
                raise InvalidInput(f"settings.{name} leaves no room for the level the service adds: at most "
                                   f"{defaults.MAX_TOPIC_CHARS - TOPIC_LEVEL_CHARS - 1} characters",
                                   field=f"settings.{name}")
    else:
        _queue_setting(settings, "echo_queue")
        _queue_setting(settings, "errors_queue")
    checkpoint.validate(settings)


echo_service.validate_settings = validate_echo  # type: ignore[attr-defined]
