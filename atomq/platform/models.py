"""What goes into the queue server and what comes out of it.

What goes in and comes out (messages, documents) are slotted, mutable
dataclasses: a send or get of 1,000 messages builds thousands of them, and
frozen ones cost twice as much to build. The envelope stored with each message is versioned JSON with short keys,
after a head the scripts read without parsing JSON: the document count, and
the priority and expiry when they are not the defaults (see stored_form).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from atomq import defaults

ENVELOPE_VERSION = 1
BARE_ENVELOPE = '{"v":1}'
DEFAULT_PRIORITY = defaults.DEFAULT_PRIORITY
# The envelope's optional JSON fields: their names, and their short keys in the stored JSON
# (envelope_json's fast path and Envelope.optional_fields name them too).
# Priority and expiry live in the envelope's head instead, where the scripts read them.
ENVELOPE_FIELDS = (("dedupe_id", "dd"), ("traceparent", "tp"), ("topic", "t"), ("group", "g"))
_BARE_ENVELOPE_BYTES = BARE_ENVELOPE.encode()
DEAD_LETTER_PROPERTIES = ("dead_letter_reason", "dead_letter_source", "dead_letter_delivery_count")
"""The properties a message moved to its queue's ``dead_letter_queue`` has there: why it became a dead
letter, the queue (``Q``, or ``Q/S`` for a subscriber) it left, and the deliveries it had there. The
scripts keep them apart from the sender's own properties (``_lib_failures.lua``, ``dead_letter_record``),
so a move task that brings the message back restores those as they were."""


def topic_envelope(topic: str) -> str:
    """The envelope of a message published to ``topic`` that carries nothing else."""
    return json.dumps({"v": ENVELOPE_VERSION, "t": topic}, separators=(",", ":"), ensure_ascii=False)


class QueueModel(str, Enum):
    POINT_TO_POINT = "point_to_point"
    PUBLISH_SUBSCRIBE = "publish_subscribe"


class OnExpire(str, Enum):
    """What happens to a message whose time to live ran out."""

    DEAD_LETTER = "dead_letter"
    DISCARD = "discard"


class Overflow(str, Enum):
    """What a send gets that would pass one of its queue's limits."""

    REJECT_NEW = "reject_new"
    """The whole send is refused (QueueFull)."""
    DROP_OLDEST = "drop_oldest"
    """The oldest waiting messages make room."""
    DROP_LOWEST_PRIORITY = "drop_lowest_priority"
    """The lowest-priority waiting messages make room, the oldest of a priority first."""
    FLOW_CONTROL = "flow_control"
    """The node holds the send until there is room, for a bounded time."""


class Durability(str, Enum):
    """When a send to the queue is answered."""

    ASYNC = "async"
    """Once the store holds it in memory and in its append-only file (synced every second)."""
    SYNC = "sync"
    """Once its data is synced to disk (and on ``min_replicas`` replicas)."""


class QueueOrdering(str, Enum):
    """What a queue holds back so that messages are processed in order."""

    NONE = "none"
    """Nothing: any number of messages out at once, each get taking them by priority, then send order."""
    GROUP = "group"
    """One message of a group out at a time (ready, in flight or waiting out a redelivery delay),
    the group's in send order; groups are independent, and a message of no group is ordered with
    no other (``atomq.platform.scripts``' ``_lib_groups.lua``)."""


class MessageState(str, Enum):
    READY = "ready"
    IN_FLIGHT = "in_flight"
    SCHEDULED = "scheduled"
    DEAD = "dead"


STATE_BY_TAG = {"r": MessageState.READY, "z": MessageState.READY, "w": MessageState.READY,
                "f": MessageState.IN_FLIGHT, "s": MessageState.SCHEDULED, "d": MessageState.DEAD}
"""A message waiting behind its group's head (w) is ready: it is delivered in its turn."""


