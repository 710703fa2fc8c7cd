"""Documents to and from their stored form, and script replies to messages.

A stored document is one type byte (``t`` text, ``b`` bytes) and its
content, so a text document comes back as text and a binary one as bytes
without a second field per document.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from atomq.errors import InvalidInput, TooLarge
from atomq.platform.models import (
    DEFAULT_PRIORITY,
    STATE_BY_TAG,
    BrowsedMessage,
    DeadLetter,
    Delivery,
    Document,
    Envelope,
    MessageState,
    OutgoingDocument,
)


def encode_document(doc: OutgoingDocument, max_bytes: int, field: str) -> tuple[bytes, str]:
    """The stored content and properties JSON ("" for none) of one document."""
    if isinstance(doc.data, str):
        raw = b"t" + doc.data.encode("utf-8")
    elif isinstance(doc.data, (bytes, bytearray, memoryview)):
        raw = b"b" + bytes(doc.data)
    else:
        raise InvalidInput("a document's data must be text or bytes", field=field)
    if len(raw) - 1 > max_bytes:
        raise TooLarge(f"a document holds at most {max_bytes} bytes", field=field, limit=max_bytes)
    props = ""
    if doc.properties:
        try:
            props = json.dumps(dict(doc.properties), separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            raise InvalidInput("document properties must be JSON values", field=f"{field}.properties") from None
    return raw, props


def known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without the keys that are no field of dataclass ``cls``: a record another version
    of atomq wrote, with a field this one does not have, still reads (nodes of two versions share
    a store during a rolling upgrade)."""
    names = {f.name for f in fields(cls)}
    return {name: value for name, value in data.items() if name in names}


def _decode_document(doc_id: str, raw: bytes, props: bytes) -> Document:
    data: str | bytes = raw[1:].decode("utf-8") if raw[:1] == b"t" else raw[1:]
    return Document(id=doc_id, data=data, properties=json.loads(props) if props else {})


def in_flight_detail(where: str) -> tuple[float | None, str | None]:
    """When a delivery was made and who holds it, from its in-flight state's ``where``
    (``f<since ms>,<holder>``); None for what it does not say (a bare ``f``, written before
    atomq kept them, or an empty holder)."""
    since, _, holder = where[1:].partition(",")
    return (int(since) / 1000 if since else None), (holder or None)


def decode_messages(reply: list[Any], pos: int, count: int, cls: type) -> list[Any]:
    """Messages from a get or browse script reply, starting at ``reply[pos]``.

    Layouts (see get.lua and browse.lua): a delivery is id, delivery count,
    envelope, then data and properties per document; a browsed message or
    dead letter has its state (``count|failures|where``) in place of the
    count, a dead letter ends with reason and time, a browsed message
    in flight with its ack deadline in ms, and a scheduled one with its due time in ms. The envelope is
    ``<head>|<JSON>``, the head ``<document count>[,<priority>[,<expiry ms>]]``;
    document ids are ``<message id>.<k>`` and a message id starts with its
    send time in ms, so neither travels.
    """
    out: list[Any] = []
    for _ in range(count):
        msg_id = reply[pos].decode()
        count_or_state, raw_env = reply[pos + 1], reply[pos + 2]
        pos += 3
        head, _, env = raw_env.partition(b"|")
        priority, expires_at = DEFAULT_PRIORITY, None
        if b"," in head:
            parts = head.split(b",")
            head, priority = parts[0], int(parts[1])
            if len(parts) > 2:
                expires_at = float(parts[2]) / 1000  # float: a head written before 15-digit expiries were formatted
        envelope = Envelope.from_json(env, priority, expires_at)
        ndocs = int(head)
        if ndocs == 1:  # the common case, without building a generator
            docs: tuple[Document, ...] = (_decode_document(msg_id + ".1", reply[pos], reply[pos + 1]),)
        else:
            docs = tuple(_decode_document(f"{msg_id}.{k + 1}", reply[pos + 2 * k], reply[pos + 2 * k + 1])
                         for k in range(ndocs))
        pos += 2 * ndocs
        enqueued_at = int(msg_id.partition("-")[0]) / 1000
        if cls is Delivery:
            dc = int(count_or_state)
            out.append(Delivery(id=msg_id, delivery_count=dc, enqueued_at=enqueued_at,
                                envelope=envelope, documents=docs, receipt=f"{msg_id}~{dc}"))
            continue
        dc, fails, where = count_or_state.decode().split("|", 2)
        common: dict[str, Any] = dict(id=msg_id, delivery_count=int(dc), enqueued_at=enqueued_at,
                                      envelope=envelope, documents=docs,
                                      failed_deliveries=int(fails))
        if cls is DeadLetter:
            out.append(DeadLetter(**common, reason=reply[pos].decode(), dead_lettered_at=int(reply[pos + 1]) / 1000))
            pos += 2
        elif where[:1] == "f":
            delivered_at, holder = in_flight_detail(where)
            deadline = float(reply[pos]) / 1000 if reply[pos] else None
            pos += 1
            out.append(BrowsedMessage(**common, state=MessageState.IN_FLIGHT, holder=holder,
                                      delivered_at=delivered_at, deadline=deadline))
        elif where[:1] == "s":
            due_at = float(reply[pos]) / 1000 if reply[pos] else None
            pos += 1
            out.append(BrowsedMessage(**common, state=MessageState.SCHEDULED, due_at=due_at))
        else:
            out.append(BrowsedMessage(**common, state=STATE_BY_TAG[where[:1]]))
    return out
