"""The queue server as tests drive it: a fast redelivery schedule, messages in one call, whole listings."""

from __future__ import annotations

from collections.abc import Callable

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer, QueueSettings

FAST = QueueSettings(redelivery_delays_s=(0.05, 0.1, 0.15), dedupe_window_s=60)
"""A fast redelivery schedule: 0.05, 0.1 and 0.15 s, the last repeating."""


def msg(*texts: str | bytes, dedupe_id: str | None = None, **props: str) -> OutgoingMessage:
    return OutgoingMessage(documents=tuple(OutgoingDocument(t) for t in texts), properties=props,
                           dedupe_id=dedupe_id)


def _all_pages(fetch: Callable[[str | None], object]) -> list:
    items, cursor = [], None
    while True:
        page = fetch(cursor)
        items += page.items  # type: ignore[attr-defined]
        if page.next is None:  # type: ignore[attr-defined]
            return items
        cursor = page.next  # type: ignore[attr-defined]


def browse_all(qs: QueueServer, tenant: str, queue: str, limit: int = 100) -> list:
    """Every queued message, page by page."""
    return _all_pages(lambda after: qs.browse(tenant, queue, limit=limit, after=after))


def dead_all(qs: QueueServer, tenant: str, queue: str, limit: int = 100, reason: str | None = None) -> list:
    """Every dead letter (of that reason), page by page."""
    return _all_pages(lambda after: qs.dead_letters(tenant, queue, limit=limit, after=after, reason=reason))


def counts(qs: QueueServer, tenant: str, queue: str) -> tuple[int, int, int]:
    """(depth, in_flight, dead_letters) of a queue."""
    info = qs.get_queue(tenant, queue)
    return info.depth, info.in_flight, info.dead_letters
