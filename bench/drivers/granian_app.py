"""The node's WSGI app (the hot path in front of Flask, a node's services) for granian, built in each
granian worker from the environment that ``server_cost.py`` sets: ``wsgi_app`` for granian's WSGI
interface, and ``rsgi_app``, the same app behind an asyncio front that reads each body on the event
loop under a deadline (what the node's protections need of a server) before a thread runs the app.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from flask import Flask

from atomq import telemetry
from atomq.api import create_app
from atomq.api.auth import METRICS_PUBLIC
from atomq.api.metrics import METRICS_MAX_QUEUES, METRICS_MAX_TENANTS, METRICS_WAIT_S
from atomq.node.config import NodeConfig
from atomq.node.http_server import HEALTH_DIR, build_services
from atomq.platform.background import HEALTH_EXTENSION, HealthBoard

BODY_DEADLINE_S = 30.0


def wsgi_app() -> Flask:
    """What ``http_server.Node.load`` builds in a gunicorn worker, on the node's store and owner key."""
    c = NodeConfig(data_dir=Path(os.environ["BENCH_DATA_DIR"]))
    telemetry.setup_tracing()
    services = build_services(c, os.environ["BENCH_REDIS_URL"], os.environ["ATOMQ_OWNER_KEY"], "n_serverbench")
    app = create_app(services, {"MAX_CONTENT_LENGTH": c.max_request_bytes, METRICS_PUBLIC: c.metrics_public,
                                METRICS_MAX_TENANTS: c.metrics_max_tenants,
                                METRICS_MAX_QUEUES: c.metrics_max_queues, METRICS_WAIT_S: c.metrics_wait_s})
    app.extensions[HEALTH_EXTENSION] = HealthBoard(c.data_dir / HEALTH_DIR)
    return app


class RsgiFront:
    """An RSGI callable: the body is read on the event loop (a deadline, an early 413 from the
    announced length), then one of ``threads`` threads runs the WSGI app on the whole body."""

    def __init__(self, app: Flask, threads: int, max_body: int) -> None:
        self.app = app
        self.max_body = max_body
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="wsgi")

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        headers = scope.headers
        length = headers.get("content-length")
        if length is not None and int(length) > self.max_body:
            protocol.response_bytes(413, [("content-type", "application/json"), ("connection", "close")],
                                    b'{"error": {"code": "too_large", "message": "", "details": {}}}')
            return
        try:
            body = await asyncio.wait_for(protocol(), BODY_DEADLINE_S)
        except asyncio.TimeoutError:
            protocol.response_bytes(408, [("content-type", "application/json"), ("connection", "close")],
                                    b'{"error": {"code": "request_timeout", "message": "", "details": {}}}')
            return
        environ = self.environ(scope, headers, body)
        status, out_headers, out = await asyncio.get_running_loop().run_in_executor(self.pool, self.call, environ)
        protocol.response_bytes(status, out_headers, out)

    def environ(self, scope: Any, headers: Any, body: bytes) -> dict[str, Any]:
        host, _, port = scope.server.rpartition(":")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": scope.method, "SCRIPT_NAME": "", "PATH_INFO": scope.path,
            "QUERY_STRING": scope.query_string, "SERVER_NAME": host, "SERVER_PORT": port,
            "SERVER_PROTOCOL": f"HTTP/{scope.http_version}", "REMOTE_ADDR": scope.client.rpartition(":")[0],
            "wsgi.version": (1, 0), "wsgi.url_scheme": scope.scheme, "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": True,
            "wsgi.run_once": False, "CONTENT_LENGTH": str(len(body)),
        }
        for name, value in headers.items():
            if name == "content-type":
                environ["CONTENT_TYPE"] = value
            elif name != "content-length":
                environ["HTTP_" + name.upper().replace("-", "_")] = value
        return environ

    def call(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            started[:] = [int(status.split(" ", 1)[0]), headers]
            return lambda data: None

        result = self.app(environ, start_response)
        try:
            out = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        return started[0], started[1], out


def rsgi_app() -> RsgiFront:
    app = wsgi_app()
    return RsgiFront(app, int(os.environ.get("BENCH_THREADS", "32")), app.config["MAX_CONTENT_LENGTH"])
