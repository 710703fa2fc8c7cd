"""The queue server core: per-tenant queues in Redis streams. Knows Redis, not HTTP.

Use it as a library: ``QueueServer(redis_client)``.
"""

from atomq.platform.models import (
    BrowsedMessage,
    ConsumerInfo,
    DeadLetter,
    Delivery,
    Document,
    Message,
    MessageState,
    NackResult,
    OnExpire,
    OutgoingDocument,
    OutgoingMessage,
    Overflow,
    QueueAccess,
    QueueInfo,
    QueueLimits,
    QueueModel,
    QueueOrdering,
    Taken,
)
from atomq.platform.listings import DeadLetterReasons, Page, ReasonCount
from atomq.platform.queue_server import QueueServer
from atomq.platform.queues.queue_settings import QueueSettings
from atomq.platform.queues.sending import Published, PublishedMany, Sent

__all__ = [
    "BrowsedMessage",
    "ConsumerInfo",
    "DeadLetter",
    "DeadLetterReasons",
    "Delivery",
    "Document",
    "Message",
    "MessageState",
    "NackResult",
    "OnExpire",
    "OutgoingDocument",
    "OutgoingMessage",
    "Overflow",
    "Page",
    "Published",
    "PublishedMany",
    "QueueAccess",
    "QueueInfo",
    "QueueLimits",
    "QueueModel",
    "QueueOrdering",
    "QueueServer",
    "QueueSettings",
    "ReasonCount",
    "Sent",
    "Taken",
]
