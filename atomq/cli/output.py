"""What the management commands print: tables for people and, with ``--json``, the API's own JSON
for scripts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click

from atomq.cli.failures import Failure


def emit(data: Any, rows: Iterable[Sequence[Any]] | None = None, headers: Sequence[str] = ()) -> None:
    """JSON with --json; else a table of ``rows`` under ``headers``."""
    if click.get_current_context().find_root().obj.get("json") or rows is None:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    table = [list(map(str, headers))] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def all_matched(asked: int, done: int, what: str) -> None:
    """Called after the result is printed: an id that matched nothing is an error (exit status 1),
    so that a script notices a typo, or a message settled or gone meanwhile."""
    if done < asked:
        raise Failure(f"{asked - done} of the {asked} ids matched nothing ({done} {what})", "not_found",
                      asked=asked, matched=done)


def span(value: float) -> str:
    """A length of time in its largest whole units: ``3d 4h``, ``2h 5m``, ``42s``."""
    seconds = int(value)
    days, hours, minutes = seconds // 86400, seconds % 86400 // 3600, seconds % 3600 // 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds % 60}s" if minutes else f"{seconds}s"


def stored_somewhere(warnings: Sequence[Mapping[str, Any]], sent: int) -> None:
    """Called after the result is printed: messages the node accepted, gave ids and stored nowhere
    (the ``warnings`` of its answers: a publish/subscribe queue without subscribers, a topic no
    queue attracts) are an error (exit status 1), as an ack that matched nothing is, so that
    neither a person nor a script takes them for sent. ``sent``: the messages the command sent."""
    nowhere = sum(int(w.get("messages", 0)) for w in warnings)
    if not nowhere:
        return
    first = warnings[0]
    text = str(first["message"]) if len(warnings) == 1 else (
        f"{nowhere} of the {sent} messages, in {len(warnings)} requests, were stored nowhere; the first said: "
        f"{first['message']}")
    raise Failure(text, str(first.get("code", "stored_nowhere")), messages=nowhere, sent=sent,
                  warnings=list(warnings))
