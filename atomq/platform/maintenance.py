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
import time
from collections.abc import Callable

from atomq.errors import StorageError
from atomq.platform import store_sizes
from atomq.platform.background import MAX_BACKOFF_S, HealthBoard, describe, run_loop
from atomq.platform.lease import Lease
from atomq.platform.queue_server import QueueServer

log = logging.getLogger("atomq.maintenance")

MAINTENANCE_PART = "maintenance"
"""The name ``/v1/ready`` gives the maintenance loop when it fails."""


TENANTS_PER_READ = 100
"""Tenants whose due work one pipelined round trip reads."""


def maintain_all(qs: QueueServer) -> dict[str, int]:
    """One round of maintenance over every tenant; returns the totals.

    Reads what is due from each tenant's indexes, a hundred tenants a round
    trip, and works only on that: a round costs about one script call per
    idle tenant, whatever its number of queues.
    """
    totals = {"removals": 0, "moved": 0, "purged": 0, "marker_bytes": 0}
    tenants = qs.tenants()
    for start in range(0, len(tenants), TENANTS_PER_READ):
        for tenant, work in qs.due_work(tenants[start:start + TENANTS_PER_READ]).items():
            if not (work.due or work.old or work.removals or work.marker_bytes):
                continue
            try:
                for name, count in qs.maintain(tenant, work).items():
                    totals[name] += count
            except StorageError:
                raise  # the store, not the tenant: the whole round fails and says so in /v1/ready
            except Exception:  # one tenant's trouble must not hold up every other tenant's round
                log.warning("maintenance of tenant %s failed", tenant, exc_info=True)
    return totals


def run_maintenance(qs: QueueServer, stop: threading.Event, interval_s: float = 1.0,
                    lease: Lease | None = None, before_round: Callable[[], object] | None = None,
                    job_queue_bytes: Callable[[], int] | None = None, health: HealthBoard | None = None,
                    max_backoff_s: float = MAX_BACKOFF_S) -> None:
    """Runs :func:`maintain_all` every ``interval_s`` until ``stop`` is set, and
    measures the temporary and job scheduler stores every ``store_sizes.MEASURE_EVERY_S``.

    With a lease, only while this node holds it; the lease is given up on stop.
    ``before_round`` runs first each round (the node brings the shared server
    settings, such as the retention, up to date with it). ``job_queue_bytes``
    measures the execution job queues (see ``store_sizes.measure``). A round
    that fails, whatever the error, is retried with back-off (up to
    ``max_backoff_s``) and reported on ``health`` as the part ``maintenance``.
    """
    measured_at = float("-inf")

    def one_round() -> None:
        nonlocal measured_at
        if before_round is not None:
            before_round()
        if lease is None or lease.acquire():
            totals = maintain_all(qs)
            if any(totals.values()):
                log.info("maintenance: %s", totals)
            if time.monotonic() - measured_at >= store_sizes.MEASURE_EVERY_S:
                measured_at = time.monotonic()
                store_sizes.record(qs, store_sizes.measure(qs, job_queue_bytes))

    try:
        run_loop(MAINTENANCE_PART, one_round, stop, interval_s, health, max_backoff_s=max_backoff_s)
    finally:
        if lease is not None:
            try:
                lease.release()
            except Exception as exc:  # its time-out frees it anyway
                log.warning("could not release the maintenance lease: %s", describe(exc))
