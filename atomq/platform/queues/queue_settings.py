"""The queue server's settings (``QueueSettings``; their defaults are in ``atomq.defaults``).

The redelivery schedule lives here as pure logic too, so tests and the API
can state the exact delay of failed delivery k without a server; the Lua
scripts implement the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from atomq import defaults
from atomq.errors import InvalidInput


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
            last repeats. Shared by every queue: one schedule a server.
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
        max_consumers: most consumers in line at once on one exclusive queue;
            every call on the queue reads them all.
        max_documents_per_message: most documents one message refers to; with
            the next, what one send can make a script store.
        max_documents_per_send: most documents in one send, over its messages.
        max_reply_bytes: most document bytes one get, browse or dead-letter page
            answers: a reply is built whole in the store's single thread, in the
            client buffer and in a web worker, so it must not grow with what a
            tenant stored. A single message bigger than this still comes alone.
        max_copies_per_request: most message copies one send or publish stores
            (messages x queues reached x subscribers), counted before it writes:
            one request's work on the shared store stays bounded.
        max_queues_per_tenant: most queue components of one tenant; every
            tenant's queues share one store and one maintenance loop.
        sync_min_replicas: replicas that must hold a send to a ``sync`` queue before
            it is answered, beside the local disk.
        sync_timeout_ms: how long a send to a ``sync`` queue waits for the disk (and
            the replicas) before NotDurable.
    """

    redelivery_delays_s: tuple[float, ...] = defaults.REDELIVERY_DELAYS_S
    dedupe_window_s: float = defaults.DEDUPE_WINDOW_S
    document_retention_s: float = defaults.DOCUMENT_RETENTION_S
    max_document_bytes: int = defaults.MAX_DOCUMENT_BYTES
    max_messages_per_send: int = defaults.MAX_MESSAGES_PER_SEND
    max_get: int = defaults.MAX_GET
    max_wait_ms: int = defaults.MAX_WAIT_MS
    chunk_size: int = defaults.CHUNK_SIZE
    max_subscribers: int = defaults.MAX_SUBSCRIBERS
    max_consumers: int = defaults.MAX_CONSUMERS
    max_documents_per_message: int = defaults.MAX_DOCUMENTS_PER_MESSAGE
    max_documents_per_send: int = defaults.MAX_DOCUMENTS_PER_SEND
    max_reply_bytes: int = defaults.MAX_REPLY_BYTES
    max_queues_per_tenant: int = defaults.MAX_QUEUES_PER_TENANT
    max_copies_per_request: int = defaults.MAX_COPIES_PER_REQUEST
    sync_min_replicas: int = defaults.MIN_REPLICAS
    sync_timeout_ms: int = defaults.SYNC_TIMEOUT_MS
    _delays_arg: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        delays = tuple(self.redelivery_delays_s)
        if not 1 <= len(delays) <= defaults.MAX_REDELIVERY_DELAYS or not all(
                _number_within(d, 0, defaults.MAX_REDELIVERY_DELAY_S) for d in delays):
            raise InvalidInput(
                f"redelivery_delays_s must be a list of 1 to {defaults.MAX_REDELIVERY_DELAYS} numbers, "
                f"each from 0 to {defaults.MAX_REDELIVERY_DELAY_S:g}",
                field="redelivery_delays_s",
            )
        for name, most in (("dedupe_window_s", defaults.MAX_DEDUPE_WINDOW_S),
                           ("document_retention_s", defaults.MAX_DOCUMENT_RETENTION_S)):
            value = getattr(self, name)
            # At least a millisecond: the scripts take these in whole ms, and a marker set
            # for 0 ms (SET PX 0) is an error that would refuse every de-duplicated send.
            if not _number_within(value, 0.001, most):
                raise InvalidInput(f"{name} must be a number from 0.001 to {most:g}", field=name)
        object.__setattr__(self, "redelivery_delays_s", delays)
        object.__setattr__(self, "_delays_arg", ",".join(str(round(d * 1000)) for d in delays))

    @property
    def delays_ms_arg(self) -> str:
        """The schedule as the scripts take it: milliseconds, comma-separated."""
        return self._delays_arg


def _number_within(value: object, least: float, most: float) -> bool:
    """Whether ``value`` is a finite int or float (not a bool) from ``least`` to ``most``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and least <= value <= most
