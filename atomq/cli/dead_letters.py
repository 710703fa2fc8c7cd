"""``atomq dead-letters``: a queue's dead letters.

Resending or deleting all of them (or all of a reason) is one request, which the server works
through in chunks; meanwhile a second connection reads the dead letters' count every second for a
progress line, so a drain of millions says how far it is.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as StillRunning

import click

from atomq.cli.confirm import confirm, yes_option
from atomq.cli.connection import connection_options
from atomq.cli.failures import Failure
from atomq.cli.output import all_matched, emit
from atomq.cli.progress import Progress
from atomq.client import AtomqClient

DRAIN_TIMEOUT_S = 3600.0
"""How long one request that resends or deletes every dead letter may take."""
POLL_S = 1.0


@click.group("dead-letters")
def dead_letters() -> None:
    """A queue's dead letters."""


REASON_HELP = "only the dead letters given this reason (expired, ack timeout, nacked, a nack's reason)"
REASON_ACT_HELP = REASON_HELP + "; one that none has is an error (exit status 1) that names the reasons present"


def _one_selection(ids: tuple[str, ...], reason: str | None) -> None:
    if ids and reason is not None:
        raise click.UsageError("give IDS or --reason, not both")


def _dead_count(c: AtomqClient, queue: str, subscriber: str | None) -> int:
    info = c.queue(queue)
    if subscriber is None:
        return int(info["dead_letters"])
    return next((int(s["dead_letters"]) for s in info["subscribers"] if s["name"] == subscriber), 0)


def _apply(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None,
           act: Callable[[list[str] | None, float | None], int], doing: str) -> int:
    """``act`` on IDS; else on all (of the reason) in one request, with a progress line."""
    if ids:
        return act(list(ids), None)
    progress = Progress(f"{doing} the dead letters of {queue}", "dead letters")
    with c.clone() as watcher, ThreadPoolExecutor(1) as pool:
        before = _dead_count(watcher, queue, subscriber)
        future = pool.submit(act, None, DRAIN_TIMEOUT_S)
        while True:
            try:
                done = future.result(timeout=POLL_S)
                break
            except StillRunning:
                progress.update(max(0, before - _dead_count(watcher, queue, subscriber)))
    progress.finish(done)
    return done


def _reason_matched(c: AtomqClient, queue: str, subscriber: str | None, reason: str | None, done: int,
                    what: str) -> None:
    """Called after the result is printed: a --reason that matched no dead letter is an error (exit
    status 1), as an id that matched nothing is, so that a misspelt reason is noticed; it names the
    reasons present (as ``atomq dead-letters reasons`` counts them)."""
    if reason is None or done:
        return
    counted = c.dead_letter_reasons(queue, subscriber)
    present = [r["reason"] for r in counted["reasons"]]
    which = f"{queue} (subscriber {subscriber})" if subscriber else queue
    text = f"no dead letter of {which} has the reason {reason!r} ({done} {what}); "
    if not counted["counted"]:
        text += "it has no dead letters"
    else:
        among = "present" if counted["complete"] else f"most frequent among its newest {counted['counted']}"
        text += f"the reasons {among}: {', '.join(map(repr, present))} (atomq dead-letters reasons {queue})"
    raise Failure(text, "not_found", reason=reason, reasons_present=present)


@dead_letters.command("list")
@click.argument("queue")
@click.option("--subscriber")
@click.option("--reason", help=REASON_HELP)
@connection_options
def dead_letters_list(c: AtomqClient, queue: str, subscriber: str | None, reason: str | None) -> None:
    """Every dead letter with its reason."""
    data = list(c.dead_letters(queue, subscriber, reason=reason))
    emit(data, [(m["id"], m["failed_deliveries"], m["reason"]) for m in data], ("ID", "FAILED", "REASON"))


@dead_letters.command("reasons")
@click.argument("queue")
@click.option("--subscriber")
@connection_options
def dead_letters_reasons(c: AtomqClient, queue: str, subscriber: str | None) -> None:
    """The reasons present among the dead letters, the most frequent first, with how many have each."""
    data = c.dead_letter_reasons(queue, subscriber)
    emit(data, [(r["count"], r["reason"]) for r in data["reasons"]], ("COUNT", "REASON"))
    if not data["complete"] and not click.get_current_context().find_root().obj.get("json"):
        click.echo(f"(counted over the newest {data['counted']:,} dead letters; the rarest reasons may be left out)",
                   err=True)


@dead_letters.command("resend")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--subscriber")
@click.option("--reason", help=REASON_ACT_HELP)
@connection_options
def dead_letters_resend(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None,
                        reason: str | None) -> None:
    """Resend the dead letters IDS (those of --reason, or all of them, when none is given)."""
    _one_selection(ids, reason)
    n = _apply(c, queue, ids, subscriber, lambda chosen, timeout: c.resend_dead_letters(
        queue, chosen, subscriber, reason=reason, timeout=timeout), "resending")
    emit({"resent": n}, [(n,)], ("RESENT",))
    all_matched(len(set(ids)), n, "resent")
    _reason_matched(c, queue, subscriber, reason, n, "resent")


@dead_letters.command("delete")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--subscriber")
@click.option("--reason", help=REASON_ACT_HELP)
@yes_option
@connection_options
def dead_letters_delete(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None,
                        reason: str | None, yes: bool) -> None:
    """Delete the dead letters IDS (those of --reason, or all of them, when none is given)."""
    _one_selection(ids, reason)
    if not ids:
        which = f"the dead letters of reason {reason!r}" if reason else "every dead letter"
        confirm(f"delete {which} of queue {queue}", yes)
    n = _apply(c, queue, ids, subscriber, lambda chosen, timeout: c.delete_dead_letters(
        queue, chosen, subscriber, reason=reason, timeout=timeout), "deleting")
    emit({"deleted": n}, [(n,)], ("DELETED",))
    all_matched(len(set(ids)), n, "deleted")
    _reason_matched(c, queue, subscriber, reason, n, "deleted")
