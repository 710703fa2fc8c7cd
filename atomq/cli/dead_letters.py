"""``atomq dead-letters``: a queue's dead letters."""

from __future__ import annotations

import click

from atomq.cli.confirm import confirm, yes_option
from atomq.cli.connection import connection_options
from atomq.cli.output import emit
from atomq.client import AtomqClient


@click.group("dead-letters")
def dead_letters() -> None:
    """A queue's dead letters."""


REASON_HELP = "only the dead letters given this reason (expired, ack timeout, nacked, a nack's reason)"


def _one_selection(ids: tuple[str, ...], reason: str | None) -> None:
    if ids and reason is not None:
        raise click.UsageError("give IDS or --reason, not both")


@dead_letters.command("list")
@click.argument("queue")
@click.option("--subscriber")
@click.option("--reason", help=REASON_HELP)
@connection_options
def dead_letters_list(c: AtomqClient, queue: str, subscriber: str | None, reason: str | None) -> None:
    """Every dead letter with its reason."""
    data = list(c.dead_letters(queue, subscriber, reason=reason))
    emit(data, [(m["id"], m["failed_deliveries"], m["reason"]) for m in data], ("ID", "FAILED", "REASON"))


@dead_letters.command("resend")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--subscriber")
@click.option("--reason", help=REASON_HELP)
@connection_options
def dead_letters_resend(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None,
                        reason: str | None) -> None:
    """Resend the dead letters IDS (those of --reason, or all of them, when none is given)."""
    _one_selection(ids, reason)
    n = c.resend_dead_letters(queue, list(ids) or None, subscriber, reason=reason)
    emit({"resent": n}, [(n,)], ("RESENT",))


@dead_letters.command("delete")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--subscriber")
@click.option("--reason", help=REASON_HELP)
@yes_option
@connection_options
def dead_letters_delete(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None,
                        reason: str | None, yes: bool) -> None:
    """Delete the dead letters IDS (those of --reason, or all of them, when none is given)."""
    _one_selection(ids, reason)
    if not ids:
        which = f"the dead letters of reason {reason!r}" if reason else "every dead letter"
        confirm(f"delete {which} of queue {queue}", yes)
    n = c.delete_dead_letters(queue, list(ids) or None, subscriber, reason=reason)
    emit({"deleted": n}, [(n,)], ("DELETED",))
