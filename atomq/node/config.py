"""How ``atomq serve`` runs: ``NodeConfig``, its defaults from ``atomq.defaults``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from atomq import defaults


@dataclass(frozen=True)
class NodeConfig:
    """How ``atomq serve`` runs; see ``atomq serve --help`` for each setting."""

    data_dir: Path
    host: str = defaults.HOST
    port: int = defaults.PORT
    redis_url: str | None = None
    allow_eviction: bool = False
    appendfsync: str = "everysec"
    """The embedded Valkey's ``appendfsync``: ``everysec`` or ``always``."""
    http_workers: int = defaults.HTTP_WORKERS
    threads: int = defaults.THREADS
    max_longpolls_per_tenant: int = defaults.MAX_LONGPOLLS_PER_TENANT
    max_request_bytes: int = defaults.MAX_REQUEST_BYTES
    head_deadline_s: float = defaults.HEAD_DEADLINE_S
    body_deadline_s: float = defaults.BODY_DEADLINE_S
    shutdown_timeout_s: float = defaults.SHUTDOWN_TIMEOUT_S
    maintenance_interval_s: float = defaults.MAINTENANCE_INTERVAL_S
    workers: int = defaults.EXECUTION_WORKERS
    rq_redis_url: str | None = None
    advertise_url: str | None = None
    replace_owner_key: bool = False
    """This node's owner key replaces the one the store's other nodes recorded."""
    execution_timeout_s: int = defaults.EXECUTION_TIMEOUT_S
    max_send_documents: int = defaults.MAX_SEND_DOCUMENTS
    spark: str = "on_demand"
    """``on_demand``: start the Spark worker once a Spark listener exists; ``at_start``; ``never``."""
    spark_master: str = defaults.SPARK_MASTER
    metrics_public: bool = False
    metrics_max_tenants: int = defaults.METRICS_MAX_TENANTS
    metrics_max_queues: int = defaults.METRICS_MAX_QUEUES
    metrics_wait_s: float = defaults.METRICS_WAIT_S

    @property
    def api_url(self) -> str:
        """The URL work horses reach this node at."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"


class NodeApp(Protocol):
    """What gunicorn's master and the HTTP workers' loops read of the node (``http_server.Node``,
    which imports both: they name only this)."""

    config: NodeConfig
    node_id: str
    redis_url: str
    rq_redis_url: str
