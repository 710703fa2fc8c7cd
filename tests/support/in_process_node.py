"""A node in the test's process: a real Valkey of its own, the API on a real HTTP server in a thread.

Executions, supervision and Spark are driven by the tests around it, so
every step is theirs to time; ``atomq serve`` as a process is in served_node.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import redis
from werkzeug.serving import make_server

from atomq.api import create_app
from atomq.api.services import LongPollLimiter, Services
from atomq.client import AtomqClient
from atomq.platform import QueueServer
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.tenants import TenantStore
from atomq.workers.supervisor import Supervisor
from support.audit import assert_audit_clean
from support.ports import free_port


@dataclass
class Tenant:
    """A tenant of a test node: its id, and a client with its key."""

    id: str
    api: AtomqClient


@dataclass
class NodeHarness:
    """An in-process node as the listener tests drive it: its address, its services, the supervisor
    the test steps, the store the executions' jobs queue in, and the owner's client."""

    url: str
    services: Services
    supervisor: Supervisor
    rq: redis.Redis
    owner: AtomqClient


class InProcessNode:
    def __init__(self, data_dir: Path, owner_key: str) -> None:
        self.valkey = EmbeddedValkey(data_dir / "valkey", port=free_port())
        self.valkey.start()
        self.client: redis.Redis = self.valkey.client()
        self.rq: redis.Redis = self.valkey.client()
        self.services = Services(queues=QueueServer(self.client), tenants=TenantStore(self.client, owner_key),
                                 longpolls=LongPollLimiter(8))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.app = create_app(self.services)
        self._http = make_server("127.0.0.1", port, self.app, threaded=True)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        self.owner = AtomqClient(self.url, owner_key)

    def close(self) -> None:
        """Stops it all, after asserting that its data passes the audit."""
        try:
            assert_audit_clean(self.client)
        finally:
            self.owner.close()
            self._http.shutdown()
            self._thread.join(timeout=10)
            self.client.close()
            self.rq.close()
            self.valkey.stop()

    def __enter__(self) -> InProcessNode:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
