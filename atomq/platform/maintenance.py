"""The periodic work of the queue server: finishing removals, moving due
redeliveries, failing expired deliveries and purging documents past retention.

Gets do the first two for their own queue; this loop does all of it for
every tenant, so counts stay true for queues nobody reads and retention
holds. Every step is an idempotent script, so two nodes running it at once
waste work but break nothing; the main node runs it under a lease so that
normally only one does.
"""

from __future__ import annotations

import logging
import threading

from atomq.errors import AtomqError
from atomq.platform.queue_server import QueueServer

log = logging.getLogger("atomq.maintenance")


def maintain_all(qs: QueueServer) -> dict[str, int]:
    """One round of maintenance over every tenant; returns the totals."""
    totals = {"removals": 0, "moved": 0, "purged": 0}
    for tenant in qs.tenants():
        try:
            for name, count in qs.maintain(tenant).items():
                totals[name] += count
        except AtomqError as exc:
            log.warning("maintenance of tenant %s failed: %s", tenant, exc.message)
    return totals


def run_maintenance(qs: QueueServer, stop: threading.Event, interval_s: float = 1.0) -> None:
    """Runs :func:`maintain_all` every ``interval_s`` until ``stop`` is set."""
    while not stop.is_set():
        totals = maintain_all(qs)
        if any(totals.values()):
            log.info("maintenance: %s", totals)
        stop.wait(interval_s)
