"""``atomq demo``: the seed's worked example, end to end (its run: ``atomq.cli.demo.runner``)."""

from __future__ import annotations

from pathlib import Path

import click

from atomq import defaults
from atomq.cli.options import env
from atomq.errors import AtomqError


@click.command()
@click.option("--messages", type=click.IntRange(1, 1_000_000), default=3000, show_default=True,
              help="Test messages to send: 80% valid, 10% without msgId, 10% not JSON.")
@click.option("--engine", type=click.Choice(["spark", "fork"]), default="spark", show_default=True,
              help="Where the echo-service listener runs.")
@click.option("--spark-master", default="local[2]", show_default=True, **env("SPARK_MASTER"),
              help="The Spark master of the demo's Spark worker.")
@click.option("--batch-size", type=click.IntRange(1, defaults.MAX_SPARK_LISTENER_BATCH_SIZE), default=500,
              show_default=True,
              help=f"Messages per execution (up to {defaults.MAX_LISTENER_BATCH_SIZE} on fork, "
                   f"{defaults.MAX_SPARK_LISTENER_BATCH_SIZE} on Spark).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the demo node's data here (default: a temporary directory, removed afterwards).")
def demo(messages: int, engine: str, spark_master: str, batch_size: int, data_dir: Path | None) -> None:
    """Run the seed's worked example (version 3) end to end: a node, a tenant, the echo-service.

    Starts atomq serve on a free port, creates the seed's queues (an exclusive input attracting
    boomi/test/>, a last-value queue for the checkpoint, an errors queue attracting
    boomi/errors/echo-service/>, one for the echo events), deploys the echo-service listener,
    publishes the test messages and prints what arrived where, with the throughput. On the fork
    engine one execution dies mid-run on purpose, and the demo shows its redelivered messages
    recognised through the checkpoint, each processed once. Needs Java 17 or 21 for Spark (or
    --engine fork).
    """
    # Imported when it runs: the run brings rq and the HTTP client, which most commands do without.
    from atomq.cli.demo.runner import run_demo

    try:
        summary = run_demo(messages, engine, spark_master, batch_size, data_dir, click.echo)
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
    if summary["left_in_tests"] or summary["dead_letters"] or summary["echo"] + summary["errors"] != messages:
        raise click.ClickException("not every message arrived where it should")
    if not summary["recognised"]:
        raise click.ClickException("a message of the execution that died was processed twice")
