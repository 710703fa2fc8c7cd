"""``atomq queues``: the tenant's queues."""

from __future__ import annotations

import click

from atomq import defaults
from atomq.cli.connection import connection_options
from atomq.cli.output import emit
from atomq.client import AtomqClient


@click.group()
def queues() -> None:
    """The tenant's queues."""


@queues.command("list")
@connection_options
def queues_list(c: AtomqClient) -> None:
    """Queues with their depth, in-flight and dead-letter counts."""
    data = c.queues()
    emit(data, [(q["name"], q["model"], q["depth"], q["in_flight"], q["dead_letters"]) for q in data],
         ("NAME", "MODEL", "DEPTH", "IN FLIGHT", "DEAD"))


@queues.command("create")
@click.argument("name")
@click.option("--model", type=click.Choice(["point_to_point", "publish_subscribe"]), default="point_to_point",
              show_default=True)
@click.option("--max-redeliveries", type=click.IntRange(*defaults.MAX_REDELIVERIES_RANGE),
              default=defaults.MAX_REDELIVERIES, show_default=True)
@click.option("--ack-timeout", "ack_timeout_s", type=click.FloatRange(*defaults.ACK_TIMEOUT_RANGE_S),
              default=float(defaults.ACK_TIMEOUT_S), show_default=True)
@connection_options
def queues_create(c: AtomqClient, name: str, model: str, max_redeliveries: int, ack_timeout_s: float) -> None:
    """Create or update a queue."""
    q = c.put_queue(name, model, max_redeliveries=max_redeliveries, ack_timeout_s=ack_timeout_s)
    emit(q, [(q["name"], q["model"], q["max_redeliveries"], q["ack_timeout_s"])],
         ("NAME", "MODEL", "MAX REDELIVERIES", "ACK TIMEOUT S"))


@queues.command("delete")
@click.argument("name")
@connection_options
def queues_delete(c: AtomqClient, name: str) -> None:
    """Delete a queue with its messages, dead letters and subscribers."""
    c.delete_queue(name)
    emit({"deleted": name}, [(name,)], ("DELETED",))
