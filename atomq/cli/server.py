"""``atomq server``: the settings every node shares, and the store's figures (owner key)."""

from __future__ import annotations

import json
from typing import Any

import click

from atomq.cli.connection import connection_options
from atomq.cli.options import name_value_pairs
from atomq.cli.output import emit
from atomq.client import AtomqClient

HISTORY = "memory_history"
"""Left out of the table (a list of changes): --json shows it."""


@click.group()
def server() -> None:
    """The server's shared settings and the store's figures (owner key)."""


@server.command("show")
@connection_options
def server_show(c: AtomqClient) -> None:
    """Every shared setting and the store's figures (memory state, bytes, messages)."""
    data = c.server()
    emit(data, [(name, _text(value)) for name, value in data.items() if name != HISTORY], ("SETTING", "VALUE"))


def _value(ctx: click.Context, param: click.Parameter, pairs: tuple[str, ...]) -> dict[str, Any]:
    """NAME=VALUE pairs; a VALUE that reads as JSON (a number, a list, an object) is that, else text."""
    changes: dict[str, Any] = {}
    for name, text in name_value_pairs(pairs):
        try:
            changes[name] = json.loads(text)
        except ValueError:
            changes[name] = text
    return changes


@server.command("update")
@click.option("--set", "changes", multiple=True, metavar="NAME=VALUE", callback=_value,
              help="A setting to change (repeatable), its value as JSON where it is not text: "
                   "--set dedupe_window_s=600 --set 'redelivery_delays_s=[1,2,3]' "
                   "--set 'memory_thresholds={\"yellow\":0.6,\"orange\":0.8,\"red\":0.9}'.")
@connection_options
def server_update(c: AtomqClient, changes: dict[str, Any]) -> None:
    """Change shared settings; every node applies them within a few seconds. A setting that is
    unknown or out of its range changes nothing and names itself."""
    if not changes:
        raise click.UsageError("nothing to change: give --set NAME=VALUE (atomq server show lists the settings)")
    data = c.update_server(**changes)
    emit(data, [(name, _text(data[name])) for name in changes if name in data], ("SETTING", "VALUE"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
