"""The listener supervisor: schedules executions as rq jobs while queues have ready messages.

Every node runs one; each listener is supervised by one node at a time,
the holder of that listener's lease, which moves when its node dies. A
round, for each listener it holds: count the executions that outlived their
deadline as lost (their messages come back by the ack time-out), then
schedule as many executions as the ready messages need (one per
``batch_size``) and the free slots allow, each as an rq job on the tenant's
own rq queue. The job carries the listener, the execution id, the main
node's URL and a short-lived token, never a document or a tenant key.

A slot is held from scheduling until the execution finishes; a job that
waits in rq longer than ``start_within_s`` is dropped by rq and its slot
freed (it had taken no messages, so it counts as nothing). A work horse that
dies is seen through its rq job's status, or, when its worker died with it,
through the worker's silence (``liveness.silent_workers``: seconds), and
counted as a failure.

A listener whose engine has no live worker anywhere (``atomq.workers.liveness``)
is marked ``waiting``, with what is missing as its last error, in the same
script call as its round; it runs again by itself once a worker is alive.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis
from rq import Queue
from rq.job import Job, JobStatus

from atomq import defaults
from atomq.errors import AtomqError, InvalidInput, NotFound
from atomq.platform import QueueServer
from atomq.platform.background import MAX_BACKOFF_S, HealthBoard, run_loop
from atomq.platform.listeners.deployed import ListenerSpec, ListenerStore, ScheduleCall
from atomq.platform.listeners.execution_batches import ExecutionBatches
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.lease import Lease
from atomq.tenants.execution_tokens import ExecutionTokens
from atomq.workers.liveness import SPARK_WORKER_FIELD, WorkerLiveness, WorkerProblems, silent_workers

log = logging.getLogger("atomq.supervisor")

WAKE_SPACING_S = 0.02
"""The least rest between the end of one round and the start of the next when finished executions
wake it: under many executions a second, rounds do not run back to back, and each one sees every slot
freed meanwhile; a wake-up that comes later (the one execution of an exclusive queue, which ends
every few hundred ms) gets its round at once."""

DEFINITIONS_REFRESH_S = 5.0
"""How long a supervisor goes on with the listeners' definitions it read while their version stays
the same (``keys.LISTENERS_VERSION_KEY``): the bound on how late it sees a change that did not move
the version."""

EXECUTION_FUNCTION = "atomq.workers.execution.run"
SUPERVISION_PART = "listener supervision"
"""The name ``/v1/ready`` gives the supervisor's loop when it fails."""
DEAD_JOB_STATES = {JobStatus.FAILED.value, JobStatus.STOPPED.value, JobStatus.CANCELED.value}


@dataclass(frozen=True)
class SupervisorConfig:
    """How executions are scheduled; see ``atomq serve --help``."""

    api_url: str
    execution_timeout_s: int = defaults.EXECUTION_TIMEOUT_S
    start_within_s: int = 300
    failed_job_ttl_s: int = 3600
    lease_ttl_s: float = 10.0
    max_send_documents: int = defaults.MAX_SEND_DOCUMENTS
    prune_interval_s: float = 30.0
    worker_liveness: bool = False
    """Mark listeners whose engine has no live worker ``waiting`` (a node does; a test
    that runs the executions itself, in its own process, does not)."""


@dataclass(frozen=True)
class Definitions:
    """Every listener's definition as a supervisor read them, and when and at what version."""

    tenants: list[str]
    version: bytes | None
    read_at: float
    listed: list[tuple[str, str, ListenerSpec]]


