"""The ``atomq`` command line.

``atomq serve`` runs the main node; ``atomq selftest`` shows the queue
server at work on its embedded defaults; ``atomq audit`` checks a tenant's
stored queues for broken invariants.

Settings come from, lowest first: a TOML config file (``--config``, its
``[serve]`` table for ``atomq serve``), ``ATOMQ_*`` environment variables,
then flags; each flag names its variable in ``--help``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import click
import redis

from atomq.cli_manage import COMMANDS
from atomq.errors import AtomqError
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.audit import audit_tenant, repair_usage
from atomq.platform.connection import open_redis
from atomq.platform.data_dir import DataDirLock, in_use, read_holder
from atomq.platform.embedded import EmbeddedValkey, client_of_running

AUDIT_RECHECK_S = 0.5
"""How long the audit of a live store waits before it looks again at a tenant that seemed broken."""


def _load_config_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Makes a TOML file's tables the defaults of the commands they name."""
    if value is None:
        return None
    try:
        data = tomllib.loads(value.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value}: {exc}") from None
    ctx.default_map = {command: {k.replace("-", "_"): v for k, v in table.items()}
                       for command, table in data.items() if isinstance(table, dict)}
    return value


@click.group()
@click.version_option(package_name="atomq")
@click.option("--config", type=click.Path(dir_okay=False, exists=True, path_type=Path), envvar="ATOMQ_CONFIG",
              show_envvar=True, is_eager=True, expose_value=False, callback=_load_config_file,
              help="TOML file whose [serve] (etc.) table sets defaults; env vars and flags override it.")
def main() -> None:
    """atomq: a multi-tenant queue platform on Redis streams."""


def _env(name: str) -> dict[str, Any]:
    return {"envvar": f"ATOMQ_{name}", "show_envvar": True}


