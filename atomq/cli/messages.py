"""``atomq send``, ``publish``, ``get`` and ``browse``: messages into and out of a queue."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Iterator
from typing import Any

import click

from atomq import defaults
from atomq.cli.connection import connection_options
from atomq.cli.options import name_value_pairs
from atomq.cli.output import emit, span, stored_somewhere
from atomq.cli.progress import Progress
from atomq.client import AtomqClient, wire
from atomq.platform.queues.management import BROWSE_STATES


def _properties(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str] | None:
    return dict(name_value_pairs(value)) or None


_timing_options = [
    click.option("--property", "properties", multiple=True, metavar="NAME=VALUE", callback=_properties,
                 help="A message property (repeat for more); a last-value queue keys by one."),
    click.option("--priority", type=click.IntRange(*defaults.PRIORITY_RANGE),
                 help=f"0 to 9, higher delivered first (default {defaults.DEFAULT_PRIORITY})."),
    click.option("--ttl", "ttl_s", type=click.FloatRange(0, defaults.MAX_MESSAGE_TTL_S, min_open=True),
                 help="Seconds until each message expires (then it is dead-lettered or discarded, as its "
                      "queue says)."),
    click.option("--group", metavar="GROUP",
                 help="The messages' group: on a queue whose ordering is group, each goes out once the "
                      "group's earlier messages are settled, in send order."),
    click.option("--delay", "delay_s", type=click.FloatRange(0, defaults.MAX_DELAY_S),
                 help="Seconds before each message is first delivered (0: at once, whatever the queue's "
                      "delay). Left out: the queue's delay."),
    click.option("--idempotency-key", metavar="KEY",
                 help="Names this command's sends (request N of it is KEY/N): run again with the same KEY "
                      "within a day, it stores nothing twice and prints the same ids. Without it each "
                      "request still has a key of its own, so a retry after a lost answer stores once."),
]


def timing_options(f: Any) -> Any:
    for option in reversed(_timing_options):
        f = option(f)
    return f


def _batches(texts: tuple[str, ...], properties: dict[str, str] | None, priority: int | None,
             ttl_s: float | None, group: str | None) -> Iterator[list[dict[str, Any]]]:
    """One message per text (or per line of standard input, read as it is sent: a file of any size),
    in requests of at most MAX_SEND_DOCUMENTS."""
    lines = iter(texts) if texts else (line.rstrip("\n") for line in sys.stdin)
    while batch := list(itertools.islice(lines, defaults.MAX_SEND_DOCUMENTS)):
        yield [wire.message([wire.document(t)], properties, priority=priority, ttl_s=ttl_s, group=group)
               for t in batch]


def _request_key(key: str | None, n: int) -> str | None:
    """The Idempotency-Key of request ``n`` of a command given ``--idempotency-key``."""
    return None if key is None else f"{key}/{n}"


@click.command()
@click.argument("queue")
@click.argument("texts", nargs=-1)
@timing_options
@connection_options
def send(c: AtomqClient, queue: str, texts: tuple[str, ...], properties: dict[str, str] | None,
         priority: int | None, ttl_s: float | None, group: str | None, delay_s: float | None,
         idempotency_key: str | None) -> None:
    """Send one message per TEXT (or per line of standard input when none is given).

    Exits with status 1, after printing the ids, when messages were stored nowhere: QUEUE is
    publish/subscribe and had no subscribers (a subscriber gets only what is sent after it exists:
    atomq subscribers add QUEUE NAME first)."""
    ids: list[str] = []
    dropped = copies = 0
    warnings: list[dict[str, Any]] = []
    progress = Progress(f"sending to {queue}", "messages")
    for n, batch in enumerate(_batches(texts, properties, priority, ttl_s, group)):
        sent = c.send_batch(queue, batch, idempotency_key=_request_key(idempotency_key, n), delay_s=delay_s)
        ids += sent["ids"]
        dropped += sent.get("dropped", 0)
        copies += sent.get("copies", 0)
        warnings += sent.get("warnings", [])
        progress.update(len(ids))
    progress.finish(len(ids))
    if dropped:
        click.echo(f"the queue dropped {dropped} waiting messages to make room (its overflow setting)", err=True)
    emit({"ids": ids, "dropped": dropped, "copies": copies, "warnings": warnings}, [(i,) for i in ids], ("ID",))
    stored_somewhere(warnings, len(ids))


@click.command()
@click.argument("topic")
@click.argument("texts", nargs=-1)
@timing_options
@connection_options
def publish(c: AtomqClient, topic: str, texts: tuple[str, ...], properties: dict[str, str] | None,
            priority: int | None, ttl_s: float | None, group: str | None, delay_s: float | None,
            idempotency_key: str | None) -> None:
    """Publish one message per TEXT (or per line of standard input) to TOPIC: it reaches every queue
    whose topic patterns match (`atomq queues create NAME --topic 'a/>'`), or none.

    Exits with status 1, after printing what was stored, when messages were stored nowhere: no
    queue attracts TOPIC, or only publish/subscribe queues without subscribers do."""
    ids: list[str] = []
    reached: set[str] = set()
    sent = copies = 0
    warnings: list[dict[str, Any]] = []
    progress = Progress(f"publishing to {topic}", "messages")
    for n, batch in enumerate(_batches(texts, properties, priority, ttl_s, group)):
        published = c.publish(topic, batch, idempotency_key=_request_key(idempotency_key, n), delay_s=delay_s)
        ids += published["ids"]
        reached.update(published["queues"])
        sent += len(batch)
        copies += published.get("copies", 0)
        warnings += published.get("warnings", [])
        progress.update(sent)
    progress.finish(sent)
    emit({"ids": ids, "queues": sorted(reached), "copies": copies, "warnings": warnings},
         [(i, ",".join(sorted(reached))) for i in ids], ("ID", "QUEUES"))
    stored_somewhere(warnings, sent)


@click.command()
@click.argument("queue")
@click.option("--max", "max_messages", type=click.IntRange(1, defaults.MAX_GET), default=defaults.GET_MAX_MESSAGES,
              show_default=True,
              help=f"Most messages to receive (1 to {defaults.MAX_GET}); fewer come when fewer are ready.")
@click.option("--wait-ms", type=click.IntRange(0, defaults.MAX_WAIT_MS), default=defaults.GET_WAIT_MS,
              show_default=True,
              help=f"When no message is ready, how long to wait for one, in milliseconds (up to "
                   f"{defaults.MAX_WAIT_MS}); 0: answer at once.")
@click.option("--subscriber", help="For a publish/subscribe queue.")
@click.option("--consumer", help="Who gets: required on an exclusive queue, where only the active consumer gets "
                                 "messages (a standby gets none and is told so on standard error).")
@click.option("--ack", is_flag=True, help="Ack what was received (else it is redelivered after the ack time-out).")
@click.option("--nack", "nack_reason", metavar="REASON",
              help="Nack what was received with this reason: redelivered on the queue's schedule, or "
                   "dead-lettered with REASON once its redeliveries are spent.")
@connection_options
def get(c: AtomqClient, queue: str, max_messages: int, wait_ms: int, subscriber: str | None, consumer: str | None,
        ack: bool, nack_reason: str | None) -> None:
    """Receive messages from QUEUE."""
    if ack and nack_reason is not None:
        raise click.UsageError("give --ack or --nack, not both")
    taken = c.take(queue, max_messages, wait_ms, subscriber, consumer)
    got = taken["messages"]
    if taken.get("active") is False:
        click.echo(f"{consumer} is a standby consumer of {queue}: another consumer is active", err=True)
    if ack and got:
        c.ack(queue, receipts=[m["receipt"] for m in got], subscriber=subscriber, consumer=consumer)
    if nack_reason is not None and got:
        c.nack(queue, receipts=[m["receipt"] for m in got], subscriber=subscriber, reason=nack_reason,
               consumer=consumer)
    emit(got, [(m["id"], m["delivery_count"], " | ".join(str(d.get("data", "<bytes>")) for d in m["documents"]))
               for m in got], ("ID", "DELIVERY", "DOCUMENTS"))


@click.command()
@click.argument("queue")
@click.option("--state", type=click.Choice(BROWSE_STATES),
              help="Only the messages in this state. With in_flight the table says who holds each delivery "
                   "(the --consumer its get named, else key:<key id> of the API key that got it, or owner; "
                   "'-' when nobody was named), how long it has been held, and when its ack is due.")
@click.option("--limit", type=click.IntRange(1), metavar="N", help="At most N messages (default: every one).")
@click.option("--subscriber", help="For a publish/subscribe queue.")
@connection_options
def browse(c: AtomqClient, queue: str, state: str | None, limit: int | None, subscriber: str | None) -> None:
    """List the messages of QUEUE waiting or in flight, without consuming them (a last-value
    queue's current values, say).

    To find deliveries stuck with a consumer that is gone: `atomq browse QUEUE --state in_flight`,
    then `atomq release QUEUE ID...` gives them back at once."""
    pages = c.browse(queue, subscriber, limit=min(limit or defaults.PAGE_LIMIT, defaults.MAX_PAGE_LIMIT),
                     state=state)
    data = list(itertools.islice(pages, limit))
    if state == "in_flight":
        now = time.time()
        emit(data, [(m["id"], m["holder"] or "-", "-" if m["delivered_at"] is None else span(now - m["delivered_at"]),
                     _due(m["deadline"], now), m["delivery_count"]) for m in data],
             ("ID", "HOLDER", "HELD FOR", "ACK DUE", "DELIVERY"))
        return
    if state == "scheduled":
        now = time.time()
        emit(data, [(m["id"], _due(m["due_at"], now), "send delay" if m["delivery_count"] == 0 else "redelivery",
                     m["delivery_count"]) for m in data], ("ID", "DUE", "WAITING FOR", "DELIVERY"))
        return
    emit(data, [(m["id"], m["state"], m["priority"], m.get("group", "-"),
                 " | ".join(str(d.get("data", "<bytes>")) for d in m["documents"])) for m in data],
         ("ID", "STATE", "PRIORITY", "GROUP", "DOCUMENTS"))


def _due(deadline: float | None, now: float) -> str:
    """An ack deadline or a scheduled message's due time against this machine's clock: ``in 25s``,
    ``overdue 3s``."""
    if deadline is None:
        return "-"
    return f"in {span(deadline - now)}" if deadline >= now else f"overdue {span(now - deadline)}"
