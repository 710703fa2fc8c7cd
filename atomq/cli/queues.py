"""``atomq queues``: the tenant's queues."""

from __future__ import annotations

from typing import Any

import click

from atomq import defaults
from atomq.cli.confirm import confirm, yes_option
from atomq.cli.connection import connection_options
from atomq.cli.output import emit
from atomq.client import AtomqClient
from atomq.platform.models import Overflow, QueueOrdering
from atomq.platform.queues.move_tasks import MAX_RATE


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
              help=f"Failed deliveries redelivered before the dead letters. Left out: kept (a new queue: "
                   f"{defaults.MAX_REDELIVERIES}).")
@click.option("--ack-timeout", "ack_timeout_s", type=click.FloatRange(*defaults.ACK_TIMEOUT_RANGE_S),
              help=f"Seconds a delivery may stay unacked. Left out: kept (a new queue: {defaults.ACK_TIMEOUT_S:g}).")
@click.option("--topic", "topics", multiple=True,
              help="A topic pattern the queue attracts (repeat for more): '*' one level, 'abc*' a level "
                   "starting with abc, '>' last: one or more levels. Given: replaces the queue's patterns.")
@click.option("--no-topics", is_flag=True, help="The queue attracts no topic any more.")
@click.option("--message-ttl", "message_ttl_s", type=click.FloatRange(0, defaults.MAX_MESSAGE_TTL_S),
              help="Every message expires this many seconds after its send (0: never). Left out: kept.")
@click.option("--on-expire", type=click.Choice(["dead_letter", "discard"]),
              help="What happens to an expired message. Left out: kept (a new queue: dead_letter).")
@click.option("--last-value/--no-last-value", "last_value", default=None,
              help="A last-value queue (point-to-point) holds one waiting message per value of the property "
                   "--last-value-key, a new one replacing it. Left out: kept (a new queue: no).")
@click.option("--access", type=click.Choice(["exclusive", "non_exclusive"]),
              help="exclusive (point-to-point only): one consumer at a time gets the messages, in send order "
                   "(atomq get --consumer NAME). Left out: kept (a new queue: non_exclusive).")
@click.option("--last-value-key", metavar="PROPERTY",
              help="The message property whose value keys a last-value queue (\"\": one message in all). "
                   "Left out: kept.")
@click.option("--max-messages", type=click.IntRange(0, defaults.MAX_EXACT_INT),
              help="Most messages neither acked nor dead (per subscriber on a publish/subscribe queue); 0: no "
                   "limit. Left out: kept (a new queue: 0).")
@click.option("--max-bytes", type=click.IntRange(0, defaults.MAX_EXACT_INT),
              help="Most bytes of those messages (documents, their properties, envelopes); 0: no limit. "
                   "Left out: kept.")
@click.option("--max-message-bytes", type=click.IntRange(0, defaults.MAX_EXACT_INT),
              help="Largest message a send may hold (413 past it); 0: no limit. Left out: kept.")
@click.option("--max-dead-letters", type=click.IntRange(0, defaults.MAX_EXACT_INT),
              help="Most dead letters; past it the oldest are dropped; 0: no limit. Left out: kept.")
@click.option("--overflow", type=click.Choice([o.value for o in Overflow]),
              help="What a send past --max-messages or --max-bytes gets: reject_new (refused, 507), drop_oldest "
                   "or drop_lowest_priority (waiting messages make room), flow_control (held until there is "
                   "room, then 429). Left out: kept (a new queue: reject_new).")
@click.option("--durability", type=click.Choice(["async", "sync"]),
              help="sync: a send is answered only once its data is synced to disk (and on the server's "
                   "min_replicas), else 503 not_durable; async: once the store holds it (synced every second). "
                   "Left out: kept (a new queue: async).")
@click.option("--delay", "delay_s", type=click.FloatRange(0, defaults.MAX_DELAY_S),
              help="Seconds after its send before a message is first delivered, for each message that gives no "
                   "delay of its own (not on an exclusive queue); 0: at once. Left out: kept (a new queue: 0).")
@click.option("--ordering", type=click.Choice([o.value for o in QueueOrdering]),
              help="group: one message of a group (atomq send --group G) out at a time, a group's in send "
                   "order also across redeliveries, groups independent; none: any number out at once. A "
                   "change applies to what is sent after it. Left out: kept (a new queue: none).")
@click.option("--overflow-to-dead-letters/--no-overflow-to-dead-letters", default=None,
              help="Messages the overflow drops go to the dead letter queue (reason overflow). Left out: kept "
                   "(a new queue: no).")
@click.option("--dead-letter-queue", metavar="QUEUE",
              help="Another point-to-point queue that the queue's dead letters move to, as ordinary messages "
                   "with their reason (properties dead_letter_reason, dead_letter_source, "
                   "dead_letter_delivery_count); \"\": the queue's own dead letters. Left out: kept (a new "
                   "queue: its own).")
