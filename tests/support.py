"""Helpers shared by the test modules (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from typing import Any

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer, QueueSettings
from atomq.platform import keys as k
from atomq.platform.audit import audit_tenant

FAST = QueueSettings(redelivery_delays_s=(0.05, 0.1, 0.15), dedupe_window_s=60)
"""A fast redelivery schedule: 0.05, 0.1 and 0.15 s, the last repeating."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def msg(*texts: str | bytes, dedupe_id: str | None = None, **props: str) -> OutgoingMessage:
    return OutgoingMessage(documents=tuple(OutgoingDocument(t) for t in texts), properties=props,
                           dedupe_id=dedupe_id)


def assert_audit_clean(client: Any, tenants: set[str] | None = None) -> None:
    """Every audited invariant holds for ``tenants`` (default: every tenant of the store):
    what ``atomq audit`` checks, asserted at the end of each test on a real server."""
    names = tenants if tenants is not None else {t.decode() for t in client.smembers(k.TENANTS_KEY)}
    found = {t: p for t in sorted(names) if (p := audit_tenant(client, t))}
    assert not found, f"atomq audit finds broken invariants: {found}"


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Polls ``predicate`` until it holds; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def pid_running(pid: int) -> bool:
    """True while pid runs (a zombie that nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


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


def dead_all(qs: QueueServer, tenant: str, queue: str, limit: int = 100) -> list:
    """Every dead letter, page by page."""
    return _all_pages(lambda after: qs.dead_letters(tenant, queue, limit=limit, after=after))


def counts(qs: QueueServer, tenant: str, queue: str) -> tuple[int, int, int]:
    """(depth, in_flight, dead_letters) of a queue."""
    info = qs.get_queue(tenant, queue)
    return info.depth, info.in_flight, info.dead_letters
