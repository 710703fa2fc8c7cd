"""An in-process node with a supervisor and a Spark worker on the tests' Spark session: Spark
listeners' executions run in the test's own process, a round at a time, so a test sees each end."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rq import Queue, SimpleWorker

from atomq.platform.store import listener_keys as lk
from atomq.spark_workers.worker import SparkWorker
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from support.in_process_node import InProcessNode, NodeHarness


@dataclass
class Harness(NodeHarness):
    """The node's harness and the Spark worker that runs its Spark listeners' executions."""

    worker: SparkWorker


@contextmanager
def spark_harness(spark: Any, where: Path, owner_key: str, holder: str, execution_timeout_s: float,
                  concurrency: int) -> Iterator[Harness]:
    with InProcessNode(where, owner_key) as node:
        services = node.services
        supervisor = Supervisor(services.queues, services.tenants.execution_tokens, node.rq,
                                SupervisorConfig(api_url=node.url, execution_timeout_s=execution_timeout_s),
                                holder=holder, tenant_exists=services.tenants.exists,
                                spark_weight=lambda t: services.tenants.get(t).spark_weight)
        yield Harness(node.url, services, supervisor, node.rq, node.owner,
                      SparkWorker(node.rq, spark, concurrency=concurrency))


def drive(h: Harness, tenant: str, done: Callable[[], bool], what: str, timeout: float,
          forks: bool = False) -> None:
    """Supervision rounds and Spark executions (and with ``forks`` the tenant's fork executions,
    for comparison) until ``done``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        h.services.queues.maintain(tenant)
        h.supervisor.round()
        while h.worker.take(wait_s=1):
            pass
        for t in h.worker.threads:
            t.join()
        if forks:
            SimpleWorker([Queue(lk.rq_queue_name(tenant), connection=h.rq)], connection=h.rq).work(
                burst=True, logging_level="WARNING")
