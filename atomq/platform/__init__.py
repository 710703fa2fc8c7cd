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
    Page,
    QueueAccess,
    QueueInfo,
    QueueModel,
    Taken,
)
from atomq.platform.queue_server import QueueServer
from atomq.platform.sending import Published
from atomq.platform.queue_settings import QueueSettings

__all__ = [
    "BrowsedMessage",
    "ConsumerInfo",
    "DeadLetter",
    "Delivery",
    "Document",
    "Message",
    "MessageState",
    "NackResult",
    "OnExpire",
    "OutgoingDocument",
    "OutgoingMessage",
    "Page",
    "Published",
    "QueueAccess",
    "QueueInfo",
    "QueueModel",
    "QueueServer",
    "QueueSettings",
    "Taken",
]