class Supervisor:
    """Supervises the listeners whose leases this holder wins."""

    def __init__(self, queues: QueueServer, tokens: ExecutionTokens, rq_connection: redis.Redis,
                 config: SupervisorConfig, holder: str, tenant_exists: Callable[[str], bool],
                 spark_weight: Callable[[str], int] = lambda tenant: 1) -> None:
        self.queues = queues
        self.listeners = ListenerStore(queues.storage)
        self.batches = ExecutionBatches(queues.storage)
        self.tokens = tokens
        self.rq = rq_connection
        self.config = config
        self.holder = holder
        self.tenant_exists = tenant_exists
        self.spark_weight = spark_weight
        self._leases: dict[tuple[str, str], tuple[Lease, float, bool]] = {}
        self._definitions: Definitions | None = None
        self._pruned_at = time.monotonic()
        self.liveness = WorkerLiveness(rq_connection, WorkerProblems(queues.storage)) if config.worker_liveness \
            else None

    # -- leases ---------------------------------------------------------------------------

    def _held(self, listeners: list[tuple[str, str]], now: float) -> list[bool]:
        """Whether we supervise each of ``listeners``: a lease is tried again every third of its
        life, all that are due in one round trip."""
        due = []
        for key in listeners:
            entry = self._leases.get(key)
            if entry is None:
                lease = Lease(self.queues.storage, lk.listener_lease_name(*key), self.holder, self.config.lease_ttl_s)
                entry = self._leases[key] = (lease, 0.0, False)
            if now - entry[1] >= self.config.lease_ttl_s / 3:
                due.append(key)
        if due:
            for key, held in zip(due, Lease.acquire_all(self.queues.storage, [self._leases[key][0] for key in due])):
                self._leases[key] = (self._leases[key][0], now, held)
        return [self._leases[key][2] for key in listeners]

    def release_all(self) -> None:
        """Gives up every lease (on a clean stop), so another node takes over at once."""
        for lease, _, held in self._leases.values():
            if held:
                try:
                    lease.release()
                except AtomqError:
                    pass
        self._leases.clear()

    # -- rounds ---------------------------------------------------------------------------

    def round(self) -> int:
        """One pass over every listener; the number of executions scheduled. Each step reads or
        runs what it needs for all the listeners at once, so a round takes a few round trips to
        the store however many listeners there are (one a listener each, a round of 1,000 idle
        ones took 0.4 s: BENCHMARKS.md)."""
        now = time.monotonic()
        tenants, version = self.listeners.index()
        if now - self._pruned_at >= self.config.prune_interval_s:
            self._prune_rq_queues(set(tenants))
            self._pruned_at = now
        listed = self._listed(tenants, version, now)
        held = self._held([(tenant, name) for tenant, name, _ in listed], now)
        scheduled = self._supervise([entry for entry, ours in zip(listed, held) if ours])
        for gone in set(self._leases) - {(tenant, name) for tenant, name, _ in listed}:
            lease, _, ours = self._leases.pop(gone)
            if ours:
                lease.release()
        return scheduled

    def _listed(self, tenants: list[str], version: bytes | None, now: float) -> list[tuple[str, str, ListenerSpec]]:
        """Every listener with its definition: read again only when a listener was deployed or
        deleted since (the version moved), the tenants changed, or ``DEFINITIONS_REFRESH_S``
        passed (for a change whose version did not move: see ``ListenerStore._changed``; an
        older atomq moves none)."""
        read = self._definitions
        if read is None or (read.tenants, read.version) != (tenants, version) or \
                now - read.read_at >= DEFINITIONS_REFRESH_S:
            read = self._definitions = Definitions(tenants, version, now, [
                (tenant, name, spec) for tenant, specs in self.listeners.specs(tenants).items()
                for name, spec in specs.items()])
        return read.listed

    def _supervise(self, listeners: list[tuple[str, str, ListenerSpec]]) -> int:
        if not listeners:
            return 0
        for (tenant, name, _), waiting in zip(listeners, self.listeners.waiting_executions(
                [(tenant, name) for tenant, name, _ in listeners])):
            if waiting:
                try:
                    self._notice_dead_work_horses(tenant, name, waiting)
                except AtomqError as exc:
                    log.warning("supervising listener %s of %s failed: %s", name, tenant, exc.code)
        calls = [ScheduleCall(tenant, name, spec, k.TenantKeys(tenant).queue(spec.queue).destination(spec.subscriber),
                              f"x{uuid.uuid4().hex[:24]}",
                              self.liveness.waiting_for(spec.engine) if self.liveness is not None else "")
                 for tenant, name, spec in listeners]
        scheduled = 0
        rq_failure: redis.RedisError | None = None
        for call, result in zip(calls, self.listeners.schedule_all(calls, self.config.start_within_s * 1000)):
            try:
                if isinstance(result, AtomqError):
                    raise result
                ids, lost = result
                if lost:
                    log.warning("listener %s of %s: %d execution(s) lost", call.name, call.tenant, lost)
                if ids:
                    self._enqueue(call.tenant, call.name, ids, call.spec.engine)
                scheduled += len(ids)
            except AtomqError as exc:
                log.warning("supervising listener %s of %s failed: %s", call.name, call.tenant, exc.code)
            except redis.RedisError as exc:
                # Each listener's executions were scheduled with the others': each gets its enqueue
                # (one that fails frees its slots), and the round then fails as rq's Redis did.
                rq_failure = rq_failure or exc
        if rq_failure is not None:
            raise rq_failure
        return scheduled

    def _enqueue(self, tenant: str, name: str, execution_ids: list[str], engine: str) -> None:
        """One rq job per execution on the tenant's rq queue of the listener's engine; if rq's
        Redis refuses them, the executions are given up at once (they took nothing) rather
        than holding their slots."""
        c = self.config
        spark = engine == "spark"
        queue = Queue(lk.rq_spark_queue_name(tenant) if spark else lk.rq_queue_name(tenant), connection=self.rq)
        meta = {"tenant": tenant, "weight": self.spark_weight(tenant)} if spark else None
        token_ttl = c.start_within_s + c.execution_timeout_s + 60
        try:
            # Every time, not once per process: rq's Redis may have restarted empty.
            self.rq.sadd(lk.RQ_TENANTS_KEY, tenant)
            with self.rq.pipeline() as pipe:
                for execution in execution_ids:
                    token = self.tokens.mint(tenant, name, execution, token_ttl)
                    queue.enqueue_call(
                        EXECUTION_FUNCTION,
                        kwargs={"api_url": c.api_url, "listener": name, "execution": execution, "token": token,
                                "max_send_documents": c.max_send_documents},
                        job_id=execution, timeout=c.execution_timeout_s, result_ttl=0, ttl=c.start_within_s,
                        failure_ttl=c.failed_job_ttl_s, description=f"listener {name}", meta=meta,
                        pipeline=pipe)
                pipe.execute()
        except redis.RedisError:
            for execution in execution_ids:
                self.listeners.expire_execution(tenant, name, execution)
            raise

    def _prune_rq_queues(self, tenants: set[str]) -> None:
        """Drops the rq queues of deleted tenants, so that workers stop watching them and
        their jobs go. A tenant leaves the listener index only when it is deleted; its
        existence is checked again, after the rq set was read, before anything goes."""
        for raw in self.rq.smembers(lk.RQ_TENANTS_KEY):
            tenant = raw.decode() if isinstance(raw, bytes) else raw
            if tenant not in tenants and not self.tenant_exists(tenant):
                for queue_name in (lk.rq_queue_name(tenant), lk.rq_spark_queue_name(tenant)):
                    Queue(queue_name, connection=self.rq).delete(delete_jobs=True)
                self.rq.srem(lk.RQ_TENANTS_KEY, tenant)

    def _notice_dead_work_horses(self, tenant: str, name: str, waiting: list[str]) -> None:
        """Executions whose rq job failed or vanished, or whose worker went silent, count as
        over now, not at their deadline: a started one's work horse died (killed, out of
        memory, timed out, or gone with its worker and machine) and counts as lost; one that
        never started (its job failed before taking a batch, or rq dropped it) just frees its
        slot. ``waiting``: the executions the listener waits for."""
        with self.rq.pipeline(transaction=False) as pipe:
            for execution in waiting:
                pipe.hmget(Job.key_for(execution), ["status", "worker_name", SPARK_WORKER_FIELD])
            jobs = [[v.decode() if v is not None else None for v in job] for job in pipe.execute()]
        started = [(fork, spark) for status, fork, spark in jobs if status == JobStatus.STARTED.value]
        silent = silent_workers(self.rq, {f for f, _ in started if f}, {s for _, s in started if s})
        for execution, (status, fork, spark) in zip(waiting, jobs):
            orphaned = status == JobStatus.STARTED.value and (fork in silent or spark in silent)
            if orphaned:
                # Nobody is left to finish or delete the job (a Spark worker keeps its job without an
                # expiry while it runs it): it stays to be looked at as long as a failed one, then goes.
                self.rq.expire(Job.key_for(execution), self.config.failed_job_ttl_s)
            if status is None or status in DEAD_JOB_STATES or orphaned:
                self.listeners.expire_execution(tenant, name, execution)
                self._fail_batch(tenant, execution)

    def _fail_batch(self, tenant: str, execution: str) -> None:
        """The batch of an execution whose work horse died fails now, not at its ack deadline:
        its messages come back after the redelivery delay, at their place, before later ones
        on an exclusive queue (a consumer's checkpoint relies on that order)."""
        batch = self.batches.take(tenant, execution)
        if batch is None:
            return
        try:
            self.queues.nack(tenant, batch.queue, receipts=list(batch.receipts), subscriber=batch.subscriber,
                             reason="the execution's work horse died", consumer=batch.listener)
        except (NotFound, InvalidInput) as exc:
            # The queue (or subscriber) went meanwhile: nothing comes back; the other
            # executions of the round are still seen to.
            log.info("the batch of lost execution %s of %s could not be failed: %s", execution, tenant, exc.message)

    def run(self, stop: threading.Event, interval_s: float = 0.2, health: HealthBoard | None = None,
            max_backoff_s: float = MAX_BACKOFF_S) -> None:
        """Rounds until ``stop`` is set; a round that fails, whatever the error, is retried with
        back-off (up to ``max_backoff_s``) and reported on ``health`` as ``listener supervision``."""
        try:
            run_loop(SUPERVISION_PART, self.round, stop, interval_s, health, max_backoff_s=max_backoff_s,
                     pause=lambda timeout_s: self._pause(stop, timeout_s))
        finally:
            self.release_all()

    def _pause(self, stop: threading.Event, timeout_s: float) -> None:
        """Waits for the next round: ``timeout_s``, or less when an execution ends meanwhile (its slot
        is free, and on an exclusive queue the next execution waits for it). Called as a round ends."""
        round_ended = time.monotonic()
        try:
            if self.listeners.wait_for_wake(self.holder, timeout_s):
                spacing = round_ended + WAKE_SPACING_S - time.monotonic()
                if spacing > 0:
                    stop.wait(spacing)  # the executions that end meanwhile share the round
        except AtomqError:
            stop.wait(timeout_s)  # the round itself will report the store's failure
