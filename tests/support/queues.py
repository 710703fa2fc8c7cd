"""The queue server as tests drive it: a fast redelivery schedule, messages in one call, whole listings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from atomq.errors import StorageError
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer, QueueSettings
from atomq.platform.queues import send_journal
from atomq.platform.queues.routes import OrderWait
from atomq.platform.shared import ChunkBudget
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage

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


def die_after_steps(monkeypatch: pytest.MonkeyPatch, steps: int) -> None:
    """A chunked or staged send's node dies after its first ``steps`` steps: the call raises
    StorageError and leaves its journal, untouched, to the maintenance (which finishes journals
    with a budget of its own, so only the request's own call dies)."""
    real = send_journal.SendJournals.finish

    def some_steps(self: send_journal.SendJournals, tk: k.TenantKeys, name: str, record: str,
                   budget: ChunkBudget | None = None) -> send_journal.Finished:
        if budget is None:
            real(self, tk, name, record, ChunkBudget(steps))
            raise StorageError("the node died")
        return real(self, tk, name, record, budget)

    monkeypatch.setattr(send_journal.SendJournals, "finish", some_steps)


def send_after_script(qs: QueueServer, tenant: str, queue: str, messages: list[OutgoingMessage],
                      monkeypatch: pytest.MonkeyPatch, when: Callable[[str], bool]) -> tuple[list[list[str]], list[str]]:
    """Once, right after the first script call whose name ``when`` takes, another call sends ``messages``
    to ``queue``. Returns the ids that send got (filled once it returns) and the scripts the store
    refused with ORDERWAIT (an ordered destination a stepped send still owed), in order."""
    real_run, sent, refused = Storage.run, [], []

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_run(self, name, *args, **kwargs)
        except OrderWait:
            refused.append(name)
            raise
        finally:
            if when(name) and not sent:
                sent.append([])
                sent[0] += qs.send(tenant, queue, messages)

    monkeypatch.setattr(Storage, "run", run)
    return sent, refused