@connection_options
def queues_create(c: AtomqClient, name: str, model: str, max_redeliveries: int | None, ack_timeout_s: float | None,
                  topics: tuple[str, ...], no_topics: bool, message_ttl_s: float | None,
                  on_expire: str | None, last_value: bool | None, access: str | None,
                  last_value_key: str | None, **limits: int | str | bool | None) -> None:
    """Create a queue, or update one: the settings given change, the others are kept."""
    if topics and no_topics:
        raise click.UsageError("give --topic or --no-topics, not both")
    settings: dict[str, object] = {}
    if topics or no_topics:
        settings["topics"] = list(topics)
    for field, value in (("max_redeliveries", max_redeliveries), ("ack_timeout_s", ack_timeout_s),
                         ("message_ttl_s", message_ttl_s), ("on_expire", on_expire), ("last_value", last_value),
                         ("last_value_key", last_value_key), ("access", access)):
        if value is not None:
            settings[field] = value
    settings.update((field, value) for field, value in limits.items() if value is not None)
    q = c.put_queue(name, model, **settings)
    last = ("by " + (q["last_value_key"] or "(one in all)")) if q["last_value"] else "-"
    emit(q, [(q["name"], q["model"], q["max_redeliveries"], q["ack_timeout_s"], q["message_ttl_s"] or "-",
              ",".join(q["topics"]) or "-", last)],
         ("NAME", "MODEL", "MAX REDELIVERIES", "ACK TIMEOUT S", "MESSAGE TTL S", "TOPICS", "LAST VALUE"))


LIMITS = ("max_messages", "max_bytes", "max_message_bytes", "max_dead_letters", "overflow",
          "overflow_to_dead_letters", "durability", "dead_letter_queue")


@queues.command("show")
@click.argument("name")
@connection_options
def queues_show(c: AtomqClient, name: str) -> None:
    """One queue: its settings, counts and totals, and an exclusive queue's consumers."""
    q = c.queue(name)
    rows = [(field, q[field]) for field in ("model", "access", "ordering", "depth", "in_flight", "dead_letters",
                                           "scheduled", "delayed", "max_redeliveries", "ack_timeout_s",
                                           "message_ttl_s", "on_expire", "delay_s", "last_value", "last_value_key",
                                           "held_bytes", *LIMITS)]
    rows += [("topics", ",".join(q["topics"]) or "-"),
             ("depth_by_priority", " ".join(f"{p}:{n}" for p, n in q["depth_by_priority"].items()) or "-")]
    rows += [(f"total.{kind}", n) for kind, n in q["totals"].items()]
    rows += [(f"consumer.{c['name']}", "active" if c["active"] else "standby") for c in q["consumers"]]
    emit(q, rows, ("FIELD", "VALUE"))


@queues.command("clear")
@click.argument("name")
@yes_option
@connection_options
def queues_clear(c: AtomqClient, name: str, yes: bool) -> None:
    """Delete every waiting and in-flight message of a queue (of every subscriber); its dead
    letters, settings and subscribers stay."""
    info = c.queue(name)
    confirm(f"delete the {info['depth']} waiting and {info['in_flight']} in-flight messages of queue {name}", yes)
    deleted = c.delete_messages(name)
    emit({"deleted": deleted}, [(deleted,)], ("DELETED",))


@queues.command("delete")
@click.argument("name")
@yes_option
@connection_options
def queues_delete(c: AtomqClient, name: str, yes: bool) -> None:
    """Delete a queue with its messages, dead letters and subscribers."""
    info = c.queue(name)
    confirm(f"delete queue {name} with its {info['depth']} waiting and {info['dead_letters']} dead messages", yes)
    c.delete_queue(name)
    emit({"deleted": name}, [(name,)], ("DELETED",))


@queues.group("moves")
def moves() -> None:
    """A queue's move tasks: its waiting messages moved, a step a second on the node, back to the
    queues they left as dead letters (a dead letter queue's redrive) or to another queue."""


MOVE_HEADERS = ("ID", "STATUS", "MOVED", "TO MOVE", "DESTINATION", "PER SECOND", "FAILURE")


def _move_row(t: dict[str, Any]) -> tuple[Any, ...]:
    return (t["id"], t["status"], t["moved"], t["to_move"], t["destination"] or "(their sources)",
            t["max_per_second"] or "-", (t["failure"] or {}).get("message", "-"))


@moves.command("start")
@click.argument("queue")
@click.option("--to", "destination", metavar="QUEUE",
              help="Move every message to this point-to-point queue. Left out: each goes back to the queue it "
                   "left as a dead letter (the task fails at a message that has none).")
@click.option("--per-second", "max_per_second", type=click.IntRange(1, MAX_RATE),
              help=f"Most messages moved a second (1 to {MAX_RATE}). Left out: as fast as the node moves them.")
@connection_options
def moves_start(c: AtomqClient, queue: str, destination: str | None, max_per_second: int | None) -> None:
    """Start moving QUEUE's waiting messages; one task at a time runs from a queue."""
    t = c.start_move(queue, destination, max_per_second)
    emit(t, [_move_row(t)], MOVE_HEADERS)


@moves.command("list")
@click.argument("queue")
@connection_options
def moves_list(c: AtomqClient, queue: str) -> None:
    """QUEUE's newest move tasks (the running one among them), the newest first."""
    data = c.moves(queue)
    emit(data, [_move_row(t) for t in data], MOVE_HEADERS)


@moves.command("cancel")
@click.argument("queue")
@click.argument("task")
@connection_options
def moves_cancel(c: AtomqClient, queue: str, task: str) -> None:
    """Cancel QUEUE's running move task TASK: nothing moves after this answers, which says how many did."""
    t = c.cancel_move(queue, task)
    emit(t, [_move_row(t)], MOVE_HEADERS)
