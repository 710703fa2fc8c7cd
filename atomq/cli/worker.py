"""``atomq worker``: runs executions of listeners with engine "fork"."""

from __future__ import annotations

import click

from atomq.cli.options import env, log_format_option
from atomq.errors import AtomqError


@click.command()
@log_format_option
@click.option("--rq-redis-url", required=True, **env("RQ_REDIS_URL"),
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