@dataclass(slots=True)
class OutgoingDocument:
    """A document to send: text (``str``) or bytes, with dynamic properties."""

    data: str | bytes
    properties: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class OutgoingMessage:
    """A message to send: one or more documents and the message's own properties.

    ``priority`` (0 to 9, None for the default 4): a higher one is delivered first.
    ``expires_at`` (seconds since the epoch) and ``ttl_s`` (seconds from the send, on
    the store's clock): the message expires at the earliest of them and its queue's
    ``message_ttl_s``. ``group``: on a queue whose ordering is ``group``, the message is
    delivered once every earlier message of its group is settled (``QueueOrdering``).
    """

    documents: tuple[OutgoingDocument, ...]
    properties: Mapping[str, Any] = field(default_factory=dict)
    priority: int | None = None
    expires_at: float | None = None
    dedupe_id: str | None = None
    traceparent: str | None = None
    ttl_s: float | None = None
    topic: str | None = None
    """Set by a publish: the topic the message was published to."""
    delay_s: float | None = None
    """Seconds after the send before the message is first delivered (None: its queue's
    ``delay_s``; 0: at once, whatever the queue's)."""
    group: str | None = None

    def envelope_json(self, topic: str | None = None) -> str | None:
        """The stored envelope's JSON; ``topic`` (a publish's) overrides the message's own. None for
        a message that carries nothing but its topic: its envelope is the bare one of that topic
        (``topic_envelope``), which a publish makes once a topic, and only for a topic that has
        such messages (a hundred outputs, a topic and a property each, made a hundred for nothing:
        half a millisecond)."""
        if not self.properties and self.dedupe_id is None and self.traceparent is None and self.group is None and (
                self.topic is None or topic is not None):
            return None  # the common case, without building a dict
        env: dict[str, Any] = {"v": ENVELOPE_VERSION}
        if self.properties:
            env["p"] = self.properties
        for name, short in ENVELOPE_FIELDS:
            value = getattr(self, name) if name != "topic" or topic is None else None
            if value is not None:
                env[short] = value
        if len(env) == 1:
            return None
        if topic is not None:
            env["t"] = topic
        return json.dumps(env, separators=(",", ":"), ensure_ascii=False)


@dataclass(slots=True)
class Envelope:
    """A stored message's envelope, as read back; ``expires_at`` is None when it never expires."""

    properties: dict[str, Any]
    priority: int = DEFAULT_PRIORITY
    expires_at: float | None = None
    dedupe_id: str | None = None
    traceparent: str | None = None
    topic: str | None = None
    group: str | None = None
    version: int = ENVELOPE_VERSION

    @classmethod
    def from_json(cls, raw: bytes, priority: int = DEFAULT_PRIORITY, expires_at: float | None = None) -> Envelope:
        """The envelope of its stored JSON. A message that a queue's ``dead_letter_queue`` moved
        carries the record of that move (field ``dl``: reason, the destination it left, its delivery
        count there), which reads as its ``DEAD_LETTER_PROPERTIES``."""
        if raw == _BARE_ENVELOPE_BYTES:  # the common case, without a JSON parse
            return cls(properties={}, priority=priority, expires_at=expires_at)
        env = json.loads(raw)
        properties = env.get("p", {})
        moved = env.get("dl")
        if isinstance(moved, list) and len(moved) == len(DEAD_LETTER_PROPERTIES):
            properties = {**properties, **dict(zip(DEAD_LETTER_PROPERTIES, moved))}
        return cls(properties=properties, version=env.get("v", ENVELOPE_VERSION), priority=priority,
                   expires_at=expires_at, **{name: env.get(short) for name, short in ENVELOPE_FIELDS})

    def optional_fields(self) -> dict[str, Any]:
        """The priority, and the optional fields that are set, by name (spelt out: a get renders
        it for every message, and a loop over ENVELOPE_FIELDS cost three times as much)."""
        out: dict[str, Any] = {"priority": self.priority}
        if self.expires_at is not None:
            out["expires_at"] = self.expires_at
        if self.dedupe_id is not None:
            out["dedupe_id"] = self.dedupe_id
        if self.traceparent is not None:
            out["traceparent"] = self.traceparent
        if self.topic is not None:
            out["topic"] = self.topic
        if self.group is not None:
            out["group"] = self.group
        return out


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
    """A message as a browse shows it; ``holder``, ``delivered_at`` and ``deadline`` are set only
    while it is in flight, ``due_at`` only while it is scheduled."""

    state: MessageState = MessageState.READY
    failed_deliveries: int = 0
    holder: str | None = None
    """Who holds the delivery: the get's consumer, else what made the get (``key:<key id>``,
    ``owner``); None when nobody was named, or for a delivery made before atomq kept it."""
    delivered_at: float | None = None
    """When the delivery was made (epoch seconds; an extension does not move it); None for a
    delivery made before atomq kept it."""
    deadline: float | None = None
    """When its ack is due (epoch seconds), as extensions moved it."""
    due_at: float | None = None
    """Scheduled only: when it is due (epoch seconds), to be redelivered or, never delivered yet
    (``delivery_count`` 0), delivered at the end of its send's delay."""


@dataclass(slots=True)
class DeadLetter(Message):
    reason: str = ""
    failed_deliveries: int = 0
    dead_lettered_at: float = 0.0


@dataclass(frozen=True)
class InFlight:
    """A delivery under way: whose ack is due by ``deadline`` (epoch seconds), made at
    ``delivered_at`` to ``holder``."""

    id: str
    deadline: float
    delivery_count: int
    failed_deliveries: int
    holder: str | None = None
    """As ``BrowsedMessage.holder``."""
    delivered_at: float | None = None
    """As ``BrowsedMessage.delivered_at``."""


