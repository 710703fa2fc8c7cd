"""The main node, ``atomq serve``: the HTTP API on a threaded WSGI server,
the maintenance loop and the listener supervisor under leases, the execution
workers (``--workers N``, 2 by default, and a Spark worker once a Spark
listener exists: ``atomq.workers.node_workers``), and (unless given a Redis
URL) the embedded Valkey that holds the data.

gunicorn's threaded workers serve the API: a blocking get holds one thread,
not the process. The embedded Valkey belongs to the master process; each
worker process connects to it, builds its own services after the fork and
runs the maintenance loop and the supervisor, whose work only the holders of
the leases (one node or worker at a time, per listener) actually do. The
execution workers are ``atomq worker`` processes started by the master.

Those loops run under ``run_loop``: an error makes one back off and shows in
``/v1/ready`` (each worker records its failing loops in ``DIR/health``, which
every worker reads), never ends it. The master holds the data directory's
lock (``DIR/atomq.lock``) for the node's life, so that no second node, audit
or selftest starts another Valkey on the node's files.

On SIGTERM: the execution workers finish their executions (which still need
the API) and stop; then the HTTP workers stop taking connections, end their
long-polls (within a second), finish the requests in flight, stop their
loops and give up their leases; then the master stops the embedded Valkey,
which fsyncs.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.glogging import Logger
from gunicorn.workers.gthread import ThreadWorker

from atomq import defaults, telemetry
from atomq.api import create_app
from atomq.api.auth import METRICS_PUBLIC
from atomq.api.metrics import METRICS_MAX_QUEUES, METRICS_MAX_TENANTS
from atomq.api.services import LongPollLimiter, Services
from atomq.errors import InvalidInput, StorageError
from atomq.platform import QueueServer
from atomq.platform import keys as k
from atomq.platform.background import HEALTH_EXTENSION, HealthBoard
from atomq.platform.connection import open_redis
from atomq.platform.data_dir import DataDirLock
from atomq.platform.embedded import EmbeddedValkey
from atomq.platform.lease import Lease
from atomq.platform.maintenance import run_maintenance
from atomq.platform.storage import Storage
from atomq.tenants import TenantStore
from atomq.workers.node_workers import NodeWorkers, WorkerPlan
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from atomq.workers.worker import job_queue_bytes

log = logging.getLogger("atomq.node")

OWNER_KEY_ENV = "ATOMQ_OWNER_KEY"


@dataclass(frozen=True)
class NodeConfig:
    """How ``atomq serve`` runs; see ``atomq serve --help`` for each setting."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 61717
    redis_url: str | None = None
    allow_eviction: bool = False
    http_workers: int = 2
    threads: int = 32
    max_longpolls_per_tenant: int = 8
    max_request_bytes: int = 10 * 1024 * 1024
    shutdown_timeout_s: float = 20.0
    maintenance_interval_s: float = 1.0
    workers: int = 2
    rq_redis_url: str | None = None
    advertise_url: str | None = None
    execution_timeout_s: int = 240
    max_send_documents: int = 100
    spark: str = "on_demand"
    """``on_demand``: start the Spark worker once a Spark listener exists; ``at_start``; ``never``."""
    spark_master: str = "local[*]"
    metrics_public: bool = False
    metrics_max_tenants: int = defaults.METRICS_MAX_TENANTS
    metrics_max_queues: int = defaults.METRICS_MAX_QUEUES

    @property
    def api_url(self) -> str:
        """The URL work horses reach this node at."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"


MIN_OWNER_KEY_CHARS = 32


def load_owner_key(data_dir: Path) -> tuple[str, Path | None]:
    """The owner key from ``ATOMQ_OWNER_KEY``, else from ``DIR/owner.key`` (made 0600 on first start).

    A key shorter than MIN_OWNER_KEY_CHARS is refused (InvalidInput): the owner key opens
    every tenant's data, and a short one falls to guessing.
    """
    key = os.environ.get(OWNER_KEY_ENV, "").strip()
    if key:
        return _long_enough(key, OWNER_KEY_ENV), None
    path = data_dir / "owner.key"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return _long_enough(path.read_text().strip(), str(path)), path
    with os.fdopen(fd, "w") as f:
        f.write(f"aq_owner_{secrets.token_urlsafe(32)}\n")
    return path.read_text().strip(), path


def _long_enough(key: str, source: str) -> str:
    if len(key) < MIN_OWNER_KEY_CHARS:
        raise InvalidInput(
            f"the owner key in {source} has {len(key)} characters; it needs at least {MIN_OWNER_KEY_CHARS}. "
            "Make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'", field=source)
    return key


def build_services(config: NodeConfig, redis_url: str, owner_key: str, node_id: str) -> Services:
    """A worker's own connection and services (never shared across a fork)."""
    client = open_redis(redis_url, allow_eviction=config.allow_eviction)
    return Services(
        queues=QueueServer(client),
        tenants=TenantStore(client, owner_key),
        longpolls=LongPollLimiter(config.max_longpolls_per_tenant),
        node_id=node_id,
        execution_run_within_ms=(config.execution_timeout_s + 60) * 1000,
    )


