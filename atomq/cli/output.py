"""What the management commands print: tables for people and, with ``--json``, the API's own JSON
for scripts."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
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
