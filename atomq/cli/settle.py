"""``atomq ack``, ``nack``, ``extend`` and ``release``: settling deliveries taken by an earlier ``get``, by message
id or by receipt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from atomq import defaults
from atomq.cli.connection import connection_options
from atomq.cli.output import all_matched, emit
from atomq.client import AtomqClient


def _named(f: Callable[..., Any]) -> Callable[..., Any]:
    """QUEUE, IDS, --receipt and --subscriber: which deliveries a settle names."""
    for option in reversed([
        click.argument("queue"),
        click.argument("ids", nargs=-1),
        click.option("--receipt", "receipts", multiple=True,
                     help="A delivery's receipt (repeatable), instead of message IDS: it settles that delivery "
                          "only, not a later one of the same message."),
        click.option("--subscriber", help="For a publish/subscribe queue."),
    ]):
        f = option(f)
    return f


def _selection(f: Callable[..., Any]) -> Callable[..., Any]:
    """As ``_named``, and --consumer, which an exclusive queue asks of the consumer's own settles."""
    return _named(click.option("--consumer", help="On an exclusive queue: the consumer that got the messages.")(f))


def _chosen(ids: tuple[str, ...], receipts: tuple[str, ...]) -> dict[str, Any]:
    if bool(ids) == bool(receipts):
        raise click.UsageError("name the deliveries by message IDS or by --receipt (one of the two)")
    return {"ids": list(ids) or None, "receipts": list(receipts) or None}


@click.command()
@_selection
@connection_options
def ack(c: AtomqClient, queue: str, ids: tuple[str, ...], receipts: tuple[str, ...], subscriber: str | None,
        consumer: str | None) -> None:
    """Ack deliveries of QUEUE: they are done and gone."""
    acked = c.ack(queue, **_chosen(ids, receipts), subscriber=subscriber, consumer=consumer)
    emit({"acked": acked}, [(acked,)], ("ACKED",))
    all_matched(len(set(ids)) + len(set(receipts)), acked, "acked")


@click.command()
@_selection
@click.option("--reason", default="", help="Why: kept with the message if it is dead-lettered.")
@connection_options
def nack(c: AtomqClient, queue: str, ids: tuple[str, ...], receipts: tuple[str, ...], subscriber: str | None,
         consumer: str | None, reason: str) -> None:
    """Nack deliveries of QUEUE: each comes back on the queue's redelivery schedule, or goes to the
    dead letters with REASON once its redeliveries are spent."""
    done = c.nack(queue, **_chosen(ids, receipts), subscriber=subscriber, consumer=consumer, reason=reason)
    # No check that every id matched: a nacked message of a last-value queue that a newer one
    # replaced meanwhile, or one that expired, is neither requeued nor dead-lettered.
    emit(done, [(done["requeued"], done["dead_lettered"])], ("REQUEUED", "DEAD-LETTERED"))


@click.command()
@_selection
@click.option("--seconds", type=click.FloatRange(0, defaults.ACK_TIMEOUT_RANGE_S[1], min_open=True),
              help="For how long from now (default: the queue's ack time-out).")
@connection_options
def extend(c: AtomqClient, queue: str, ids: tuple[str, ...], receipts: tuple[str, ...], subscriber: str | None,
           consumer: str | None, seconds: float | None) -> None:
    """Keep deliveries of QUEUE in flight longer: their ack deadline moves to SECONDS from now."""
    extended = c.extend(queue, **_chosen(ids, receipts), subscriber=subscriber, consumer=consumer, seconds=seconds)
    emit({"extended": extended}, [(extended,)], ("EXTENDED",))
    all_matched(len(set(ids)) + len(set(receipts)), extended, "extended")


@click.command()
@_named
@connection_options
def release(c: AtomqClient, queue: str, ids: tuple[str, ...], receipts: tuple[str, ...],
            subscriber: str | None) -> None:
    """Give in-flight deliveries of QUEUE back at once, not counted as failed: for a consumer known
    to be gone, or a message stuck in flight. On an exclusive queue, whichever consumer holds them."""
    released = c.release(queue, **_chosen(ids, receipts), subscriber=subscriber)
    emit({"released": released}, [(released,)], ("RELEASED",))
    all_matched(len(set(ids)) + len(set(receipts)), released, "released")
