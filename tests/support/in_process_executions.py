"""Listener executions of an in-process node, run in the test's own process.

Supervision rounds schedule the executions as rq jobs; rq's SimpleWorker
runs them here, without forking, so a test sees every step finish.
"""

from __future__ import annotations

from collections.abc import Callable

from rq import Queue, SimpleWorker

from atomq.platform.store import listener_keys as lk
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from support.in_process_node import InProcessNode
from support.waiting import wait_until


def run_executions(node: InProcessNode, tenant: str, done: Callable[[], bool], what: str = "the executions",
                   timeout: float = 20) -> None:
    """Maintenance, supervision rounds and the tenant's scheduled executions until ``done()``."""
    supervisor = Supervisor(node.services.queues, node.services.tenants.execution_tokens, node.rq,
                            SupervisorConfig(api_url=node.url, execution_timeout_s=30), holder="test-node",
                            tenant_exists=node.services.tenants.exists)
    queue = Queue(lk.rq_queue_name(tenant), connection=node.rq)

    def step() -> bool:
        node.services.queues.maintain(tenant)
        supervisor.round()
        SimpleWorker([queue], connection=node.rq).work(burst=True, logging_level="WARNING")
        return bool(done())

    wait_until(step, timeout, what)