RQ_SOCKET_TIMEOUT_S = 30.0
"""Above rq's own blocking waits (a worker waits at most a few seconds at a time)."""


def rq_client(url: str) -> redis.Redis:
    """A client of rq's Redis that connects on first use, so a node whose rq Redis
    is away for a moment still serves the API (its supervisor retries each round)."""
    return redis.Redis.from_url(url, socket_timeout=RQ_SOCKET_TIMEOUT_S, socket_connect_timeout=5)


def rq_connection(url: str) -> redis.Redis:
    """rq's Redis, checked: a standalone server (rq does not speak Redis Cluster)."""
    client = rq_client(url)
    try:
        cluster = int(client.info("cluster").get("cluster_enabled", 0)) == 1
    except redis.RedisError as exc:
        client.close()
        raise StorageError(f"cannot use rq's Redis: {type(exc).__name__}: {exc}") from None
    if cluster:
        client.close()
        raise InvalidInput("rq needs a standalone Redis for its job queues, not a cluster: give --rq-redis-url",
                           field="rq_redis_url")
    return client


class NodeLogger(Logger):  # type: ignore[misc]
    """gunicorn's logger, its lines in the format of atomq's own (``--log-format``)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        telemetry.adopt_handlers(self.error_log)


class NodeWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's threaded worker that also ends long-polls when told to stop."""

    loops: tuple[list[threading.Thread], threading.Event] | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        wsgi = getattr(self, "wsgi", None)  # absent while the worker is still loading the app
        if wsgi is not None:
            wsgi.extensions["atomq"].stopping.set()
        super().handle_exit(sig, frame)


MAINTENANCE_LEASE_TTL_S = 10.0
HEALTH_DIR = "health"
"""Under the data directory: each HTTP worker's record of its failing loops (see ``HealthBoard``)."""
MASTER_STORE_TIMEOUT_S = 2.0
"""The master's loop reads the store (is there a Spark listener yet?); it must never hang there."""


def _start_loops(worker: NodeWorker) -> None:
    """The maintenance loop and the listener supervisor of one HTTP worker process, each under
    ``run_loop``: an error makes it back off and shows in ``/v1/ready``, never ends it."""
    services: Services = worker.wsgi.extensions["atomq"]
    health: HealthBoard = worker.wsgi.extensions[HEALTH_EXTENSION]
    node: Node = worker.app
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
    ]
    for thread in threads:
        thread.start()
    worker.loops = (threads, stop)


def _stop_loops(server: Any, worker: NodeWorker) -> None:
    if worker.loops is not None:
        threads, stop = worker.loops
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        worker.wsgi.extensions[HEALTH_EXTENSION].close()


