"""The node's master process: gunicorn's arbiter, which also keeps the node's execution
workers running (``atomq.workers.node_workers``) and stops them first, while the API
they report to still answers."""

from __future__ import annotations

import logging
import os
import socket
import time

import redis
from gunicorn.arbiter import Arbiter

from atomq import __version__
from atomq.node.config import NodeApp
from atomq.platform.store.connection import open_redis
from atomq.platform.store.storage import Storage
from atomq.platform.watch.nodes import BEAT_S, NodeRecord, NodeRecords
from atomq.workers.liveness import current_executions, spark_executions
from atomq.workers.node_workers import NodeWorkers, WorkerPlan

log = logging.getLogger("atomq.node")

MASTER_STORE_TIMEOUT_S = 2.0
"""The master's loop reads the store (is there a Spark listener yet?); it must never hang there."""
RQ_QUIET_S = 60.0
"""After rq's Redis failed to answer, the master's loop leaves it alone this long."""


class NodeArbiter(Arbiter):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn's master, which also keeps the node's execution workers running
    (:class:`NodeWorkers`) and stops them first, while the API they report to still answers."""

    def __init__(self, app: NodeApp) -> None:
        super().__init__(app)
        self.node = app
        c = app.config
        self._store: Storage | None = None
        self._started_at = time.time()
        self._next_beat = 0.0
        self._beat_failing = False
        self._rq: redis.Redis | None = None
        self._rq_quiet_until = 0.0
        self.execution_workers = NodeWorkers(
            WorkerPlan(fork_workers=c.workers, spark=c.spark, spark_master=c.spark_master,
                       rq_redis_url=app.rq_redis_url, error_dir=c.data_dir, node_id=app.node_id),
            self._storage)

    def _storage(self) -> Storage:
        """The master's own client of the store, made on first use (after gunicorn's first forks)."""
        if self._store is None:
            self._store = Storage(open_redis(self.node.redis_url, allow_eviction=self.node.config.allow_eviction,
                                             socket_timeout=MASTER_STORE_TIMEOUT_S,
                                             socket_connect_timeout=MASTER_STORE_TIMEOUT_S))
        return self._store

    def reap_workers(self) -> None:
        # A worker that dies in the moment between these two calls is still reaped by gunicorn, and
        # its status reads as 0; gunicorn runs this on SIGCHLD, after the death that raised it.
        self.execution_workers.collect_exits()
        super().reap_workers()

    def manage_workers(self) -> None:
        super().manage_workers()
        self.execution_workers.manage()
        self._beat()

    def _beat(self) -> None:
        """Rewrites the node's record (``atomq.platform.watch.nodes``) every ``BEAT_S``. Like ``manage``,
        it runs inside gunicorn's arbiter, which stops the node on any exception: a store that
        cannot be written is logged once, and tried again at the next beat."""
        now = time.monotonic()
        if now < self._next_beat:
            return
        self._next_beat = now + BEAT_S
        try:
            NodeRecords(self._storage()).beat(NodeRecord(
                id=self.node.node_id, url=self.node.config.api_url, version=__version__, pid=os.getpid(),
                started_at=self._started_at, workers=self.execution_workers.describe(self._executions())))
            if self._beat_failing:
                self._beat_failing = False
                log.info("the node's record is written again")
        except Exception as exc:
            if not self._beat_failing:
                self._beat_failing = True
                log.warning("cannot write the node's record (the overview shows it silent): %r", exc)

    def _executions(self) -> dict[int, str]:
        """What the node's fork workers run now, from rq's registry. While rq's Redis does not
        answer, the record goes without it, and the master's loop, which must not wait, asks again
        only a minute later."""
        if time.monotonic() < self._rq_quiet_until:
            return {}
        if self._rq is None:
            self._rq = redis.Redis.from_url(self.node.rq_redis_url, socket_timeout=MASTER_STORE_TIMEOUT_S,
                                            socket_connect_timeout=MASTER_STORE_TIMEOUT_S)
        try:
            return {**current_executions(self._rq), **spark_executions(self._rq, socket.gethostname())}
        except Exception as exc:  # the record goes without them
            self._rq_quiet_until = time.monotonic() + RQ_QUIET_S
            log.debug("cannot read what the execution workers run: %r", exc)
            return {}

    def stop(self, graceful: bool = True) -> None:
        self.execution_workers.stop(self.node.config.shutdown_timeout_s)
        try:
            NodeRecords(self._storage()).forget(self.node.node_id)
        except Exception as exc:  # the record then shows the node silent, and goes after nodes.FORGET_S
            log.warning("cannot remove the node's record: %r", exc)
        super().stop(graceful)
