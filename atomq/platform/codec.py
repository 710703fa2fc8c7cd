"""Documents to and from their stored form, and script replies to messages.

A stored document is one type byte (``t`` text, ``b`` bytes) and its
content, so a text document comes back as text and a binary one as bytes
without a second field per document.
"""

from __future__ import annotations

import json
from typing import Any

from atomq.errors import InvalidInput, TooLarge
from atomq.platform.models import (
    STATE_BY_TAG,
    BrowsedMessage,
    DeadLetter,
    Delivery,
    Document,
    Envelope,
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


def _decode_document(doc_id: bytes, raw: bytes, props: bytes) -> Document:
    data: str | bytes = raw[1:].decode("utf-8") if raw[:1] == b"t" else raw[1:]
    return Document(id=doc_id.decode(), data=data, properties=json.loads(props) if props else {})


def decode_messages(reply: list[Any], pos: int, count: int, cls: type) -> list[Any]:
    """Messages from a get or browse script reply, starting at ``reply[pos]``.

    Layouts (see get.lua and browse.lua): deliveries carry id, delivery count,
    enqueued ms, envelope, documents; browsed messages and dead letters also
    carry failures and where, and dead letters end with reason and time.
    """
    out = []
    browsed = cls is not Delivery
    for _ in range(count):
        msg_id = reply[pos].decode()
        dc = int(reply[pos + 1])
        pos += 2
        if browsed:
            fails, where = int(reply[pos]), reply[pos + 1].decode()
            pos += 2
        enq, env, ndocs = int(reply[pos]), reply[pos + 1], int(reply[pos + 2])
        pos += 3
        docs = tuple(_decode_document(*reply[pos + 3 * j : pos + 3 * j + 3]) for j in range(ndocs))
        pos += 3 * ndocs
        common: dict[str, Any] = dict(id=msg_id, delivery_count=dc, enqueued_at=enq / 1000,
                                      envelope=Envelope.from_json(env), documents=docs)
        if cls is Delivery:
            out.append(Delivery(**common, receipt=f"{msg_id}~{dc}"))
        elif cls is DeadLetter:
            out.append(DeadLetter(**common, reason=reply[pos].decode(), failed_deliveries=fails,
                                  dead_lettered_at=int(reply[pos + 1]) / 1000))
            pos += 2
        else:
            out.append(BrowsedMessage(**common, state=STATE_BY_TAG[where], failed_deliveries=fails))
    return out
