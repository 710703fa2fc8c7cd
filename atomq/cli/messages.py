"""``atomq send`` and ``atomq get``: messages into and out of a queue."""

from __future__ import annotations

import sys

import click

from atomq import defaults
from atomq.cli.connection import connection_options
from atomq.cli.output import emit
from atomq.client import AtomqClient


@click.command()
@click.argument("queue")
@click.argument("texts", nargs=-1)
@connection_options
def send(c: AtomqClient, queue: str, texts: tuple[str, ...]) -> None:
    """Send one message per TEXT (or per line of standard input when none is given)."""
    lines = list(texts) or [line.rstrip("\n") for line in sys.stdin]
    ids: list[str] = []
    per_request = defaults.MAX_SEND_DOCUMENTS
    for start in range(0, len(lines), per_request):
        ids += c.send_texts(queue, lines[start:start + per_request])
    emit({"ids": ids}, [(i,) for i in ids], ("ID",))


@click.command()
@click.argument("queue")
@click.option("--max", "max_messages", type=click.IntRange(1, defaults.MAX_GET), default=defaults.GET_MAX_MESSAGES,
              show_default=True)
@click.option("--wait-ms", type=click.IntRange(0, defaults.MAX_WAIT_MS), default=defaults.GET_WAIT_MS,
              show_default=True)
@click.option("--subscriber", help="For a publish/subscribe queue.")
@click.option("--ack", is_flag=True, help="Ack what was received (else it is redelivered after the ack time-out).")
@connection_options
def get(c: AtomqClient, queue: str, max_messages: int, wait_ms: int, subscriber: str | None, ack: bool) -> None:
    """Receive messages from QUEUE."""
    got = c.get(queue, max_messages, wait_ms, subscriber)
    if ack and got:
        c.ack(queue, receipts=[m["receipt"] for m in got], subscriber=subscriber)
    emit(got, [(m["id"], m["delivery_count"], " | ".join(str(d.get("data", "<bytes>")) for d in m["documents"]))
               for m in got], ("ID", "DELIVERY", "DOCUMENTS"))
