"""The processes atomq registers itself: ``forward`` and ``echo-service``."""

from __future__ import annotations

import json
from typing import Any

from atomq.client import wire
from atomq.errors import InvalidInput
from atomq.platform.names import check_queue_name
from atomq.platform.topics import check_topic
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


def echo_service(ctx: ExecutionContext) -> None:
    """The test message validation and echo service (docs/concepts.md, "Listeners and executions").

    A document that parses as a JSON object with a ``msgId`` becomes an echo
    message on ``echo_queue``; any other (a parse error included) becomes a
    message on ``errors_queue`` with the original payload and the reason, and
    its input is acked like any other: bad input never becomes a poison
    message. A redelivered message that this listener already processed
    never reaches the process at all (the execution recognises it); one that
    does arrive redelivered is logged, so that an operator sees it was not recognised.
    """
    queues = {"echo": ctx.settings["echo_queue"], "errors": ctx.settings["errors_queue"]}
    for message in ctx.messages:
        if message.redelivered:
            ctx.log.info("message %s is redelivered (delivery %d), not seen before: processing it",
                         message.id, message.delivery_count)
        for document in message.documents:
            route, body, properties = echo_route(message.id, document.data)
            ctx.send(queues[route], [body], properties, source=message)


def validate_echo(settings: dict[str, Any]) -> None:
    _queue_setting(settings, "echo_queue")
    _queue_setting(settings, "errors_queue")


echo_service.validate_settings = validate_echo  # type: ignore[attr-defined]