class Node(BaseApplication):  # type: ignore[misc]
    """gunicorn, configured in code: no gunicorn config file or command line of its own."""

    def __init__(self, config: NodeConfig, redis_url: str, owner_key: str, rq_redis_url: str) -> None:
        self.config = config
        self.redis_url = redis_url
        self.rq_redis_url = rq_redis_url
        self.owner_key = owner_key
        # One id for the node, shared by its workers: rate-limit windows are per node.
        self.node_id = f"n_{uuid.uuid4().hex[:12]}"
        super().__init__()

    def load_config(self) -> None:
        c = self.config
        settings = {
            "bind": f"{c.host}:{c.port}",
            "workers": c.http_workers,
            "worker_class": "atomq.node.NodeWorker",
            "threads": c.threads,
            "keepalive": 5,
            "timeout": 60,
            "graceful_timeout": math.ceil(c.shutdown_timeout_s),
            "post_worker_init": _start_loops,
            "worker_exit": _stop_loops,
            "accesslog": None,  # requests carry keys in headers; nothing about them is logged
            "errorlog": "-",
            "logger_class": "atomq.node.NodeLogger",
            "loglevel": "info",
            "proc_name": "atomq",
            "control_socket_disable": True,  # one per user home: several nodes on a machine would share it
        }
        for name, value in settings.items():
            self.cfg.set(name, value)

    def load(self) -> Any:
        # In each HTTP worker, after gunicorn's fork: the span processor's thread is this process's own.
        telemetry.setup_tracing()
        services = build_services(self.config, self.redis_url, self.owner_key, self.node_id)
        c = self.config
        app = create_app(services, {"MAX_CONTENT_LENGTH": c.max_request_bytes, METRICS_PUBLIC: c.metrics_public,
                                    METRICS_MAX_TENANTS: c.metrics_max_tenants,
                                    METRICS_MAX_QUEUES: c.metrics_max_queues})
        app.extensions[HEALTH_EXTENSION] = HealthBoard(c.data_dir / HEALTH_DIR)
        return app

    def run(self) -> None:
        NodeArbiter(self).run()


class NodeArbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's master, which also keeps the node's execution workers running
    (:class:`NodeWorkers`) and stops them first, while the API they report to still answers."""

    def __init__(self, app: Node) -> None:
        super().__init__(app)
        self.node = app
        c = app.config
        self._store: Storage | None = None
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

    def manage_workers(self) -> None:
        super().manage_workers()
        self.execution_workers.manage()

    def stop(self, graceful: bool = True) -> None:
        self.execution_workers.stop(self.node.config.shutdown_timeout_s)
        super().stop(graceful)


def serve(config: NodeConfig) -> None:
    """Runs the main node until SIGTERM or SIGINT; stops the embedded Valkey last.

    The node owns its data directory for its life: a second node, an audit or a
    selftest on it meets the lock (see ``atomq.platform.data_dir``).
    """
    lock = DataDirLock(config.data_dir)
    lock.acquire("serve")
    master = os.getpid()
    server = None
    try:
        owner_key, key_path = load_owner_key(config.data_dir)
        if key_path is not None:
            print(f"atomq: the owner key is in {key_path}", flush=True)
        health_dir = config.data_dir / HEALTH_DIR
        shutil.rmtree(health_dir, ignore_errors=True)  # a previous owner's workers are gone
        health_dir.mkdir(mode=0o700)
        redis_url = config.redis_url
        if redis_url is None:
            server = EmbeddedValkey(config.data_dir / "valkey")
            server.start()
            redis_url = server.url
            lock.note_valkey(server.socket_path, server.port)
            print(f"atomq: embedded Valkey (pid {server.pid}) keeps its data in {server.data_dir}", flush=True)
        else:
            lock.note_redis_url()
        # Fail here, once, on an unusable Redis or a newer data format; not in every worker.
        QueueServer(open_redis(redis_url, allow_eviction=config.allow_eviction)).client.close()
        rq_redis_url = config.rq_redis_url or redis_url
        rq_connection(rq_redis_url).close()
        print(f"atomq: serving http://{config.host}:{config.port}", flush=True)
        Node(config, redis_url, owner_key, rq_redis_url).run()
    finally:
        # gunicorn's forked workers leave through this frame too (SystemExit);
        # only the master owns the embedded Valkey and the directory.
        if os.getpid() == master:
            try:
                if server is not None:
                    server.stop()
            finally:
                lock.release()