def _setup_logging(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Sets up logging as the option is read; the execution workers ``serve`` starts are
    processes of their own, which read the format from the environment."""
    from atomq.telemetry import setup_logging

    setup_logging(value)
    os.environ["ATOMQ_LOG_FORMAT"] = value
    return value


log_format_option = click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True, **_env("LOG_FORMAT"),
    expose_value=False, callback=_setup_logging,
    help="Log lines as text, or as JSON objects: time, level, logger, message, and tenant, queue, listener, "
         "trace_id and span_id when known. Traces: see the OTEL_* variables in the README.")


@main.command()
@log_format_option
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default="atomq-data",
              show_default=True, **_env("DATA_DIR"),
              help="Where the embedded Valkey keeps its data (DIR/valkey) and the owner key (DIR/owner.key).")
@click.option("--host", default="127.0.0.1", show_default=True, **_env("HOST"), help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=61717, show_default=True, **_env("PORT"),
              help="Port to listen on.")
@click.option("--redis-url", **_env("REDIS_URL"),
              help="Use this Redis 7+, Valkey or Redis Cluster instead of starting the embedded Valkey.")
@click.option("--allow-eviction", is_flag=True, **_env("ALLOW_EVICTION"),
              help="Accept a --redis-url server whose maxmemory-policy may evict keys (it can lose messages).")
@click.option("--http-workers", type=click.IntRange(1, 64), default=2, show_default=True,
              **_env("HTTP_WORKERS"), help="HTTP worker processes.")
@click.option("--threads", type=click.IntRange(1, 1024), default=32, show_default=True, **_env("THREADS"),
              help="Threads per HTTP worker process: concurrent requests, long-polls included.")
@click.option("--max-longpolls-per-tenant", type=click.IntRange(1, 1024), default=8, show_default=True,
              **_env("MAX_LONGPOLLS_PER_TENANT"),
              help="Blocking gets one tenant may hold per worker process; past it, gets answer at once.")
@click.option("--max-request-bytes", type=click.IntRange(1024), default=10 * 1024 * 1024, show_default=True,
              **_env("MAX_REQUEST_BYTES"), help="Larger request bodies get 413 before they are read.")
@click.option("--shutdown-timeout", type=click.FloatRange(1, 600), default=20.0, show_default=True,
              **_env("SHUTDOWN_TIMEOUT"), help="Seconds SIGTERM waits for requests in flight.")
@click.option("--workers", type=click.IntRange(0, 256), default=2, show_default=True, **_env("WORKERS"),
              help="Execution workers for listeners with engine \"fork\" (rq forking workers, one work horse per "
                   "execution) to start beside the API; 0 for none. More can run anywhere with `atomq worker`.")
@click.option("--rq-redis-url", **_env("RQ_REDIS_URL"),
              help="A standalone Redis for rq's execution job queues (default: the node's own Redis, "
                   "which must then not be a cluster).")
@click.option("--advertise-url", **_env("ADVERTISE_URL"),
              help="The URL executions reach this node at (default: http://HOST:PORT).")
@click.option("--execution-timeout", type=click.IntRange(1, 86400), default=240, show_default=True,
              **_env("EXECUTION_TIMEOUT"),
              help="Seconds an execution may run before rq stops its work horse (its batch then comes back). "
                   "Keep it below the server's dedupe_window_s (300 s by default): a retried execution's "
                   "outputs are recognised only within that window.")
@click.option("--max-send-documents", type=click.IntRange(1, 1000), default=100, show_default=True,
              **_env("MAX_SEND_DOCUMENTS"), help="Most documents an execution sends in one request.")
@click.option("--spark/--no-spark", "spark", default=None, **_env("SPARK"),
              help="The Spark worker (one SparkSession) for listeners with engine \"spark\": by default it starts "
                   "the first time such a listener exists, if a Java 17 or 21 runtime is found; --spark starts it "
                   "at once, --no-spark never.")
@click.option("--spark-master", default="local[*]", show_default=True, **_env("SPARK_MASTER"),
              help="The Spark master of the Spark worker: local[N], local-cluster[...], spark://HOST:PORT, yarn, "
                   "k8s://...")
@click.option("--metrics-public", is_flag=True, **_env("METRICS_PUBLIC"),
              help="Serve /metrics without a key (default: the owner key only).")
@click.option("--metrics-max-tenants", type=click.IntRange(0), default=100, show_default=True,
              **_env("METRICS_MAX_TENANTS"), help="Tenants with series of their own in /metrics; the rest add up "
                                                  "under tenant=\"other\".")
@click.option("--metrics-max-queues", type=click.IntRange(0), default=100, show_default=True,
              **_env("METRICS_MAX_QUEUES"), help="Queues (and listeners) of a tenant with series of their own; the "
                                                 "rest add up under queue=\"other\".")
def serve(data_dir: Path, host: str, port: int, redis_url: str | None, allow_eviction: bool, http_workers: int,
          threads: int, max_longpolls_per_tenant: int, max_request_bytes: int, shutdown_timeout: float,
          workers: int, rq_redis_url: str | None, advertise_url: str | None, execution_timeout: int,
          max_send_documents: int, spark: bool | None, spark_master: str, metrics_public: bool,
          metrics_max_tenants: int, metrics_max_queues: int) -> None:
    """Run the main node: the HTTP API on the embedded Valkey or on --redis-url.

    It runs listeners out of the box: 2 execution workers (--workers), and a Spark worker
    once a listener with engine "spark" is deployed (--spark, --no-spark). A listener whose
    engine has no live worker is in state "waiting", saying what is missing.
    The owner key comes from ATOMQ_OWNER_KEY, else from DIR/owner.key (made on first start).
    """
    from atomq.node.config import NodeConfig
    from atomq.node.lifecycle import serve as run_node

    try:
        run_node(NodeConfig(data_dir=data_dir, host=host, port=port, redis_url=redis_url,
                            allow_eviction=allow_eviction, http_workers=http_workers, threads=threads,
                            max_longpolls_per_tenant=max_longpolls_per_tenant,
                            max_request_bytes=max_request_bytes, shutdown_timeout_s=shutdown_timeout,
                            workers=workers, rq_redis_url=rq_redis_url, advertise_url=advertise_url,
                            execution_timeout_s=execution_timeout, max_send_documents=max_send_documents,
                            spark={None: "on_demand", True: "at_start", False: "never"}[spark],
                            spark_master=spark_master, metrics_public=metrics_public,
                            metrics_max_tenants=metrics_max_tenants, metrics_max_queues=metrics_max_queues))
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None


@main.command()
@log_format_option
@click.option("--rq-redis-url", required=True, **_env("RQ_REDIS_URL"),
              help="The Redis holding rq's execution job queues (what `atomq serve` uses as its rq Redis).")
@click.option("--burst", is_flag=True, help="Run the executions waiting now, then exit.")
@click.option("--name", help="The worker's name in rq (default: generated).")
def worker(rq_redis_url: str, burst: bool, name: str | None) -> None:
    """Run executions: an rq forking worker over every tenant's execution queue, taken round-robin.

    Each execution runs in its own forked work horse and talks to the main node over HTTP
    with its execution token. SIGTERM or SIGINT: finish the running execution, then stop.
    Processes registered with ATOMQ_PROCESSES must be registered here too.
    """
    from atomq.node.rq_redis import rq_connection
    from atomq.workers.worker import run_worker

    try:
        run_worker(rq_connection(rq_redis_url), burst=burst, name=name)
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None


@main.command()
@click.option("--messages", type=click.IntRange(1, 1_000_000), default=3000, show_default=True,
              help="Test messages to send: 80% valid, 10% without msgId, 10% not JSON.")
@click.option("--engine", type=click.Choice(["spark", "fork"]), default="spark", show_default=True,
              help="Where the echo-service listener runs.")
@click.option("--spark-master", default="local[2]", show_default=True, **_env("SPARK_MASTER"),
              help="The Spark master of the demo's Spark worker.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=500, show_default=True,
              help="Messages per execution.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the demo node's data here (default: a temporary directory, removed afterwards).")
def demo(messages: int, engine: str, spark_master: str, batch_size: int, data_dir: Path | None) -> None:
    """Run the seed's worked example end to end: a node, a tenant, the echo-service on Spark.

    Starts atomq serve on a free port, creates the queues tests, echo and errors, deploys the
    echo-service listener, sends the test messages and prints what arrived where, with the
    throughput. Needs Java 17 or 21 for Spark (or --engine fork).
    """
    from atomq.demo import run_demo

    try:
        summary = run_demo(messages, engine, spark_master, batch_size, data_dir, click.echo)
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
    if summary["left_in_tests"] or summary["dead_letters"] or summary["echo"] + summary["errors"] != messages:
        raise click.ClickException("not every message arrived where it should")


@main.command("spark-worker")
@log_format_option
@click.option("--rq-redis-url", required=True, **_env("RQ_REDIS_URL"),
              help="The Redis holding rq's execution job queues (what `atomq serve` uses as its rq Redis).")
@click.option("--spark-master", default="local[*]", show_default=True, **_env("SPARK_MASTER"),
              help="local[N], local-cluster[N,cores,memory], spark://HOST:PORT, yarn or k8s://...")
@click.option("--concurrency", type=click.IntRange(1, 256), default=4, show_default=True,
              **_env("SPARK_CONCURRENCY"), help="Spark executions run at once (each in its tenant's FAIR pool).")
@click.option("--error-file", type=click.Path(dir_okay=False, path_type=Path),
              help="On a fatal error, also write its reason here (atomq serve reads it when its Spark worker exits).")
def spark_worker(rq_redis_url: str, spark_master: str, concurrency: int, error_file: Path | None) -> None:
    """Run the executions of listeners with engine "spark" on one SparkSession.

    Each tenant's executions run in its own FAIR scheduler pool, named after the tenant and
    weighted by its spark_weight. Needs a Java 17 or 21 runtime (JAVA_HOME or java on PATH).
    SIGTERM or SIGINT: finish the running executions, then stop.
    """
    import signal
    import threading

    from atomq.node.rq_redis import rq_connection
    from atomq.spark_workers.session import start_session
    from atomq.spark_workers.worker import SparkWorker

    def fatal(reason: str) -> click.ClickException:
        if error_file is not None:
            error_file.write_text(reason + "\n")
        return click.ClickException(reason)

    try:
        rq = rq_connection(rq_redis_url)
        session = start_session(spark_master, "atomq-spark-worker", **{"spark.scheduler.mode": "FAIR"})
    except AtomqError as exc:
        raise fatal(exc.message) from None
    except Exception as exc:  # py4j's and pyspark's own: the JVM did not start
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise fatal(f"Spark did not start: {type(exc).__name__}: {first_line}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    click.echo(f"atomq: Spark worker on {spark_master}, {concurrency} executions at once", err=True)
    try:
        SparkWorker(rq, session, concurrency).run(stop)
    finally:
        session.stop()
    if not stop.is_set():
        raise fatal("the SparkContext stopped; start the Spark worker again")


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ATOMQ_DATA_DIR",
    show_envvar=True,
    help="Keep the embedded Valkey's data here (default: a temporary directory, removed afterwards).",
)
def selftest(data_dir: Path | None) -> None:
    """Start the embedded Valkey, then send, get, ack and nack a few messages, saying what happens."""
    temp = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="atomq-selftest-")) if data_dir is None else data_dir
    lock = DataDirLock(root)
    server = EmbeddedValkey(root / "valkey")
    try:
        lock.acquire("selftest")
        click.echo(f"starting the embedded Valkey in {server.data_dir} (AOF on, noeviction) ...")
        server.start()
        qs = QueueServer(server.client())
        tenant = f"selftest-{uuid.uuid4().hex[:8]}"
        qs.put_queue(tenant, "orders", "point_to_point", max_redeliveries=1)
        click.echo(f"tenant {tenant}: created point-to-point queue 'orders' (max_redeliveries 1)")
        ids = qs.send(tenant, "orders", [
            OutgoingMessage(documents=(OutgoingDocument(f'{{"msgId": {n}}}', {"kind": "test"}),))
            for n in range(3)
        ])
        click.echo(f"sent 3 messages in one batch: {', '.join(ids)}")
        got = qs.get(tenant, "orders", max_messages=10)
        click.echo(f"got {len(got)}: " + ", ".join(f"{d.documents[0].data} (delivery {d.delivery_count})" for d in got))
        acked = qs.ack(tenant, "orders", receipts=[d.receipt for d in got[:2]])
        click.echo(f"acked {acked}; nacking the last one")
        qs.nack(tenant, "orders", receipts=[got[2].receipt], reason="selftest failure")
        start = time.monotonic()
        (again,) = qs.get(tenant, "orders", wait_ms=5000)
        click.echo(f"redelivered after {time.monotonic() - start:.1f} s: {again.id} delivery_count "
                   f"{again.delivery_count}, redelivered {again.redelivered}")
        qs.nack(tenant, "orders", receipts=[again.receipt], reason="selftest failure")
        (dead,) = qs.dead_letters(tenant, "orders").items
        click.echo(f"failed again: dead-lettered with reason {dead.reason!r} after {dead.failed_deliveries} "
                   "failed deliveries")
        info = qs.get_queue(tenant, "orders")
        click.echo(f"queue 'orders': depth {info.depth}, in flight {info.in_flight}, "
                   f"dead letters {info.dead_letters}")
        problems = audit_tenant(qs.client, tenant)
        qs.delete_queue(tenant, "orders")
        if problems:
            raise click.ClickException("audit found: " + "; ".join(problems))
        click.echo("audit: consistent. selftest passed.")
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        try:
            server.stop()
        finally:
            lock.release()
        if temp:
            shutil.rmtree(root, ignore_errors=True)


@main.command()
@click.option("--redis-url", envvar="ATOMQ_REDIS_URL", show_envvar=True,
              help="The Redis to audit (default: the embedded Valkey of --data-dir: the running node's, "
                   "else one started for the audit).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="ATOMQ_DATA_DIR",
              show_envvar=True, default="atomq-data", show_default=True,
              help="The data directory of the embedded Valkey.")
@click.option("--tenant", "tenants", multiple=True, help="Tenant id to audit (repeatable; default: all).")
@click.option("--repair", is_flag=True,
              help="Recount each tenant's usage counters from its data first (run it while the tenant is quiet).")
def audit(redis_url: str | None, data_dir: Path, tenants: tuple[str, ...], repair: bool) -> None:
    """Check that every tenant's queues, deliveries, documents and usage agree; exit 1 if not.

    On the data directory of a running node, the audit goes through that node's embedded Valkey;
    on a live store, a problem counts only if a second look a moment later finds it again.
    """
    lock = DataDirLock(data_dir)
    server = None
    try:
        if redis_url:
            client = open_redis(redis_url)
        elif lock.try_acquire("audit"):
            server = EmbeddedValkey(data_dir / "valkey")
            server.start()
            client = server.client()
        else:
            client = _running_node_store(data_dir)
        qs = QueueServer(client, migrate=False)
        live = server is None  # a store a node may be writing to while the audit reads
        bad = 0
        for tenant in tenants or qs.tenants():
            if repair:
                counted = repair_usage(client, tenant)
                click.echo(f"{tenant}: usage set to {counted['stored_bytes']} bytes, {counted['messages']} messages")
            problems = audit_tenant(client, tenant)
            if problems and live:
                # It reads the tenant's keys one by one while the node serves it: a send or an
                # ack between two reads can look like a broken invariant. A real one stays.
                time.sleep(AUDIT_RECHECK_S)
                problems = [p for p in audit_tenant(client, tenant) if p in problems]
            bad += len(problems)
            click.echo(f"{tenant}: " + ("consistent" if not problems else "; ".join(problems)))
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        try:
            if server is not None:
                server.stop()
        finally:
            lock.release()
    sys.exit(1 if bad else 0)


def _running_node_store(data_dir: Path) -> redis.Redis:
    """A client of the embedded Valkey of the node that holds ``data_dir``, which must not
    be stopped or doubled; an error that says why when there is none to reach."""
    holder = read_holder(data_dir)
    deadline = time.monotonic() + 10
    while holder is not None and holder.valkey_socket is None and not holder.redis_url_given:
        if time.monotonic() > deadline:  # a node still starting its Valkey
            break
        time.sleep(0.1)
        holder = read_holder(data_dir)
    if holder is None or holder.valkey_socket is None:
        raise in_use(data_dir, holder, "it uses a Redis of its own: audit that with --redis-url"
                     if holder is not None and holder.redis_url_given
                     else "its embedded Valkey cannot be found: audit once it has stopped")
    click.echo(f"{data_dir} belongs to atomq {holder.command} (pid {holder.pid}): auditing through its Valkey",
               err=True)
    return client_of_running(data_dir / "valkey", holder.valkey_socket, socket_timeout=30)


for _command in COMMANDS:
    main.add_command(_command)
