"""``atomq audit``: checks that every tenant's stored queues keep their invariants."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
import redis

from atomq import defaults
from atomq.errors import AtomqError
from atomq.platform import QueueServer
from atomq.platform.store.connection import open_redis
from atomq.platform.store.data_dir import DataDirLock, in_use, read_holder
from atomq.platform.store.embedded import EmbeddedValkey, client_of_running
from atomq.platform.watch.audit import audit_tenant, repair_usage

AUDIT_RECHECK_S = 0.5
"""How long the audit of a live store waits before it looks again at a tenant that seemed broken."""


@click.command()
@click.option("--redis-url", envvar="ATOMQ_REDIS_URL", show_envvar=True,
              help="The Redis to audit (default: the embedded Valkey of --data-dir: the running node's, "
                   "else one started for the audit).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="ATOMQ_DATA_DIR",
              show_envvar=True, default=defaults.DATA_DIR, show_default=True,
              help="The data directory of the embedded Valkey.")
@click.option("--tenant", "tenants", multiple=True, help="Tenant id to audit (repeatable; default: all).")
@click.option("--repair", is_flag=True,
              help="Recount each tenant's usage counters from its data first (run it while the tenant is quiet).")
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object: {"tenants": [{"tenant", "problems", "repaired"?}], "problems": n}.')
def audit(redis_url: str | None, data_dir: Path, tenants: tuple[str, ...], repair: bool, as_json: bool) -> None:
    """Check that every tenant's queues, deliveries, documents and usage agree; exit 1 if not.

    On the data directory of a running node, the audit goes through that node's embedded Valkey;
    on a live store, a problem counts only if a second look a moment later finds it again.
    """
    lock = DataDirLock(data_dir)
    server = None
    try:
        if redis_url:
            client = open_redis(redis_url)
        elif lock.try_acquire("audit"):
            server = EmbeddedValkey(data_dir / "valkey")
            server.start()
            client = server.client()
        else:
            client = _running_node_store(data_dir)
        qs = QueueServer(client, migrate=False)
        live = server is None  # a store a node may be writing to while the audit reads
        bad = 0
        report: list[dict[str, Any]] = []
        for tenant in tenants or qs.tenants():
            entry: dict[str, Any] = {"tenant": tenant}
            if repair:
                counted = repair_usage(client, tenant)
                entry["repaired"] = {"stored_bytes": counted["stored_bytes"], "messages": counted["messages"]}
                if not as_json:
                    click.echo(f"{tenant}: usage set to {counted['stored_bytes']} bytes, "
                               f"{counted['messages']} messages")
            problems = audit_tenant(client, tenant)
            if problems and live:
                # It reads the tenant's keys one by one while the node serves it: a send or an
                # ack between two reads can look like a broken invariant. A real one stays.
                time.sleep(AUDIT_RECHECK_S)
                problems = [p for p in audit_tenant(client, tenant) if p in problems]
            bad += len(problems)
            report.append({**entry, "problems": problems})
            if not as_json:
                click.echo(f"{tenant}: " + ("consistent" if not problems else "; ".join(problems)))
        if as_json:
            click.echo(json.dumps({"tenants": report, "problems": bad}, indent=2))
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        try:
            if server is not None:
                server.stop()
        finally:
            lock.release()
    sys.exit(1 if bad else 0)


def _running_node_store(data_dir: Path) -> redis.Redis:
    """A client of the embedded Valkey of the node that holds ``data_dir``, which must not
    be stopped or doubled; an error that says why when there is none to reach."""
    holder = read_holder(data_dir)
    deadline = time.monotonic() + 10
    while holder is not None and holder.valkey_socket is None and not holder.redis_url_given:
        if time.monotonic() > deadline:  # a node still starting its Valkey
            break
        time.sleep(0.1)
        holder = read_holder(data_dir)
    if holder is None or holder.valkey_socket is None:
        raise in_use(data_dir, holder, "it uses a Redis of its own: audit that with --redis-url"
                     if holder is not None and holder.redis_url_given
                     else "its embedded Valkey cannot be found: audit once it has stopped")
    click.echo(f"{data_dir} belongs to atomq {holder.command} (pid {holder.pid}): auditing through its Valkey",
               err=True)
    return client_of_running(data_dir / "valkey", holder.valkey_socket, socket_timeout=30)
