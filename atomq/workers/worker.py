"""``atomq worker``: rq's forking workers over every tenant's execution queue, round-robin.

Each tenant has its own rq queue; a worker takes them in turn (rq's
round-robin dequeue strategy), so a tenant with a deep backlog gets one
job in each turn, not every worker. Tenants come and go while a worker runs:
it re-reads the set of tenant queues before each wait, and waits at most
``refresh_s`` at a time so a new tenant's first job is seen within that.
Every job runs in its own forked work horse (rq's ``Worker``).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from rq import Queue, Worker
from rq.job import Job
from rq.worker import BaseWorker, DequeueStrategy

from atomq import telemetry
from atomq.errors import AtomqError
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.watch.store_sizes import memory_of
from atomq.workers import execution, processes  # noqa: F401  (execution: see preload)
from atomq.workers.liveness import JOB_MONITORING_INTERVAL_S

log = logging.getLogger("atomq.worker")

IDLE_QUEUE = f"{k.PREFIX}.idle"
"""Listened to while no tenant has a queue: rq needs at least one."""
REFRESH_S = 2


class TenantQueues(BaseWorker):
    """A worker whose queues are the tenants' execution queues, re-read before each wait.

    A mixin, so that the same choice of queues goes with rq's forking
    ``Worker`` (:class:`TenantWorker`) or, in tests and benchmarks, its ``SimpleWorker``.
    """

    refresh_s: int = REFRESH_S

    def _refresh_queues(self) -> None:
        tenants = self.connection.smembers(lk.RQ_TENANTS_KEY)
        names = sorted(lk.rq_queue_name(t.decode() if isinstance(t, bytes) else t) for t in tenants) or [IDLE_QUEUE]
        current = [q.name for q in self._ordered_queues]
        if set(names) == set(current):
            return
        kept = [q for q in self._ordered_queues if q.name in names]
        added = [Queue(n, connection=self.connection, serializer=self.serializer)
                 for n in names if n not in current]
        self._ordered_queues = kept + added
        self.queues = sorted(self._ordered_queues, key=lambda q: q.name)

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        if timeout is None:  # burst mode: one look at every queue, no wait
            self._refresh_queues()
            return super().dequeue_job_and_maintain_ttl(None, max_idle_time)
        while True:
            self._refresh_queues()
            result = super().dequeue_job_and_maintain_ttl(self.refresh_s, max_idle_time=self.refresh_s)
            if result is not None or self._stop_requested:
                return result


class TenantWorker(TenantQueues, Worker):
    """rq's forking worker (a work horse per execution) on the tenants' execution queues."""

    def perform_job(self, job: Job, queue: Queue, *args: Any, **kwargs: Any) -> bool:
        """Runs in the work horse, which rq ends with ``os._exit``: that skips the tracer
        provider's atexit flush, so the execution's spans are sent here (the rest of rq's
        arguments, which changed between versions, pass through)."""
        try:
            return bool(super().perform_job(job, queue, *args, **kwargs))
        finally:
            telemetry.flush()


def preload() -> None:
    """Imports, once, what every execution needs: each work horse is forked from this
    process and would otherwise import the HTTP client and every process again (~0.1 s
    a fork). ``execution`` is imported at the top of this module for the same reason."""
    for name in processes.FORK.registered():
        try:
            processes.FORK.load(name)
        except (ImportError, AttributeError, AtomqError) as exc:
            log.warning("process %s cannot be loaded: %s (its executions will fail)", name, exc)


def run_worker(rq_connection: redis.Redis, *, burst: bool = False, name: str | None = None,
               worker_class: type[TenantQueues] = TenantWorker) -> bool:
    """Works until stopped (SIGTERM or SIGINT: finish the running execution, then stop);
    True when it ran any execution. Tracing is set up here, before the work horses fork
    from this process (see ``telemetry.setup_tracing``)."""
    preload()
    telemetry.setup_tracing()
    # Its heartbeat while a work horse runs tells the nodes it is alive (see ``liveness``).
    worker = worker_class([IDLE_QUEUE], connection=rq_connection, name=name,
                          job_monitoring_interval=JOB_MONITORING_INTERVAL_S)
    worker._refresh_queues()
    return bool(worker.work(burst=burst, dequeue_strategy=DequeueStrategy.ROUND_ROBIN, logging_level="WARNING"))


def job_queue_bytes(rq_connection: redis.Redis) -> int:
    """Memory of the tenants' execution queues and the jobs waiting in them (rq's key names)."""
    keys: list[str] = []
    for raw in rq_connection.smembers(lk.RQ_TENANTS_KEY):
        tenant = raw.decode() if isinstance(raw, bytes) else raw
        for name in (lk.rq_queue_name(tenant), lk.rq_spark_queue_name(tenant)):
            queue = Queue(name, connection=rq_connection)
            keys.append(queue.key)
            keys += [Job.key_for(job_id) for job_id in queue.get_job_ids()]
    return memory_of(rq_connection, keys)
