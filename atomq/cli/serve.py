"""``atomq serve``: runs the main node (``atomq.node``) with the settings of its options."""

from __future__ import annotations

from pathlib import Path

import click

from atomq import defaults
from atomq.cli.options import env, log_format_option
from atomq.errors import AtomqError


@click.command()
@log_format_option
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=defaults.DATA_DIR,
              show_default=True, **env("DATA_DIR"),
              help="Where the embedded Valkey keeps its data (DIR/valkey) and the owner key (DIR/owner.key).")
@click.option("--host", default=defaults.HOST, show_default=True, **env("HOST"), help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=defaults.PORT, show_default=True, **env("PORT"),
              help="Port to listen on.")
@click.option("--redis-url", **env("REDIS_URL"),
              help="Use this Redis 7+, Valkey or Redis Cluster instead of starting the embedded Valkey. For a "
                   "cluster, name several of its nodes, comma-separated: a node process that connects while one "
                   "is down finds the cluster through the others.")
@click.option("--allow-eviction", is_flag=True, **env("ALLOW_EVICTION"),
              help="Accept a --redis-url server whose maxmemory-policy may evict keys (it can lose messages).")
@click.option("--appendfsync", type=click.Choice(["everysec", "always"]), default="everysec", show_default=True,
              **env("APPENDFSYNC"),
              help="How the embedded Valkey syncs its append-only file. everysec: once a second (a power loss "
                   "may lose the last second of async sends; a send to a sync queue waits for the next sync, "
                   "about 100 ms). always: before it answers a write (sync queues answer in about a "
                   "millisecond; every send waits for the disk). With --redis-url, that server's own setting "
                   "holds.")
@click.option("--http-workers", type=click.IntRange(*defaults.HTTP_WORKERS_RANGE), default=defaults.HTTP_WORKERS,
              show_default=True, **env("HTTP_WORKERS"), help="HTTP worker processes.")
@click.option("--threads", type=click.IntRange(*defaults.THREADS_RANGE), default=defaults.THREADS,
              show_default=True, **env("THREADS"),
              help="Threads per HTTP worker process: concurrent requests, long-polls included.")
@click.option("--max-longpolls-per-tenant", type=click.IntRange(*defaults.MAX_LONGPOLLS_PER_TENANT_RANGE),
              default=defaults.MAX_LONGPOLLS_PER_TENANT, show_default=True, **env("MAX_LONGPOLLS_PER_TENANT"),
              help="Blocking gets one tenant may hold per worker process; past it, gets answer at once.")
@click.option("--max-request-bytes", type=click.IntRange(defaults.MIN_MAX_REQUEST_BYTES),
              default=defaults.MAX_REQUEST_BYTES, show_default=True, **env("MAX_REQUEST_BYTES"),
              help="Larger request bodies get 413 before they are read.")
@click.option("--head-deadline", type=click.FloatRange(*defaults.DEADLINE_RANGE_S), default=defaults.HEAD_DEADLINE_S,
              show_default=True, metavar="SECONDS", **env("HEAD_DEADLINE"),
              help="How long a client may take to send a request's line and headers; past it, 408.")
@click.option("--body-deadline", type=click.FloatRange(*defaults.DEADLINE_RANGE_S), default=defaults.BODY_DEADLINE_S,
              show_default=True, metavar="SECONDS", **env("BODY_DEADLINE"),
              help="How long a client may take to send a request's body, besides 1 s per "
                   f"{defaults.MIN_BODY_BYTES_PER_S // 1024} KiB of it; past it, 408.")
@click.option("--shutdown-timeout", type=click.FloatRange(*defaults.SHUTDOWN_TIMEOUT_RANGE_S),
              default=defaults.SHUTDOWN_TIMEOUT_S, show_default=True, **env("SHUTDOWN_TIMEOUT"),
              help="Seconds SIGTERM waits for requests in flight.")
@click.option("--workers", type=click.IntRange(*defaults.EXECUTION_WORKERS_RANGE), default=defaults.EXECUTION_WORKERS,
              show_default=True, **env("WORKERS"),
              help="Execution workers for listeners with engine \"fork\" (rq forking workers, one work horse per "
                   "execution) to start beside the API; 0 for none. More can run anywhere with `atomq worker`.")
@click.option("--rq-redis-url", **env("RQ_REDIS_URL"),
              help="A standalone Redis for rq's execution job queues (default: the node's own Redis, "
                   "which must then not be a cluster).")
@click.option("--replace-owner-key", is_flag=True,
              help="Take this node's owner key as the store's, replacing the one its other nodes recorded (a "
                   "node whose owner key differs from theirs refuses to start); restart every other node with it.")
@click.option("--advertise-url", **env("ADVERTISE_URL"),
              help="The URL executions reach this node at (default: http://HOST:PORT).")
