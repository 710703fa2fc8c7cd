"""The node's HTTP API on gunicorn, configured in code: the application, its threaded
worker and its logger.

gunicorn's threaded workers serve the API: a blocking get holds one thread,
not the process. Each worker process connects to the store and builds its own
services after the fork (``Node.load``), then runs its background loops
(``atomq.node.worker_loops``). No gunicorn config file or command line of its own.
"""

from __future__ import annotations

import errno
import math
import socket
import threading
import uuid
from collections import Counter
from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger
from gunicorn.workers.gthread import _DEFER as DEFER  # what handle() answers to send a connection back to the poller
from gunicorn.workers.gthread import ThreadWorker

from atomq import defaults, telemetry
from atomq.api import create_app
from atomq.api.auth import METRICS_PUBLIC
from atomq.api.metrics import METRICS_MAX_QUEUES, METRICS_MAX_TENANTS, METRICS_WAIT_S
from atomq.api.services import LongPollLimiter, Services
from atomq.node import answer_date, keepalive, refusals, slow_clients
from atomq.node.request_buffers import BodyBudget
from atomq.node.config import NodeConfig
from atomq.node.master import NodeArbiter
from atomq.node.worker_loops import start_loops, stop_loops
from atomq.platform import QueueServer
from atomq.platform.background import HEALTH_EXTENSION, HealthBoard
from atomq.platform.store.connection import open_redis
from atomq.tenants import TenantStore

HEALTH_DIR = "health"
"""Under the data directory: each HTTP worker's record of its failing loops (see ``HealthBoard``)."""


def build_services(config: NodeConfig, redis_url: str, owner_key: str, node_id: str) -> Services:
    """A worker's own connection and services (never shared across a fork)."""
    client = open_redis(redis_url, allow_eviction=config.allow_eviction)
    return Services(
        queues=QueueServer(client),
        tenants=TenantStore(client, owner_key),
        longpolls=LongPollLimiter(config.max_longpolls_per_tenant),
        node_id=node_id,
        execution_run_within_ms=(config.execution_timeout_s + defaults.EXECUTION_GRACE_S) * 1000,
    )


class NodeLogger(Logger):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn's logger, its lines in the format of atomq's own (``--log-format``)."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        telemetry.adopt_handlers(self.error_log)


class NodeWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn's threaded worker that also ends long-polls when told to stop."""

    loops: tuple[list[threading.Thread], threading.Event] | None = None
    open_by_address: Counter[str]
    limits: slow_clients.Limits
    bodies: BodyBudget
    lingering: keepalive.Lingering

    def init_process(self) -> None:
        refusals.install()
        answer_date.install()
        self.open_by_address = Counter()
        c = self.app.config
        self.limits = slow_clients.Limits(head_deadline_s=c.head_deadline_s, body_deadline_s=c.body_deadline_s,
                                          max_body_bytes=c.max_request_bytes)
        self.bodies = BodyBudget(self.limits.address_body_bytes)
        self.lingering = keepalive.Lingering(self.cfg.threads)
        super().init_process()

    def accept(self, listener: Any) -> None:
        """gunicorn's accept, with the connections of one client address bounded
        (``slow_clients.MAX_CONNECTIONS_PER_ADDRESS``); it runs in the worker's main thread, as
        every close does, so the count needs no lock."""
        try:
            sock, client = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        if self.open_by_address[slow_clients.address_of(client)] >= slow_clients.MAX_CONNECTIONS_PER_ADDRESS:
            slow_clients.refuse_connection(sock)
            return
        self.nr_conns += 1
        sock.setblocking(True)
        self.enqueue_req(slow_clients.CountedConn(self.cfg, sock, client, listener.getsockname(),
                                                  self.open_by_address, self.bodies, self.limits))

    def handle(self, conn: Any) -> Any:
        """Serves the connection's request, then its next ones while they come within
        ``keepalive.LINGER_S`` of each answer and another thread is idle (``atomq.node.keepalive``)."""
        if self.cfg.is_ssl or self.cfg.http2_cleartext != "off" or conn.is_http2:
            return super().handle(conn)
        self.lingering.enter()
        try:
            while True:
                kept = self.handle_one(conn)
                if (kept is not True or not self.alive or not self.lingering.may_linger()
                        or not keepalive.next_request_within(conn, keepalive.LINGER_S)):
                    return kept
        finally:
            self.lingering.leave()

    def handle_one(self, conn: Any) -> Any:
        """A thread parses a request only once its head and body are in (``slow_clients``); until
        then the connection waits on gunicorn's poller, as gunicorn's own deferred connections do."""
        conn.init()
        step = slow_clients.next_step(conn, self.limits, self.bodies)
        if step is slow_clients.Step.CLOSE:
            return False  # answered (408, 413, 503): gunicorn closes it
        if step is slow_clients.Step.WAIT:
            if not self.alive:  # gunicorn would take the deferral for a kept-alive connection, and spin
                slow_clients.refuse_stopping(conn)
                return False
            return DEFER
        result = super().handle(conn)
        conn.request_done()
        return result

    def handle_exit(self, sig: int, frame: Any) -> None:
        wsgi = getattr(self, "wsgi", None)  # absent while the worker is still loading the app
        if wsgi is not None:
            wsgi.extensions["atomq"].stopping.set()
        super().handle_exit(sig, frame)


