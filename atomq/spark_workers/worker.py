"""``atomq spark-worker``: runs the executions of ``engine: "spark"`` listeners on one SparkSession.

The supervisor schedules a Spark listener's executions as rq jobs on the
tenant's Spark queue, like the fork engine's; this worker takes them from
the tenants' queues in turn and runs each in a thread of its own, in the
tenant's FAIR scheduler pool (named after the tenant, weighted by its
``spark_weight``), so a tenant with a large backlog cannot starve the
others. An execution talks to the main node exactly as a work horse does
(``atomq.workers.execution``): its batch, its sends, its finish; only the
process runs as a DataFrame pipeline. Jobs are not forked: a Spark job is
already isolated in the cluster, and the session is shared. While it runs it
heartbeats (``atomq.workers.liveness``): without a live Spark worker, Spark
listeners wait and say why.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from pyspark import InheritableThread
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.job import JobStatus

from atomq import defaults, telemetry
from atomq.errors import ExecutionTimeLimit
from atomq.platform.store import listener_keys as lk
from atomq.spark_workers.processes import run_on_spark, spark_alive
from atomq.spark_workers.writes import ExecutorSink
from atomq.workers import execution, liveness

log = logging.getLogger("atomq.spark_worker")

WAIT_S = 2


class FairPools:
    """The session's FAIR pools, one per tenant, with the tenant's weight.

    Spark makes a pool on first use with weight 1; atomq makes it first,
    with the weight, through the scheduler's root pool. Spark's pools cannot
    change weight, and a pool replaced while task sets wait in it strands
    them: a changed weight applies when the Spark worker restarts.
    """

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self._lock = threading.Lock()

    def ensure(self, tenant: str, weight: int) -> None:
        sc = self.spark.sparkContext
        root = sc._jsc.sc().taskScheduler().rootPool()
        with self._lock:
            if root.getSchedulableByName(tenant) is not None:
                return
            jvm = sc._jvm
            root.addSchedulable(jvm.org.apache.spark.scheduler.Pool(
                tenant, jvm.org.apache.spark.scheduler.SchedulingMode.FAIR(), 0, weight))


class TimeLimit:
    """Cancels an execution's Spark jobs once it has run for its time limit.

    A fork execution past its limit is killed with its work horse; a Spark
    execution shares the worker, so its job group is cancelled instead
    (interrupting its tasks), and the execution fails as one that ran too
    long: its messages count a failed delivery, as when a work horse dies.
    """

    def __init__(self, sc: Any, group: str, seconds: float) -> None:
        self.seconds = seconds
        self.expired = threading.Event()
        self._sc, self._group = sc, group
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        self.expired.set()
        self._sc.cancelJobGroup(self._group)

    def run(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            if self.expired.is_set():
                raise ExecutionTimeLimit(f"the execution ran past its time limit of {self.seconds:g} s "
                                         "and its Spark jobs were cancelled") from None
            raise

    def cancel(self) -> None:
        self._timer.cancel()


class SparkWorker:
    """Takes Spark executions from the tenants' queues in turn; at most ``concurrency`` at once."""

    def __init__(self, rq_connection: redis.Redis, spark: Any, concurrency: int = 4) -> None:
        self.rq = rq_connection
        self.spark = spark
        self.pools = FairPools(spark)
        self.slots = threading.BoundedSemaphore(concurrency)
        self.threads: list[threading.Thread] = []
        self._order: list[str] = []
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._beat_at = -liveness.SPARK_HEARTBEAT_S
        self._running: dict[str, str] = {}
        """Execution id -> ``<tenant>/<listener>``: what each heartbeat says it runs."""
        self._running_lock = threading.Lock()
        """The executions' threads change ``_running`` while the heartbeat reads it."""

    def _queues(self) -> list[Queue]:
        tenants = sorted(t.decode() if isinstance(t, bytes) else t for t in self.rq.smembers(lk.RQ_TENANTS_KEY))
        names = [lk.rq_spark_queue_name(t) for t in tenants]
        # Round-robin: keep the rotation of the tenants already known, add the new ones.
        self._order = [n for n in self._order if n in names] + [n for n in names if n not in self._order]
        return [Queue(n, connection=self.rq) for n in self._order]

    def take(self, wait_s: int = WAIT_S) -> bool:
        """Waits up to ``wait_s`` for a free slot and a job and starts it; True when one started."""
        if not self.slots.acquire(timeout=wait_s):
            return False
        try:
            queues = self._queues()
            result = Queue.dequeue_any(queues, wait_s, connection=self.rq) if queues else None
        except DequeueTimeout:
            result = None
        if result is None:
            self.slots.release()
            return False
        job, queue = result
        self._order.remove(queue.name)
        self._order.append(queue.name)
        thread = InheritableThread(target=self._execute, args=(job,), name=f"atomq-spark-{job.id}", daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()
        return True

    def _execute(self, job: Any) -> None:
        try:
            # Started and kept, as rq's own worker does: the supervisor reads a job that is
            # gone or failed as an execution that is lost.
            job.set_status(JobStatus.STARTED)
            self.rq.hset(job.key, liveness.SPARK_WORKER_FIELD, self.name)  # its heartbeat vouches for the job
            self.rq.persist(job.key)
            tenant, weight = job.meta["tenant"], int(job.meta.get("weight", 1))
            with self._running_lock:
                self._running[job.id] = f"{tenant}/{(job.kwargs or {}).get('listener', '?')}"
            self.pools.ensure(tenant, weight)
            sc = self.spark.sparkContext
            # Both are properties of this thread: its Spark jobs run in the tenant's pool, in a
            # job group of their own that the time limit can cancel.
            sc.setLocalProperty("spark.scheduler.pool", tenant)
            sc.setJobGroup(job.id, f"atomq execution {job.id}", interruptOnCancel=True)
            # The supervisor gives every job --execution-timeout; one without takes rq's own default, as rq would.
            limit = TimeLimit(sc, job.id, float(job.timeout or Queue.DEFAULT_TIMEOUT))
            try:
                execution.run(**job.kwargs, runner=lambda name, ctx: limit.run(
                    run_on_spark, self.spark, name, ctx, self._sink(job.kwargs)))
            finally:
                limit.cancel()
        except Exception as exc:  # the supervisor sees the execution lost; the worker goes on
            log.warning("Spark execution %s failed: %s", job.id, type(exc).__name__)
        finally:
            with self._running_lock:
                self._running.pop(job.id, None)
            job.delete()
            self.slots.release()

    @staticmethod
    def _sink(kwargs: dict[str, Any]) -> ExecutorSink:
        """Where the executors send the execution's outputs: the node and token its job names,
        with the trace headers of the execution's span (made by ``execution.run`` before the process)."""
        return ExecutorSink(kwargs["api_url"], kwargs["token"],
                            int(kwargs.get("max_send_documents", defaults.MAX_SEND_DOCUMENTS)),
                            telemetry.trace_headers())

    def run(self, stop: threading.Event) -> None:
        """Works until ``stop`` is set (or the SparkContext is gone: the worker then exits and
        whoever runs it starts another), then lets the running executions finish. Executions
        are traced as a work horse's are (``execution.run``); nothing forks here, so the
        provider's own atexit flush sends the last spans."""
        telemetry.setup_tracing()
        try:
            while not stop.is_set() and spark_alive(self.spark):
                try:
                    self._heartbeat()
                    self.take()
                except redis.RedisError as exc:
                    log.warning("rq's Redis failed: %s", exc)
                    stop.wait(WAIT_S)
            for thread in self.threads:
                thread.join()
        finally:
            try:
                liveness.spark_gone(self.rq, self.name)
            except redis.RedisError:
                pass  # its heartbeat runs out on its own

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._beat_at >= liveness.SPARK_HEARTBEAT_S:
            with self._running_lock:
                running = sorted(self._running.values())
            liveness.spark_heartbeat(self.rq, self.name, running)
            self._beat_at = now
