"""``atomq subscribers``: the subscribers of a publish/subscribe queue.

A publish/subscribe queue copies each message to the subscribers it has when the message is
sent; a subscriber gets nothing sent before it existed. So the subscribers come first: ``add``
makes one ahead of its first get, which is what a newcomer needs before the first send.
"""

from __future__ import annotations

import click

from atomq.cli.confirm import confirm, yes_option
from atomq.cli.connection import connection_options
from atomq.cli.failures import Failure
from atomq.cli.output import emit
from atomq.client import AtomqClient


@click.group()
def subscribers() -> None:
    """The subscribers of a publish/subscribe queue (each gets a copy of every message sent after it exists)."""


@subscribers.command("list")
@click.argument("queue")
@connection_options
def subscribers_list(c: AtomqClient, queue: str) -> None:
    """QUEUE's subscribers with their depth, in-flight, dead-letter and scheduled counts."""
    data = c.subscribers(queue)
    emit(data, [(s["name"], s["depth"], s["in_flight"], s["dead_letters"], s["scheduled"]) for s in data],
         ("NAME", "DEPTH", "IN FLIGHT", "DEAD", "SCHEDULED"))


@subscribers.command("add")
@click.argument("queue")
@click.argument("name")
@connection_options
def subscribers_add(c: AtomqClient, queue: str, name: str) -> None:
    """Add subscriber NAME to QUEUE, ahead of its first get: from now on it gets a copy of every
    message sent to QUEUE (or published to a topic QUEUE attracts). Adding one that exists changes
    nothing."""
    c.put_subscriber(queue, name)
    emit({"queue": queue, "subscriber": name}, [(queue, name)], ("QUEUE", "SUBSCRIBER"))


@subscribers.command("remove")
@click.argument("queue")
@click.argument("name")
@yes_option
@connection_options
def subscribers_remove(c: AtomqClient, queue: str, name: str, yes: bool) -> None:
    """Remove subscriber NAME of QUEUE with its messages and dead letters."""
    held = {s["name"]: s for s in c.subscribers(queue)}
    if name not in held:
        raise Failure(f"queue {queue} has no subscriber {name} (see atomq subscribers list {queue})", "not_found",
                      queue=queue, subscriber=name)
    s = held[name]
    confirm(f"remove subscriber {name} of queue {queue} with its {s['depth']} waiting, {s['in_flight']} in-flight "
            f"and {s['dead_letters']} dead messages", yes)
    c.delete_subscriber(queue, name)
    emit({"removed": name, "queue": queue}, [(queue, name)], ("QUEUE", "REMOVED"))