@dataclass(frozen=True)
class DestinationCounts:
    depth: int
    in_flight: int
    dead_letters: int
    scheduled: int = 0
    """Of ``depth``, those waiting for a delay to pass: a redelivery's, or their send's."""
    held_bytes: int = 0
    """The bytes of the messages neither acked nor dead (``depth`` and ``in_flight``): what
    ``max_bytes`` holds, each message its envelope and its documents' data and properties."""
    delayed: int = 0
    """Of ``scheduled``, those never delivered yet, waiting for their send's delay to pass."""


@dataclass(frozen=True)
class CountsNow:
    """A destination's messages as they stand at one moment by the store's clock, ahead of the
    sweep that would move them: ``waiting`` is what a get would take now (the ready ones, the
    scheduled ones that are due, and the deliveries past their deadline, which fail and come
    back); ``in_flight`` the deliveries before their deadline, ``scheduled`` the messages due
    later, and ``delayed`` those waiting out their send's delay, due or not (a sweep moves them)."""

    waiting: int
    in_flight: int
    scheduled: int
    delayed: int


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits, per destination (each subscriber of a publish/subscribe queue), and what
    a send gets at them; 0 is no limit."""

    max_messages: int = 0
    """Most messages neither acked nor dead (ready, scheduled or in flight)."""
    max_bytes: int = 0
    """Most bytes of those messages (``DestinationCounts.held_bytes``)."""
    max_message_bytes: int = 0
    """Largest message a send may hold."""
    max_dead_letters: int = 0
    """Most dead letters; past it, the oldest are dropped."""
    overflow: Overflow = Overflow.REJECT_NEW
    overflow_to_dead_letters: bool = False
    """Messages the overflow drops go to the dead letter queue (reason ``overflow``), not away."""


@dataclass(frozen=True)
class ConsumerInfo:
    """A consumer in line on an exclusive queue."""

    name: str
    active: bool
    last_seen: float
    """When it last called (seconds since the epoch); it loses its place ``ack_timeout_s`` after."""


class QueueAccess(str, Enum):
    """Whether a queue's consumers take turns (exclusive) or share it."""

    NON_EXCLUSIVE = "non_exclusive"
    EXCLUSIVE = "exclusive"


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
    delayed: int = 0
    """Of ``scheduled``, the messages waiting for their send's delay to pass (``DestinationCounts``)."""
    subscribers: dict[str, DestinationCounts] = field(default_factory=dict)
    depth_by_priority: dict[int, int] = field(default_factory=dict)
    """Ready messages by priority, highest first, for the priorities that have some."""
    message_ttl_s: float = 0
    """Every message sent to the queue expires this long after its send (0: none)."""
    on_expire: OnExpire = OnExpire.DEAD_LETTER
    topics: tuple[str, ...] = ()
    """The topic patterns the queue attracts."""
    totals: dict[str, int] = field(default_factory=dict)
    """What happened to the queue's messages since it was created (``counters.QUEUE_COUNTS``)."""
    last_value: bool = False
    """At most one waiting message per value of the property ``last_value_key``."""
    last_value_key: str = ""
    access: QueueAccess = QueueAccess.NON_EXCLUSIVE
    consumers: tuple[ConsumerInfo, ...] = ()
    """An exclusive queue's consumers in line, the active one first."""
    held_bytes: int = 0
    """Summed over subscribers as the counts are (see ``DestinationCounts.held_bytes``)."""
    limits: QueueLimits = field(default_factory=QueueLimits)
    durability: Durability = Durability.ASYNC
    delay_s: float = 0
    """Each message sent to the queue waits this long before its first delivery, unless it gives
    a delay of its own."""
    ordering: QueueOrdering = QueueOrdering.NONE
    dead_letter_queue: str = ""
    """The point-to-point queue its dead letters move to, as ordinary messages ("": its own dead letters)."""
    groups: int = 0
    """Groups of a group-ordered queue with a message out (ready, in flight or awaiting redelivery)."""
    held_by_group: int = 0
    """Messages waiting behind an earlier one of their group (part of the depth)."""


@dataclass(frozen=True)
class Taken:
    """What a get took: its deliveries and, on an exclusive queue, whether the consumer that
    asked is the active one (a standby takes nothing); None on other queues."""

    deliveries: list[Delivery]
    active: bool | None = None
    acked: int | None = None
    """How many messages the get acked first, when it was given some to ack; None otherwise."""


@dataclass(frozen=True)
class NackResult:
    requeued: int
    dead_lettered: int
