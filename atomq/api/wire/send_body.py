"""The send request body, checked and turned into messages without marshmallow.

Why not the schema: loading 100 messages through ``SendSchema`` costs about
2 ms, as much as the whole rest of a send request (JSON parsing is 0.1 ms);
the send is the hot path, so this module applies the same rules by hand,
and spells a field's path only when it reports a problem there.
``SendSchema`` stays the contract and the OpenAPI document, and a test runs
both over valid and invalid bodies to prove they agree.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from atomq import defaults
from atomq.api.schemas.common import LATEST_TIME_S
from atomq.api.wire.strict_json import MAX_DEPTH, nests_within, path_of, too_deep, unencodable
from atomq.errors import InvalidInput
from atomq.platform import OutgoingDocument, OutgoingMessage
from atomq.platform.queues.names import GROUP, GROUP_RULE
from atomq.platform.queues.topics import check_topic

MESSAGE_FIELDS = frozenset({"documents", "properties", "dedupe_id", "priority", "expires_at", "ttl_s", "traceparent",
                            "delay_s", "group"})
BODY_FIELDS = frozenset({"messages", "delay_s"})
TOPIC_MESSAGE_FIELDS = MESSAGE_FIELDS | {"topic"}
DOCUMENT_FIELDS = frozenset({"data", "data_base64", "properties"})


def _fail(rule: str, *path: str | int) -> InvalidInput:
    field = ".".join(str(p) for p in path)
    return InvalidInput(f"{field}: {rule}", field=field)


def _object(raw: Any, allowed: frozenset[str], *path: str | int) -> dict[str, Any]:
    """``raw`` if it is an object with no field outside ``allowed``."""
    if not isinstance(raw, dict):
        raise _fail("must be an object", *path)
    if not allowed.issuperset(raw):
        raise _fail("unknown field", *path, min(raw.keys() - allowed))
    return raw


def _properties(raw: dict[str, Any], *path: str | int) -> dict[str, Any]:
    props = raw.get("properties", {})
    if not isinstance(props, dict):
        raise _fail("must be an object", *path, "properties")
    # The only place a send's body can nest at will: the body, its messages and their
    # documents stand above it (the path's length, plus the body itself).
    if props:
        if not nests_within(props, MAX_DEPTH - 1 - len(path)):
            raise too_deep(".".join(str(p) for p in (*path, "properties")))
        bad = path_of(props, unencodable, (*(str(p) for p in path), "properties"))
        if bad is not None:
            raise InvalidInput(f"{bad}: holds a lone UTF-16 surrogate, which is no character", field=bad)
    return props


def _text(value: str, *path: str | int) -> str:
    """``value``, if UTF-8 can hold it (a lone surrogate it cannot)."""
    if unencodable(value):
        raise _fail("holds a lone UTF-16 surrogate, which is no character", *path)
    return value


def _document(raw: Any, i: int, j: int) -> OutgoingDocument:
    raw = _object(raw, DOCUMENT_FIELDS, "messages", i, "documents", j)
    props = _properties(raw, "messages", i, "documents", j)
    data = raw.get("data")
    if isinstance(data, str) and "data_base64" not in raw:
        return OutgoingDocument(_text(data, "messages", i, "documents", j, "data"), props)
    if ("data" in raw) == ("data_base64" in raw):
        raise _fail("give either data or data_base64", "messages", i, "documents", j, "data")
    if "data" in raw:
        raise _fail("must be a string", "messages", i, "documents", j, "data")
    encoded = raw["data_base64"]
    if not isinstance(encoded, str):
        raise _fail("must be a string", "messages", i, "documents", j, "data_base64")
    try:
        return OutgoingDocument(base64.b64decode(encoded, validate=True), props)
    except (binascii.Error, ValueError):
        raise _fail("must be base64", "messages", i, "documents", j, "data_base64") from None


def _delay(raw: dict[str, Any], *path: str | int) -> float | None:
    """The ``delay_s`` of a body or of one of its messages: None when not given."""
    delay_s = raw.get("delay_s")
    if delay_s is not None and (type(delay_s) not in (int, float) or not 0 <= delay_s <= defaults.MAX_DELAY_S):
        raise _fail(f"must be a number of seconds from 0 (none) to {defaults.MAX_DELAY_S:.0f}", *path, "delay_s")
    return None if delay_s is None else float(delay_s)


def _message(raw: Any, i: int, allowed: frozenset[str] = MESSAGE_FIELDS,
             delay_s: float | None = None) -> OutgoingMessage:
    """One message of a body; ``delay_s``, the body's, for a message that gives none."""
    raw = _object(raw, allowed, "messages", i)
    docs = raw.get("documents")
    if not isinstance(docs, list) or not docs:
        raise _fail("a list of at least one document is required", "messages", i, "documents")
    dedupe_id = raw.get("dedupe_id")
    if dedupe_id is not None and (not isinstance(dedupe_id, str)
                                  or not 1 <= len(dedupe_id) <= defaults.MAX_DEDUPE_ID_CHARS):
        raise _fail(f"must be a string of 1 to {defaults.MAX_DEDUPE_ID_CHARS} characters", "messages", i, "dedupe_id")
    if dedupe_id is not None:
        _text(dedupe_id, "messages", i, "dedupe_id")
    priority = raw.get("priority")
    least, most = defaults.PRIORITY_RANGE
    if priority is not None and (type(priority) is not int or not least <= priority <= most):
        raise _fail(f"must be an integer from {least} to {most}", "messages", i, "priority")
    expires_at = raw.get("expires_at")
    if expires_at is not None and (type(expires_at) not in (int, float) or not 0 <= expires_at <= LATEST_TIME_S):
        raise _fail(f"must be a number of seconds since the epoch, from 0 to {LATEST_TIME_S:.0f}",
                    "messages", i, "expires_at")
    ttl_s = raw.get("ttl_s")
    most_ttl = defaults.MAX_MESSAGE_TTL_S
    if ttl_s is not None and (type(ttl_s) not in (int, float) or not 0 < ttl_s <= most_ttl):
        raise _fail(f"must be a number of seconds above 0 and at most {most_ttl:.0f}", "messages", i, "ttl_s")
    traceparent = raw.get("traceparent")
    if traceparent is not None and (not isinstance(traceparent, str)
                                    or len(traceparent) > defaults.MAX_TRACEPARENT_CHARS):
        raise _fail(f"must be a string of at most {defaults.MAX_TRACEPARENT_CHARS} characters", "messages", i,
                    "traceparent")
    if traceparent is not None:
        _text(traceparent, "messages", i, "traceparent")
    own_delay = _delay(raw, "messages", i)
    group = raw.get("group")
    if group is not None and (not isinstance(group, str) or not GROUP.fullmatch(group)):
        raise _fail(GROUP_RULE, "messages", i, "group")
    return OutgoingMessage(
        documents=(_document(docs[0], i, 0),) if len(docs) == 1 else
        tuple(_document(d, i, j) for j, d in enumerate(docs)),
        properties=_properties(raw, "messages", i),
        priority=priority,
        expires_at=None if expires_at is None else float(expires_at),
        ttl_s=None if ttl_s is None else float(ttl_s),
        dedupe_id=dedupe_id,
        traceparent=traceparent,
        delay_s=delay_s if own_delay is None else own_delay,
        group=group,
    )


