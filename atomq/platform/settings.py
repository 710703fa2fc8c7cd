"""The queue server's settings and their defaults (API.md's server settings).

The redelivery schedule lives here as pure logic too, so tests and the API
can state the exact delay of failed delivery k without a server; the Lua
scripts implement the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from atomq.errors import InvalidInput

DEFAULT_REDELIVERY_DELAYS_S: tuple[float, ...] = (1, 2, 3, 5, 8, 24)


def redelivery_delay(delays_s: Sequence[float], failures: int) -> float:
    """Seconds before failed delivery number ``failures`` (1-based) is redelivered.

    The last delay repeats past the end of the list.
    """
    if failures < 1:
        raise ValueError("failures counts from 1")
    return delays_s[min(failures, len(delays_s)) - 1]


@dataclass(frozen=True)
class QueueSettings:
    """Server-wide settings of the queue server.

    Attributes:
        redelivery_delays_s: delay after failed delivery k is element k-1; the
            last repeats. Shared by every queue, as in the seed's server.
        dedupe_window_s: how long a ``dedupe_id`` keeps answering with its
            original message id.
        document_retention_s: documents older than this are purged, and with
            them every message, queued or dead, that refers to them.
        max_document_bytes: largest document accepted.
        max_messages_per_send: most messages in one send.
        max_get: most messages one get may ask for.
        max_wait_ms: longest blocking wait of a get.
        chunk_size: messages one bulk-action script handles per call, so no
            script blocks Redis for long.
        max_subscribers: most subscribers of one publish/subscribe queue; a
            send copies to all of them in one script, so this bounds it.
        max_documents_per_message: most documents one message refers to; with
            the next, what one send can make a script store.
        max_documents_per_send: most documents in one send, over its messages.
        max_reply_bytes: most document bytes one get, browse or dead-letter page
            answers: a reply is built whole in the store's single thread, in the
            client buffer and in a web worker, so it must not grow with what a
            tenant stored. A single message bigger than this still comes alone.
        max_queues_per_tenant: most queue components of one tenant; every
            tenant's queues share one store and one maintenance loop.
    """

    redelivery_delays_s: tuple[float, ...] = DEFAULT_REDELIVERY_DELAYS_S
    dedupe_window_s: float = 300
    document_retention_s: float = 7 * 24 * 3600
    max_document_bytes: int = 1024 * 1024
    max_messages_per_send: int = 1000
    max_get: int = 1000
    max_wait_ms: int = 20_000
    chunk_size: int = 500
    max_subscribers: int = 100
    max_documents_per_message: int = 100
    max_documents_per_send: int = 10_000
    max_reply_bytes: int = 16 * 1024 * 1024
    max_queues_per_tenant: int = 1000
    _delays_arg: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        delays = tuple(self.redelivery_delays_s)
        if not delays or any(not isinstance(d, (int, float)) or d < 0 for d in delays):
            raise InvalidInput(
                "redelivery_delays_s must be a non-empty list of non-negative numbers",
                field="redelivery_delays_s",
            )
        if self.dedupe_window_s <= 0:
            raise InvalidInput("dedupe_window_s must be positive", field="dedupe_window_s")
        if self.document_retention_s <= 0:
            raise InvalidInput("document_retention_s must be positive", field="document_retention_s")
        object.__setattr__(self, "redelivery_delays_s", delays)
        object.__setattr__(self, "_delays_arg", ",".join(str(round(d * 1000)) for d in delays))

    @property
    def delays_ms_arg(self) -> str:
        """The schedule as the scripts take it: milliseconds, comma-separated."""
        return self._delays_arg
