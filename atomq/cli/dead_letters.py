"""``atomq dead-letters``: a queue's dead letters.

Resending or deleting all of them (or all of a reason) goes a page of ``defaults.MAX_PAGE_LIMIT`` at
a time, by id, with a progress line: a dead letter queue of millions drains in requests that
each end in time, and one that fails stops the drain where it was. A letter dead-lettered again
while the drain runs keeps its place behind the drain's cursor and is not resent twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import click

from atomq import defaults
from atomq.cli.confirm import confirm, yes_option
from atomq.cli.connection import connection_options
from atomq.cli.output import all_matched, emit
from atomq.cli.progress import Progress
from atomq.client import AtomqClient


@click.group("dead-letters")
def dead_letters() -> None:
    """A queue's dead letters."""


REASON_HELP = "only the dead letters given this reason (expired, ack timeout, nacked, a nack's reason)"


def _one_selection(ids: tuple[str, ...], reason: str | None) -> None:
    if ids and reason is not None:
        raise click.UsageError("give IDS or --reason, not both")


def _pages(c: AtomqClient, queue: str, subscriber: str | None, reason: str | None) -> Iterator[list[str]]:
    """The ids of the dead letters (of ``reason``), a page at a time."""
    page: list[str] = []
    for letter in c.dead_letters(queue, subscriber, limit=defaults.MAX_PAGE_LIMIT, reason=reason):
        page.append(letter["id"])
        if len(page) == defaults.MAX_PAGE_LIMIT:
            yield page
            page = []
    if page:
        yield page


def _apply(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None, reason: str | None,
           act: Callable[[list[str]], int], doing: str) -> int:
    """``act`` on IDS, else on every dead letter (of ``reason``), page by page."""
    if ids:
        return act(list(ids))
    total = 0
    progress = Progress(f"{doing} the dead letters of {queue}", "dead letters")
    for page in _pages(c, queue, subscriber, reason):
        total += act(page)
        progress.update(total)
    progress.finish(total)
    return total


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
    n = _apply(c, queue, ids, subscriber, reason, lambda page: c.resend_dead_letters(queue, page, subscriber),
               "resending")
    emit({"resent": n}, [(n,)], ("RESENT",))
    all_matched(len(set(ids)), n, "resent")


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
    n = _apply(c, queue, ids, subscriber, reason, lambda page: c.delete_dead_letters(queue, page, subscriber),
               "deleting")
    emit({"deleted": n}, [(n,)], ("DELETED",))
    all_matched(len(set(ids)), n, "deleted")