def _messages(body: Any) -> tuple[list[Any], float | None]:
    """The raw messages of a send or publish body, and its ``delay_s`` (None: not given)."""
    if not isinstance(body, dict):
        raise _fail("must be a JSON object", "body")
    if body.keys() - BODY_FIELDS:
        raise _fail("unknown field", min(body.keys() - BODY_FIELDS))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _fail("a list of at least one message is required", "messages")
    return messages, _delay(body)


def parse_send(body: Any) -> list[OutgoingMessage]:
    """The messages of a send request body, the body's ``delay_s`` given to each message that
    gives none of its own; InvalidInput naming the field otherwise."""
    raw, delay_s = _messages(body)
    return [_message(m, i, delay_s=delay_s) for i, m in enumerate(raw)]


def parse_publish_many(body: Any) -> tuple[list[str], list[OutgoingMessage]]:
    """The topics and messages of a body publishing each message to its own ``topic`` (a send's
    body whose messages each name one); InvalidInput naming the field otherwise."""
    topics, messages = [], []
    listed, delay_s = _messages(body)
    for i, raw in enumerate(listed):
        message = _message(raw, i, TOPIC_MESSAGE_FIELDS, delay_s)
        topics.append(check_topic(raw.get("topic"), field=f"messages.{i}.topic"))
        messages.append(message)
    return topics, messages
