"""``atomq server``: the settings every node shares, the store's figures, the nodes and the tenants
ranked by what needs an operator (owner key)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from atomq.cli.connection import owner_options
from atomq.cli.options import name_value_pairs
from atomq.cli.output import emit, span
from atomq.client import AtomqClient
from atomq.platform.watch.overview import TENANT_ORDERS

HISTORY = "memory_history"
"""Left out of the table (a list of changes): --json shows it."""


@click.group()
def server() -> None:
    """The server's shared settings, the store's figures, its nodes, and who is loud, stuck or full
    (owner key)."""


@server.command("show")
@owner_options
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
@owner_options
def server_update(c: AtomqClient, changes: dict[str, Any]) -> None:
    """Change shared settings; every node applies them within a few seconds. A setting that is
    unknown or out of its range changes nothing and names itself."""
    if not changes:
        raise click.UsageError("nothing to change: give --set NAME=VALUE (atomq server show lists the settings)")
    data = c.update_server(**changes)
    emit(data, [(name, _text(data[name])) for name in changes if name in data], ("SETTING", "VALUE"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@server.command("nodes")
@owner_options
def server_nodes(c: AtomqClient) -> None:
    """The nodes on the store: address, version, uptime, when each was last heard, the execution
    workers each keeps, and which holds the maintenance lease. A node silent for 15 s was killed,
    lost the store, or is a record a backup restored: its uptime stops at when it was last heard,
    and it is listed for 10 minutes."""
    nodes = c.nodes()
    now = time.time()
    emit(nodes, [(n["id"] + (" *" if n["maintenance_lease"] else ""), n["url"], n["version"],
                  span(n["up_s"]), _heard(n, now), ", ".join(_worker(w) for w in n["workers"]) or "none")
                 for n in nodes], ("NODE (* maintenance)", "URL", "VERSION", "UP", "LAST HEARD", "WORKERS"))


def _heard(n: dict[str, Any], now: float) -> str:
    ago = f"{span(max(0.0, now - n['seen_at']))} ago"
    return f"SILENT, {ago}" if n["silent"] else ago


@server.command("top")
@click.option("--sort", type=click.Choice(list(TENANT_ORDERS)), default="traffic", show_default=True,
              help="; ".join(f"{key}: {words}" for key, words in TENANT_ORDERS.items()) + ".")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="Tenants listed.")
@owner_options
def server_top(c: AtomqClient, sort: str, limit: int) -> None:
    """The tenants that need an operator first: the loudest, the stuck, the full, from the last
    sample of the platform (every 10 s or more); traffic and refusals are over the last interval."""
    data = c.overview(sort=sort, limit=limit)
    if data["sampled_at"] is None and not click.get_current_context().find_root().obj.get("json"):
        click.echo("not sampled yet: the node holding the maintenance lease samples every 10 s or more", err=True)
    emit(data, [(t["name"], t["id"], "-" if t["traffic_per_s"] is None else f"{t['traffic_per_s']:.1f}/s",
                 t["depth"], t["in_flight"], t["dead_letters"], _stored(t), t["refused"],
                 _listeners(t))
                for t in data["tenants"]],
         ("TENANT", "ID", "TRAFFIC", "WAITING", "IN FLIGHT", "DEAD", "STORED", "REFUSED", "LISTENERS"))


def _worker(w: dict[str, Any]) -> str:
    text = f"{w['engine']} {w['state']}"
    if w.get("execution"):
        text += f" running {w['execution']}"
    return text + (f" ({w['problem']})" if w["problem"] else "")


def _listeners(t: dict[str, Any]) -> str:
    text = ", ".join(f"{n} {state}" for state, n in (t["listeners"] or {}).items() if n)
    return f"{text}; {t['executions_running']} under way" if t["executions_running"] else text


def _stored(t: dict[str, Any]) -> str:
    if t["stored_bytes"] is None:
        return ""
    if not t["disk_quota_bytes"]:
        return f"{t['stored_bytes']:,} B"
    return f"{t['stored_bytes']:,} B ({100 * t['stored_bytes'] / t['disk_quota_bytes']:.0f}% of quota)"