class Node(BaseApplication):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn, configured in code: no gunicorn config file or command line of its own."""

    def __init__(self, config: NodeConfig, redis_url: str, owner_key: str, rq_redis_url: str,
                 listener: socket.socket) -> None:
        self.config = config
        self.listener = listener
        # Spelled once: gunicorn reads the configuration again on SIGHUP, and rebinds if it changed.
        self.bind = f"fd://{listener.fileno()}"
        self.redis_url = redis_url
        self.rq_redis_url = rq_redis_url
        self.owner_key = owner_key
        # One id for the node, shared by its workers: rate-limit windows are per node.
        self.node_id = f"n_{uuid.uuid4().hex[:12]}"
        super().__init__()

    def load_config(self) -> None:
        c = self.config
        settings = {
            "bind": self.bind,  # bound by lifecycle.serve, which found the port free
            "workers": c.http_workers,
            "worker_class": f"{__name__}.NodeWorker",
            "threads": c.threads,
            "keepalive": 5,
            "timeout": 60,
            "graceful_timeout": math.ceil(c.shutdown_timeout_s),
            "post_worker_init": start_loops,
            "worker_exit": stop_loops,
            "accesslog": None,  # requests carry keys in headers; nothing about them is logged
            "errorlog": "-",
            "logger_class": f"{__name__}.NodeLogger",
            "loglevel": "info",
            "proc_name": "atomq",
            "control_socket_disable": True,  # one per user home: several nodes on a machine would share it
        }
        for name, value in settings.items():
            self.cfg.set(name, value)

    def load(self) -> Flask:
        # In each HTTP worker, after gunicorn's fork: the span processor's thread is this process's own.
        telemetry.setup_tracing()
        services = build_services(self.config, self.redis_url, self.owner_key, self.node_id)
        c = self.config
        app = create_app(services, {"MAX_CONTENT_LENGTH": c.max_request_bytes, METRICS_PUBLIC: c.metrics_public,
                                    METRICS_MAX_TENANTS: c.metrics_max_tenants,
                                    METRICS_MAX_QUEUES: c.metrics_max_queues, METRICS_WAIT_S: c.metrics_wait_s})
        app.extensions[HEALTH_EXTENSION] = HealthBoard(c.data_dir / HEALTH_DIR)
        return app

    def run(self) -> None:
        # gunicorn takes the socket (and closes it when it stops): this object lets go of it.
        self.listener.detach()
        NodeArbiter(self).run()
