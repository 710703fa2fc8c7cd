"""``atomq spark-worker``: runs executions of listeners with engine "spark" on one SparkSession."""

from __future__ import annotations

from pathlib import Path

import click

from atomq import defaults
from atomq.cli.options import env, log_format_option
from atomq.errors import AtomqError


@click.command("spark-worker")
@log_format_option
@click.option("--rq-redis-url", required=True, **env("RQ_REDIS_URL"),
              help="The Redis holding rq's execution job queues (what `atomq serve` uses as its rq Redis).")
@click.option("--spark-master", default=defaults.SPARK_MASTER, show_default=True, **env("SPARK_MASTER"),
              help="local[N], local-cluster[N,cores,memory], spark://HOST:PORT, yarn or k8s://...")
@click.option("--concurrency", type=click.IntRange(*defaults.SPARK_CONCURRENCY_RANGE),
              default=defaults.SPARK_CONCURRENCY, show_default=True, **env("SPARK_CONCURRENCY"),
              help="Spark executions run at once (each in its tenant's FAIR pool).")
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
