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
@click.option("--topic", "topics", multiple=True,
              help="A topic pattern the queue attracts (repeat for more): '*' one level, 'abc*' a level "
                   "starting with abc, '>' last: one or more levels. Given: replaces the queue's patterns.")
@click.option("--no-topics", is_flag=True, help="The queue attracts no topic any more.")
@click.option("--message-ttl", "message_ttl_s", type=click.FloatRange(0, defaults.MAX_MESSAGE_TTL_S),
              help="Every message expires this many seconds after its send (0: never). Left out: kept.")
@click.option("--on-expire", type=click.Choice(["dead_letter", "discard"]),
              help="What happens to an expired message. Left out: kept (a new queue: dead_letter).")
@connection_options
def queues_create(c: AtomqClient, name: str, model: str, max_redeliveries: int, ack_timeout_s: float,
                  topics: tuple[str, ...], no_topics: bool, message_ttl_s: float | None,
                  on_expire: str | None) -> None:
    """Create or update a queue."""
    if topics and no_topics:
        raise click.UsageError("give --topic or --no-topics, not both")
    settings: dict[str, object] = {"max_redeliveries": max_redeliveries, "ack_timeout_s": ack_timeout_s}
    if topics or no_topics:
        settings["topics"] = list(topics)
    for field, value in (("message_ttl_s", message_ttl_s), ("on_expire", on_expire)):
        if value is not None:
            settings[field] = value
    q = c.put_queue(name, model, **settings)
    emit(q, [(q["name"], q["model"], q["max_redeliveries"], q["ack_timeout_s"], q["message_ttl_s"] or "-",
              ",".join(q["topics"]) or "-")],
         ("NAME", "MODEL", "MAX REDELIVERIES", "ACK TIMEOUT S", "MESSAGE TTL S", "TOPICS"))


@queues.command("delete")
@click.argument("name")
@connection_options
def queues_delete(c: AtomqClient, name: str) -> None:
    """Delete a queue with its messages, dead letters and subscribers."""
    c.delete_queue(name)
    emit({"deleted": name}, [(name,)], ("DELETED",))
