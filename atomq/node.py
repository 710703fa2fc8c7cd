"""The main node, ``atomq serve``: the HTTP API on a threaded WSGI server,
the maintenance loop and the listener supervisor under leases, the execution
workers (``--workers N``), and (unless given a Redis URL) the embedded Valkey
that holds the data.

gunicorn's threaded workers serve the API: a blocking get holds one thread,
not the process. The embedded Valkey belongs to the master process; each
worker process connects to it, builds its own services after the fork and
runs the maintenance loop and the supervisor, whose work only the holders of
the leases (one node or worker at a time, per listener) actually do. The
execution workers are ``atomq worker`` processes started by the master.

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
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.glogging import Logger
from gunicorn.workers.gthread import ThreadWorker

from atomq import telemetry
from atomq.api import create_app
from atomq.api.auth import METRICS_PUBLIC
from atomq.api.metrics import DEFAULT_MAX_QUEUES, DEFAULT_MAX_TENANTS, METRICS_MAX_QUEUES, METRICS_MAX_TENANTS
from atomq.api.services import LongPollLimiter, Services
from atomq.errors import InvalidInput, StorageError
from atomq.platform import QueueServer
from atomq.platform import keys as k
from atomq.platform.connection import open_redis
from atomq.platform.embedded import EmbeddedValkey, parent_death_signal
from atomq.platform.lease import Lease
from atomq.platform.maintenance import run_maintenance
from atomq.tenants import TenantStore
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from atomq.workers.worker import job_queue_bytes

log = logging.getLogger("atomq.node")

OWNER_KEY_ENV = "ATOMQ_OWNER_KEY"
RQ_REDIS_URL_ENV = "ATOMQ_RQ_REDIS_URL"
RESPAWN_INTERVAL_S = 5.0


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
    workers: int = 0
    rq_redis_url: str | None = None
    advertise_url: str | None = None
    execution_timeout_s: int = 240
    max_send_documents: int = 100
    spark_worker: bool = False
    spark_master: str = "local[*]"
    metrics_public: bool = False
    metrics_max_tenants: int = DEFAULT_MAX_TENANTS
    metrics_max_queues: int = DEFAULT_MAX_QUEUES

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


def _start_loops(worker: NodeWorker) -> None:
    """The maintenance loop and the listener supervisor of one HTTP worker process."""
    services: Services = worker.wsgi.extensions["atomq"]
    node: Node = worker.app
    config = node.config
    holder = f"{services.node_id}:{os.getpid()}"
    lease = Lease(services.queues.storage, k.MAINTENANCE_LEASE, holder, ttl_s=MAINTENANCE_LEASE_TTL_S)
    rq = rq_client(node.rq_redis_url)
    supervisor = Supervisor(
        services.queues, services.tenants.execution_tokens, rq,
        SupervisorConfig(api_url=config.api_url, execution_timeout_s=config.execution_timeout_s,
                         max_send_documents=config.max_send_documents), holder, services.tenants.exists,
        spark_weight=lambda tenant: services.tenants.get(tenant).spark_weight)
    stop = threading.Event()
    threads = [
        threading.Thread(target=run_maintenance, name="atomq-maintenance", daemon=True,
                         args=(services.queues, stop, config.maintenance_interval_s, lease,
                               services.current_settings, lambda: job_queue_bytes(rq))),
        threading.Thread(target=supervisor.run, name="atomq-supervisor", daemon=True, args=(stop,)),
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
        return create_app(services, {"MAX_CONTENT_LENGTH": c.max_request_bytes, METRICS_PUBLIC: c.metrics_public,
                                     METRICS_MAX_TENANTS: c.metrics_max_tenants,
                                     METRICS_MAX_QUEUES: c.metrics_max_queues})

    def run(self) -> None:
        NodeArbiter(self).run()


class NodeArbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's master, which also keeps ``--workers N`` execution workers running
    and stops them first, while the API they report to still answers."""

    def __init__(self, app: Node) -> None:
        super().__init__(app)
        self.node = app
        self.execution_workers: list[subprocess.Popen[bytes]] = []
        self._spawned_at: list[float] = []

    def _spawn_execution_worker(self, index: int) -> subprocess.Popen[bytes]:
        """Worker ``index``: the Spark worker last (with --spark), fork workers before it."""
        # The URL may hold a password: it goes through the environment, never the command line.
        env = {**os.environ, RQ_REDIS_URL_ENV: self.node.rq_redis_url}
        command = [sys.executable, "-m", "atomq", "worker"]
        if index >= self.node.config.workers:
            command = [sys.executable, "-m", "atomq", "spark-worker", "--spark-master", self.node.config.spark_master]
        # Its own session: a terminal's Ctrl-C reaches the master, which stops the workers
        # first; and the master's death, even by kill -9, stops them too.
        return subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=parent_death_signal())

    def manage_workers(self) -> None:
        super().manage_workers()
        if getattr(self, "_stopping_execution_workers", False):
            return
        now = time.monotonic()
        for i, proc in enumerate(self.execution_workers):
            # One that keeps dying (rq's Redis away, say) is started again at most every few seconds.
            if proc.poll() is not None and now - self._spawned_at[i] >= RESPAWN_INTERVAL_S:
                log.warning("execution worker %d exited (%s); starting another", proc.pid, proc.returncode)
                self.execution_workers[i] = self._spawn_execution_worker(i)
                self._spawned_at[i] = now
        wanted = self.node.config.workers + (1 if self.node.config.spark_worker else 0)
        while len(self.execution_workers) < wanted:
            self.execution_workers.append(self._spawn_execution_worker(len(self.execution_workers)))
            self._spawned_at.append(now)

    def stop(self, graceful: bool = True) -> None:
        self._stopping_execution_workers = True
        for proc in self.execution_workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        timeout = self.node.config.shutdown_timeout_s
        for proc in self.execution_workers:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        super().stop(graceful)


def serve(config: NodeConfig) -> None:
    """Runs the main node until SIGTERM or SIGINT; stops the embedded Valkey last."""
    config.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    owner_key, key_path = load_owner_key(config.data_dir)
    if key_path is not None:
        print(f"atomq: the owner key is in {key_path}", flush=True)
    server = None
    master = os.getpid()
    redis_url = config.redis_url
    if redis_url is None:
        server = EmbeddedValkey(config.data_dir / "valkey")
        server.start()
        redis_url = server.url
        print(f"atomq: embedded Valkey (pid {server.pid}) keeps its data in {server.data_dir}", flush=True)
    try:
        # Fail here, once, on an unusable Redis or a newer data format; not in every worker.
        QueueServer(open_redis(redis_url, allow_eviction=config.allow_eviction)).client.close()
        rq_redis_url = config.rq_redis_url or redis_url
        rq_connection(rq_redis_url).close()
        print(f"atomq: serving http://{config.host}:{config.port}", flush=True)
        Node(config, redis_url, owner_key, rq_redis_url).run()
    finally:
        # gunicorn's forked workers leave through this frame too (SystemExit);
        # only the master owns the embedded Valkey.
        if server is not None and os.getpid() == master:
            server.stop()
