"""The background loops of each HTTP worker process: the maintenance loop and the
listener supervisor, under leases, so that only their holders (one node or worker at a
time, per listener) do the work; and the overview's sampler, which samples while its
process holds the maintenance lease.

Each runs under ``run_loop``: an error makes it back off and shows in ``/v1/ready``
(each worker records its failing loops in ``DIR/health``, which every worker reads),
never ends it.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

from flask import Flask

from atomq.api.services import Services
from atomq.node.config import NodeApp
from atomq.node.rq_redis import rq_client
from atomq.platform.background import HEALTH_EXTENSION, HealthBoard
from atomq.platform.maintenance import run_maintenance
from atomq.platform.store import keys as k
from atomq.platform.store import lease as leases
from atomq.platform.store.lease import Lease
from atomq.platform.watch.overview import OverviewStore, Sampler, run_sampler
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from atomq.workers.worker import job_queue_bytes


class LoopsWorker(Protocol):
    """What the loops read of an HTTP worker (``http_server.NodeWorker``, whose module imports this one)."""

    wsgi: Flask
    app: NodeApp
    loops: tuple[list[threading.Thread], threading.Event] | None


MAINTENANCE_LEASE_TTL_S = 10.0


def start_loops(worker: LoopsWorker) -> None:
    """gunicorn's ``post_worker_init``: starts the maintenance loop and the listener
    supervisor of one HTTP worker process."""
    services: Services = worker.wsgi.extensions["atomq"]
    health: HealthBoard = worker.wsgi.extensions[HEALTH_EXTENSION]
    node = worker.app
    config = node.config
    holder = f"{services.node_id}:{os.getpid()}"
    lease = Lease(services.queues.storage, k.MAINTENANCE_LEASE, holder, ttl_s=MAINTENANCE_LEASE_TTL_S)
    rq = rq_client(node.rq_redis_url)
    supervisor = Supervisor(
        services.queues, services.tenants.execution_tokens, rq,
        SupervisorConfig(api_url=config.api_url, execution_timeout_s=config.execution_timeout_s,
                         max_send_documents=config.max_send_documents, worker_liveness=True), holder,
        services.tenants.exists,
        spark_weight=lambda tenant: services.tenants.get(tenant).spark_weight)
    stop = threading.Event()
    threads = [
        threading.Thread(target=run_maintenance, name="atomq-maintenance", daemon=True,
                         args=(services.queues, stop, config.maintenance_interval_s, lease,
                               services.current_settings, lambda: job_queue_bytes(rq), health)),
        threading.Thread(target=supervisor.run, name="atomq-supervisor", daemon=True,
                         kwargs={"stop": stop, "health": health}),
        threading.Thread(target=run_sampler, name="atomq-overview", daemon=True, args=(
            Sampler(services.queues, services.tenants.list, services.listeners),
            OverviewStore(services.queues.storage),
            lambda: leases.holder(services.queues.storage, k.MAINTENANCE_LEASE) == holder, stop)),
    ]
    for thread in threads:
        thread.start()
    worker.loops = (threads, stop)


def stop_loops(server: Any, worker: LoopsWorker) -> None:
    """gunicorn's ``worker_exit``: stops the loops, which give up their leases."""
    if worker.loops is not None:
        threads, stop = worker.loops
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        worker.wsgi.extensions[HEALTH_EXTENSION].close()
