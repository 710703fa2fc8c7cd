"""What goes into the queue server and what comes out of it.

What goes in and comes out (messages, documents) are slotted, mutable
dataclasses: a send or get of 1,000 messages builds thousands of them, and
frozen ones cost twice as much to build. The envelope stored with each message is versioned JSON with short keys;
fields that later features use (priority, expiry, trace context) have their
place from the first version so no stored message needs rewriting.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

ENVELOPE_VERSION = 1
BARE_ENVELOPE = '{"v":1}'
# The envelope's optional fields: their names, and their short keys in the stored JSON.
ENVELOPE_FIELDS = (("priority", "pr"), ("expires_at", "x"), ("dedupe_id", "dd"), ("traceparent", "tp"))
_BARE_ENVELOPE_BYTES = BARE_ENVELOPE.encode()


class QueueModel(str, Enum):
    POINT_TO_POINT = "point_to_point"
    PUBLISH_SUBSCRIBE = "publish_subscribe"


class MessageState(str, Enum):
    READY = "ready"
    IN_FLIGHT = "in_flight"
    SCHEDULED = "scheduled"
    DEAD = "dead"


STATE_BY_TAG = {"r": MessageState.READY, "f": MessageState.IN_FLIGHT, "s": MessageState.SCHEDULED,
                "d": MessageState.DEAD}


@dataclass(slots=True)
class OutgoingDocument:
    """A document to send: text (``str``) or bytes, with dynamic properties."""

    data: str | bytes
    properties: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class OutgoingMessage:
    """A message to send: one or more documents and the message's own properties."""

    documents: tuple[OutgoingDocument, ...]
    properties: Mapping[str, Any] = field(default_factory=dict)
    priority: int | None = None
    expires_at: float | None = None
    dedupe_id: str | None = None
    traceparent: str | None = None

    def envelope_json(self) -> str:
        env: dict[str, Any] = {"v": ENVELOPE_VERSION}
        if self.properties:
            env["p"] = self.properties
        for name, short in ENVELOPE_FIELDS:
            value = getattr(self, name)
            if value is not None:
                env[short] = value
        if len(env) == 1:
            return BARE_ENVELOPE
        return json.dumps(env, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Envelope:
    """A stored message's envelope, as read back."""

    properties: dict[str, Any]
    priority: int | None = None
    expires_at: float | None = None
    dedupe_id: str | None = None
    traceparent: str | None = None
    version: int = ENVELOPE_VERSION

    @classmethod
    def from_json(cls, raw: bytes) -> Envelope:
        if raw == _BARE_ENVELOPE_BYTES:  # the common case, without a JSON parse
            return cls(properties={})
        env = json.loads(raw)
        return cls(properties=env.get("p", {}), version=env.get("v", ENVELOPE_VERSION),
                   **{name: env.get(short) for name, short in ENVELOPE_FIELDS})

    def optional_fields(self) -> dict[str, Any]:
        """The optional fields that are set, by name."""
        return {name: getattr(self, name) for name, _ in ENVELOPE_FIELDS if getattr(self, name) is not None}


@dataclass(slots=True)
class Document:
    id: str
    data: str | bytes
    properties: dict[str, Any]


@dataclass(slots=True)
class Message:
    """A stored message as a browse or a delivery shows it."""

    id: str
    delivery_count: int
    enqueued_at: float
    envelope: Envelope
    documents: tuple[Document, ...]

    @property
    def properties(self) -> dict[str, Any]:
        return self.envelope.properties

    @property
    def redelivered(self) -> bool:
        return self.delivery_count > 1


@dataclass(slots=True)
class Delivery(Message):
    """A message handed to a consumer; ``receipt`` names this one delivery."""

    receipt: str = ""


@dataclass(slots=True)
class BrowsedMessage(Message):
    state: MessageState = MessageState.READY
    failed_deliveries: int = 0


@dataclass(slots=True)
class DeadLetter(Message):
    reason: str = ""
    failed_deliveries: int = 0
    dead_lettered_at: float = 0.0


@dataclass(frozen=True)
class Page:
    """One page of a listing; ``next`` is the cursor of the next page, or None."""

    items: list[Any]
    next: str | None


@dataclass(frozen=True)
class DestinationCounts:
    depth: int
    in_flight: int
    dead_letters: int
    scheduled: int = 0
    """Of ``depth``, those waiting for a redelivery delay to pass."""


@dataclass(frozen=True)
class QueueInfo:
    name: str
    model: QueueModel
    max_redeliveries: int
    ack_timeout_s: float
    depth: int = 0
    in_flight: int = 0
    dead_letters: int = 0
    scheduled: int = 0
    subscribers: dict[str, DestinationCounts] = field(default_factory=dict)


@dataclass(frozen=True)
class NackResult:
    requeued: int
    dead_lettered: int
