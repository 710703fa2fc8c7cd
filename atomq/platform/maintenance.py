"""The periodic work of the queue server: finishing removals, moving due
redeliveries, failing expired deliveries and purging documents past retention.

Gets do the first two for their own queue; this loop does all of it for
every tenant, so counts stay true for queues nobody reads and retention
holds. Every step is an idempotent script, so two nodes running it at once
waste work but break nothing; the main node runs it under a lease so that
normally only one does.

:class:`Maintenance` is the work (a tenant's round, the full sweep and purge,
the migration from format 1); :func:`run_maintenance` is the loop, which
works through the ``QueueServer`` (as :class:`Maintained`: the server composes this module, so
this module names only what it uses of the server).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from atomq.errors import NotFound, StorageError
from atomq.platform.background import MAX_BACKOFF_S, HealthBoard, describe, run_loop
from atomq.platform.queues.components import Components
from atomq.platform.queues.dead_letter_targets import STALE_ERRORS, DeadLetterTargets
from atomq.platform.queues.move_tasks import MoveTasks
from atomq.platform.queues.names import check_tenant_id
from atomq.platform.queues.send_journal import STALE_MS, SendJournals
from atomq.platform.shared import ChunkBudget, Shared, docs_and_config, queue_not_found
from atomq.platform.store import keys as k
from atomq.platform.store.format_version import FORMAT_VERSION, record_format
from atomq.platform.store.lease import Lease
from atomq.platform.watch import store_sizes
from atomq.platform.watch.audit import repair_usage
from atomq.platform.watch.nodes import NodeRecords

log = logging.getLogger("atomq.maintenance")

CHUNKS_PER_TENANT_ROUND = 20
"""Chunk scripts (of ``QueueSettings.chunk_size`` messages) one tenant's maintenance may run in one
round: ~10,000 messages a second each for sweeps, purges and removals, however much is due."""

MIGRATION_LOCK_S = 600
"""How long one node may hold the format migration before another may take it over."""

MAINTENANCE_PART = "maintenance"
"""The name ``/v1/ready`` gives the maintenance loop when it fails."""


TENANTS_PER_READ = 100
"""Tenants whose due work one pipelined round trip reads."""


@dataclass(frozen=True)
class DueWork:
    """One tenant's maintenance due now: destinations (by index name) to sweep, destinations
    holding messages past the retention, removals under way, the bytes of expired
    de-duplication markers just taken off its usage, the chunked sends whose requests left
    them untouched (``send_journal``: their journals' names), and move tasks to step."""

    due: list[str]
    old: list[str]
    removals: list[str]
    marker_bytes: int
    journals: list[str] = field(default_factory=list)
    moves: list[str] = field(default_factory=list)
    """Move tasks (``move_tasks``) whose next step is due, by id."""


class Maintained(store_sizes.Measured, Protocol):
    """What the maintenance loop works through: the queue server's round of one tenant and the due
    work of many, and what a measurement of the stores reads."""

    def due_work(self, tenants: Sequence[str], limit: int = 100) -> dict[str, DueWork]: ...

    def maintain(self, tenant: str, work: DueWork | None = None) -> dict[str, int]: ...


class Maintenance:
    """The maintenance work of every tenant, one idempotent script at a time."""

    def __init__(self, shared: Shared, components: Components, targets: DeadLetterTargets, moves: MoveTasks) -> None:
        self._shared = shared
        self._components = components
        self._targets = targets
        self._moves = moves
        self._journals = SendJournals(shared)

    def migrate_older_format(self) -> None:
        """Recounts every tenant's usage with the bookkeeping and builds its due indexes
        (what format 1 lacked; data of format 2 needs nothing more, and the recount is the check).

        One node migrates, under an expiring lock; a node that starts meanwhile waits
        until the data is in this format. The recount is exact only while nothing
        writes: run the upgrade while no older node still serves the store.
        """
        client = self._shared.client
        holder = f"{socket.gethostname()}:{os.getpid()}"
        if not self._shared.storage.call(client.set, k.FORMAT_MIGRATION_KEY, holder, nx=True,
                                         ex=MIGRATION_LOCK_S):
            deadline = time.monotonic() + MIGRATION_LOCK_S
            while int(self._shared.storage.call(client.get, k.FORMAT_VERSION_KEY) or 0) < FORMAT_VERSION:
                if time.monotonic() > deadline:
                    raise StorageError("another node has been migrating the data to this atomq's format for "
                                       f"{MIGRATION_LOCK_S} s: see its log, or remove {k.FORMAT_MIGRATION_KEY}")
                time.sleep(0.5)
            return
        try:
            for tenant in self._components.tenants():
                repair_usage(client, tenant)
                self.sweep(tenant)
                self.purge(tenant)
            record_format(client)
        finally:
            self._shared.storage.call(client.delete, k.FORMAT_MIGRATION_KEY)

    def sweep(self, tenant: str) -> int:
        """Moves due redeliveries to ready and fails expired deliveries of every queue.

        Visits every destination and sets each one's place in the due index:
        the maintenance round visits only the due ones (:meth:`maintain`);
        this full walk is for the format migration and for operators.
        Returns the number of messages moved.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        return sum(self._sweep(tk, qk, d) for qk, d in self._components.all_destinations(tk))

    def _sweep(self, tk: k.TenantKeys, qk: k.QueueKeys, d: k.DestinationKeys,
               budget: ChunkBudget | None = None) -> int:
        moved = 0
        s = self._shared.settings

        def chunk(target: list[str]) -> int:
            return int(self._shared.storage.run(
                "sweep", docs_and_config(tk, qk) + d.as_list() + [tk.usage, tk.due, tk.oldest, tk.seq, *target],
                [s.delays_ms_arg, s.chunk_size, d.member],
                errors={"NOQUEUE": lambda _: queue_not_found(qk.name), **STALE_ERRORS}))
        while budget is None or budget.take():
            try:
                n = self._targets.retrying(tk, qk, chunk)
            except NotFound:
                return moved  # removed since it was indexed; the script took it out of the indexes
            moved += n
            if n < s.chunk_size:
                return moved
        return moved  # what is still due stays in the due index: the next round goes on

    def _retention_cutoff_ms(self) -> int:
        seconds, micros = self._shared.storage.call(self._shared.client.time)
        return int(seconds * 1000 + micros // 1000 - round(self._shared.settings.document_retention_s * 1000))

    def purge(self, tenant: str) -> int:
        """Removes every message, queued or dead, whose documents are past the retention,
        visiting every destination and setting each one's place in the index of oldest
        messages (the maintenance round visits only those past the retention).

        Documents are created with their message, so a message id (which
        starts with its send time) dates its documents. Returns the count removed.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        cutoff_ms = self._retention_cutoff_ms()
        return sum(self._purge(tk, qk, d, cutoff_ms) for qk, d in self._components.all_destinations(tk))

    def _purge(self, tk: k.TenantKeys, qk: k.QueueKeys, d: k.DestinationKeys, cutoff_ms: int,
               budget: ChunkBudget | None = None) -> int:
        removed = self._shared.drain(tk, docs_and_config(tk, qk), d, "drop", "older", bound=str(cutoff_ms),
                                     budget=budget)
        self._shared.storage.run("oldest", [d.all, tk.oldest], [d.member])  # what is left past it: next round
        return removed

    def due_work(self, tenants: Sequence[str], limit: int = 100) -> dict[str, DueWork]:
        """What each tenant's maintenance has to do now, read from its indexes for all of
        ``tenants`` in one round trip (one a node on a cluster); takes expired de-duplication markers off their usage."""
        args = [round(self._shared.settings.document_retention_s * 1000), limit, STALE_MS]
        calls = [(t, k.TenantKeys(check_tenant_id(t))) for t in tenants]
        keys = {t: [tk.due, tk.oldest, tk.marker_ledger, tk.usage, tk.deleting, tk.send_journals, tk.move_tasks(due=True)]
                for t, tk in calls}
        replies = self._shared.storage.run_many("due", [(keys[tenant], args) for tenant, _ in calls])
        out = {}
        for (tenant, _), reply in zip(calls, replies):
            if isinstance(reply, Exception):  # that call failed (run_many already ran a missing script again): once more alone, to raise its error
                reply = self._shared.storage.run("due", keys[tenant], args)
            due, old, removals, freed, stale, moves = reply
            out[tenant] = DueWork(due=[m.decode() for m in due], old=[m.decode() for m in old],
                                  removals=[m.decode() for m in removals], marker_bytes=int(freed),
                                  journals=[m.decode() for m in stale], moves=[m.decode() for m in moves])
        return out

    def maintain(self, tenant: str, work: DueWork | None = None) -> dict[str, int]:
        """One round of maintenance for one tenant: finishes chunked sends their requests left
        and removals, sweeps the destinations that have something due, purges those holding
        messages past the retention, and steps the move tasks that are due.

        Visits only what the tenant's indexes say is due, so an idle queue costs
        nothing and a tenant with many queues does not slow the others' rounds; and
        runs at most ``CHUNKS_PER_TENANT_ROUND`` chunk scripts, so neither does a
        tenant with much to purge or remove: the rest waits for the next round.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        if work is None:
            work = self.due_work([tenant])[tenant]
        budget = ChunkBudget(CHUNKS_PER_TENANT_ROUND)
        sends = sum(self._journals.resume(tk, name, budget) for name in work.journals)
        finished = sum(self._components.finish_removal(tk, marker, budget) for marker in work.removals)
        moved = sum(self._sweep(tk, *tk.destination_named(m), budget) for m in work.due)
        purged = 0
        if work.old:
            cutoff_ms = self._retention_cutoff_ms()
            purged = sum(self._purge(tk, *tk.destination_named(m), cutoff_ms, budget) for m in work.old)
        tasks_moved = sum(self._moves.step(tk, task, budget) for task in work.moves)
        return {"removals": finished, "moved": moved, "purged": purged, "marker_bytes": work.marker_bytes,
                "sends_finished": sends, "tasks_moved": tasks_moved}


def maintain_all(qs: Maintained) -> dict[str, int]:
    """One round of maintenance over every tenant; returns the totals.

    Reads what is due from each tenant's indexes, a hundred tenants a round
    trip, and works only on that: a round costs about one script call per
    idle tenant, whatever its number of queues.
    """
    totals = {"removals": 0, "moved": 0, "purged": 0, "marker_bytes": 0, "sends_finished": 0, "tasks_moved": 0}
    tenants = qs.tenants()
    for start in range(0, len(tenants), TENANTS_PER_READ):
        for tenant, work in qs.due_work(tenants[start:start + TENANTS_PER_READ]).items():
            if not (work.due or work.old or work.removals or work.marker_bytes or work.journals or work.moves):
                continue
            try:
                for name, count in qs.maintain(tenant, work).items():
                    totals[name] += count
            except Exception as exc:  # one tenant's trouble must not hold up every other tenant's round
                _report_tenant_failure(tenant, exc)
    return totals


_reported: dict[str, str] = {}


def _report_tenant_failure(tenant: str, exc: Exception) -> None:
    """Logs one tenant's failed maintenance, with its traceback once per distinct error
    (a store that is away fails the next round's read of due work, which /v1/ready reports)."""
    text = describe(exc)
    if _reported.get(tenant) == text:
        log.debug("maintenance of tenant %s failed again: %s", tenant, text)
        return
    if len(_reported) > 10_000:
        _reported.clear()
    _reported[tenant] = text
    log.warning("maintenance of tenant %s failed: %s", tenant, text, exc_info=exc)


def run_maintenance(qs: Maintained, stop: threading.Event, interval_s: float = 1.0,
                    lease: Lease | None = None, before_round: Callable[[], object] | None = None,
                    job_queue_bytes: Callable[[], int] | None = None, health: HealthBoard | None = None,
                    max_backoff_s: float = MAX_BACKOFF_S) -> None:
    """Runs :func:`maintain_all` every ``interval_s`` until ``stop`` is set; every
    ``store_sizes.MEASURE_EVERY_S`` it also measures the temporary and job scheduler stores and
    drops the records of nodes not heard from for ``nodes.FORGET_S``.

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
                NodeRecords(qs.storage).forget_silent()

    try:
        run_loop(MAINTENANCE_PART, one_round, stop, interval_s, health, max_backoff_s=max_backoff_s)
    finally:
        if lease is not None:
            try:
                lease.release()
            except Exception as exc:  # its time-out frees it anyway
                log.warning("could not release the maintenance lease: %s", describe(exc))
