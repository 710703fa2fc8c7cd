"""The JSON form of documents and messages in the HTTP API, written and read in this one place.

A document's content is text or bytes: text travels as ``data``, bytes as
``data_base64``. A sender's bytes that are UTF-8 go as text, so the node
stores text (shorter than base64) and a reader of the queue sees text. A
message is its ``documents``, and optionally its ``properties`` (a JSON
object), its ``dedupe_id`` and its ``group``; a delivered message carries more (its id,
delivery count, receipt ...), which its readers take by name. The HTTP
contract is docs/http-api.md.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any


def utf8_text(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8, else None."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def content_fields(content: str | bytes, name: str = "data") -> dict[str, str]:
    """How a content is held in atomq's JSON: ``{name: text}`` for text, ``{name + "_base64": ...}``
    for bytes. ``name`` is ``data`` in a document, ``payload`` in the echo service's error report."""
    if isinstance(content, str):
        return {name: content}
    return {f"{name}_base64": base64.b64encode(content).decode("ascii")}


def document(content: str | bytes, properties: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A document as a send takes it; bytes that are UTF-8 go as text."""
    text = utf8_text(content) if isinstance(content, bytes) else content
    out: dict[str, Any] = content_fields(content if text is None else text)
    if properties is not None:
        out["properties"] = properties
    return out


def message(documents: list[dict[str, Any]], properties: Mapping[str, Any] | None = None,
            dedupe_id: str | None = None, priority: int | None = None, ttl_s: float | None = None,
            expires_at: float | None = None, delay_s: float | None = None,
            group: str | None = None) -> dict[str, Any]:
    """A message as a send takes it: its documents (each from :func:`document`), and its properties,
    de-duplication id, priority (0 to 9, higher first), expiry, delay (seconds before its first
    delivery) and group when given."""
    out: dict[str, Any] = {"documents": documents}
    if properties is not None:
        out["properties"] = properties
    for name, value in (("dedupe_id", dedupe_id), ("priority", priority), ("ttl_s", ttl_s),
                        ("expires_at", expires_at), ("delay_s", delay_s), ("group", group)):
        if value is not None:
            out[name] = value
    return out


def document_bytes(document: Mapping[str, Any]) -> bytes:
    """A delivered document's content as bytes: its ``data`` in UTF-8, or its ``data_base64`` decoded."""
    if "data" in document:
        return document["data"].encode("utf-8")  # type: ignore[no-any-return]
    return base64.b64decode(document["data_base64"])


def properties_of(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A delivered message's or document's properties; none given is none at all."""
    return raw.get("properties") or {}