@click.option("--execution-timeout", type=click.IntRange(*defaults.EXECUTION_TIMEOUT_RANGE_S),
              default=defaults.EXECUTION_TIMEOUT_S, show_default=True, **env("EXECUTION_TIMEOUT"),
              help="Seconds an execution may run before rq stops its work horse (its batch then comes back). "
                   f"Keep it below the server's dedupe_window_s ({defaults.DEDUPE_WINDOW_S} s by default): "
                   "a retried execution's outputs are recognised only within that window.")
@click.option("--max-send-documents", type=click.IntRange(*defaults.MAX_SEND_DOCUMENTS_RANGE),
              default=defaults.MAX_SEND_DOCUMENTS, show_default=True, **env("MAX_SEND_DOCUMENTS"),
              help="Most documents an execution sends in one request.")
@click.option("--spark/--no-spark", "spark", default=None, **env("SPARK"),
              help="The Spark worker (one SparkSession) for listeners with engine \"spark\": by default it starts "
                   "the first time such a listener exists, if a Java 17 or 21 runtime is found; --spark starts it "
                   "at once, --no-spark never.")
@click.option("--spark-master", default=defaults.SPARK_MASTER, show_default=True, **env("SPARK_MASTER"),
              help="The Spark master of the Spark worker: local[N], local-cluster[...], spark://HOST:PORT, yarn, "
                   "k8s://...")
@click.option("--metrics-public", is_flag=True, **env("METRICS_PUBLIC"),
              help="Serve /metrics without a key (default: the owner key only).")
@click.option("--metrics-max-tenants", type=click.IntRange(0), default=defaults.METRICS_MAX_TENANTS,
              show_default=True, **env("METRICS_MAX_TENANTS"),
              help="Tenants with series of their own in /metrics; the rest add up under tenant=\"other\".")
@click.option("--metrics-max-queues", type=click.IntRange(0), default=defaults.METRICS_MAX_QUEUES,
              show_default=True, **env("METRICS_MAX_QUEUES"),
              help="Queues (and listeners) of a tenant with series of their own; the rest add up under "
                   "queue=\"other\".")
@click.option("--metrics-wait", type=click.FloatRange(0.1), default=defaults.METRICS_WAIT_S, show_default=True,
              metavar="SECONDS", **env("METRICS_WAIT"),
              help="How long a /metrics scrape waits for the tenants' figures to be read; past it, the scrape "
                   "answers with the last ones read and their age (atomq_metrics_tenant_figures_age_seconds). "
                   "Keep it under Prometheus's scrape_timeout.")
def serve(data_dir: Path, host: str, port: int, redis_url: str | None, allow_eviction: bool, appendfsync: str,
          http_workers: int,
          threads: int, max_longpolls_per_tenant: int, max_request_bytes: int, head_deadline: float,
          body_deadline: float, shutdown_timeout: float,
          workers: int, rq_redis_url: str | None, replace_owner_key: bool, advertise_url: str | None,
          execution_timeout: int,
          max_send_documents: int, spark: bool | None, spark_master: str, metrics_public: bool,
          metrics_max_tenants: int, metrics_max_queues: int, metrics_wait: float) -> None:
    """Run the main node: the HTTP API on the embedded Valkey or on --redis-url.

    It runs listeners out of the box: 2 execution workers (--workers), and a Spark worker
    once a listener with engine "spark" is deployed (--spark, --no-spark). A listener whose
    engine has no live worker is in state "waiting", saying what is missing.
    The owner key comes from ATOMQ_OWNER_KEY, else from DIR/owner.key (made on first start).
    """
    # Imported here: the node brings gunicorn, Flask and rq, which the other commands do without.
    from atomq.node.config import NodeConfig
    from atomq.node.lifecycle import serve as run_node

    try:
        run_node(NodeConfig(data_dir=data_dir, host=host, port=port, redis_url=redis_url,
                            allow_eviction=allow_eviction, appendfsync=appendfsync, http_workers=http_workers,
                            threads=threads,
                            max_longpolls_per_tenant=max_longpolls_per_tenant,
                            max_request_bytes=max_request_bytes, head_deadline_s=head_deadline,
                            body_deadline_s=body_deadline, shutdown_timeout_s=shutdown_timeout,
                            workers=workers, rq_redis_url=rq_redis_url, replace_owner_key=replace_owner_key,
                            advertise_url=advertise_url,
                            execution_timeout_s=execution_timeout, max_send_documents=max_send_documents,
                            spark={None: "on_demand", True: "at_start", False: "never"}[spark],
                            spark_master=spark_master, metrics_public=metrics_public,
                            metrics_max_tenants=metrics_max_tenants, metrics_max_queues=metrics_max_queues,
                            metrics_wait_s=metrics_wait))
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
