"""``atomq tenants``: tenants and their keys (owner key)."""

from __future__ import annotations

from typing import Any

import click

from atomq import defaults
from atomq.cli.confirm import confirm, yes_option
from atomq.cli.connection import owner_options, tenant_id
from atomq.cli.failures import Failure
from atomq.cli.output import emit
from atomq.client import AtomqClient
from atomq.errors import AtomqError


@click.group()
def tenants() -> None:
    """Tenants and their keys (owner key)."""


@tenants.command("list")
@owner_options
def tenants_list(c: AtomqClient) -> None:
    """Every tenant."""
    data = c.tenants()
    emit(data, [_tenant_row(t) for t in data], TENANT_HEADERS)


RATE_LIMIT_HELP = ("Send requests the tenant may make on each node in a rate-limit window (the server's "
                   f"rate_limit_window_s, {defaults.RATE_LIMIT_WINDOW_S} s by default); one request counts once "
                   "however many messages it carries, and past the limit sends get 429 until the window closes. "
                   "0: no limit.")
DISK_QUOTA_BYTES_HELP = ("Bytes the tenant's messages (waiting, in flight or dead) may make the store hold: "
                         "documents, properties and the store's bookkeeping (its stored_bytes); a send that would "
                         "pass it is refused whole (507 quota_exceeded). 0: no limit.")


@tenants.command("create")
@click.argument("name")
@click.option("--rate-limit-per-minute", type=click.IntRange(0), default=defaults.TENANT_RATE_LIMIT_PER_MINUTE,
              show_default=True, help=RATE_LIMIT_HELP)
@click.option("--disk-quota-bytes", type=click.IntRange(0), default=defaults.TENANT_DISK_QUOTA_BYTES,
              show_default=True, help=DISK_QUOTA_BYTES_HELP)
@click.option("--spark-weight", type=click.IntRange(1, defaults.MAX_SPARK_WEIGHT), default=defaults.SPARK_WEIGHT,
              show_default=True,
              help=f"Weight (1 to {defaults.MAX_SPARK_WEIGHT}) of the tenant's FAIR scheduler pool when its listeners run on Spark.")
@owner_options
def tenants_create(c: AtomqClient, name: str, rate_limit_per_minute: int, disk_quota_bytes: int,
                   spark_weight: int) -> None:
    """Create a tenant; prints its API key, shown only this once."""
    t = c.create_tenant(name, rate_limit_per_minute=rate_limit_per_minute, disk_quota_bytes=disk_quota_bytes,
                        spark_weight=spark_weight)
    emit(t, [(t["id"], t["name"], t["api_key"])], ("ID", "NAME", "API KEY (shown once)"))


def _tenant_row(t: dict[str, Any]) -> tuple[Any, ...]:
    return t["id"], t["name"], t["rate_limit_per_minute"], t["disk_quota_bytes"], t["spark_weight"]


TENANT_HEADERS = ("ID", "NAME", "RATE LIMIT/MIN", "DISK QUOTA", "SPARK WEIGHT")


@tenants.command("show")
@click.argument("name_or_id", metavar="TENANT")
@owner_options
def tenants_show(c: AtomqClient, name_or_id: str) -> None:
    """One tenant (by its id or name), with what it stores."""
    t = c.tenant(tenant_id(c, name_or_id))
    emit(t, [(*_tenant_row(t), t["stored_bytes"])], (*TENANT_HEADERS, "STORED BYTES"))


@tenants.command("update")
@click.argument("name_or_id", metavar="TENANT")
@click.option("--name", help="A new name (names are unique).")
@click.option("--rate-limit-per-minute", type=click.IntRange(0), help=RATE_LIMIT_HELP)
@click.option("--disk-quota-bytes", type=click.IntRange(0), help=DISK_QUOTA_BYTES_HELP)
@click.option("--spark-weight", type=click.IntRange(1, defaults.MAX_SPARK_WEIGHT),
              help=f"Weight (1 to {defaults.MAX_SPARK_WEIGHT}) of the tenant's FAIR scheduler pool on Spark.")
@owner_options
def tenants_update(c: AtomqClient, name_or_id: str, **changes: Any) -> None:
    """Change a tenant's name or attachments (what is not given stays as it is)."""
    given = {name: value for name, value in changes.items() if value is not None}
    if not given:
        raise click.UsageError("nothing to change: give --name, --rate-limit-per-minute, --disk-quota-bytes or "
                               "--spark-weight")
    t = c.update_tenant(tenant_id(c, name_or_id), **given)
    emit(t, [_tenant_row(t)], TENANT_HEADERS)


@tenants.command("delete")
@click.argument("name_or_id", metavar="TENANT")
@yes_option
@owner_options
def tenants_delete(c: AtomqClient, name_or_id: str, yes: bool) -> None:
    """Delete a tenant (by its id or name), its keys and all its data."""
    tid = tenant_id(c, name_or_id)
    name = c.tenant(tid)["name"]
    confirm(f"delete tenant {name} ({tid}) with its keys and all its data", yes)
    c.delete_tenant(tid)
    emit({"deleted": tid}, [(tid,)], ("DELETED",))


@tenants.command("add-key")
@click.argument("name_or_id", metavar="TENANT")
@owner_options
def tenants_add_key(c: AtomqClient, name_or_id: str) -> None:
    """Another API key for a tenant; prints it, shown only this once."""
    key = c.create_key(tenant_id(c, name_or_id))
    emit(key, [(key["key_id"], key["api_key"])], ("KEY ID", "API KEY (shown once)"))


@tenants.command("revoke-key")
@click.argument("name_or_id", metavar="TENANT")
@click.argument("key_id")
@yes_option
@owner_options
def tenants_revoke_key(c: AtomqClient, name_or_id: str, key_id: str, yes: bool) -> None:
    """Revoke one of a tenant's keys: it stops working at once, on every node."""
    tid = tenant_id(c, name_or_id)
    confirm(f"revoke key {key_id} of tenant {tid}", yes)
    c.revoke_key(tid, key_id)
    emit({"revoked": key_id}, [(key_id,)], ("REVOKED",))


@tenants.command("rotate-key")
@click.argument("name_or_id", metavar="TENANT")
@click.argument("key_id")
@yes_option
@owner_options
def tenants_rotate_key(c: AtomqClient, name_or_id: str, key_id: str, yes: bool) -> None:
    """Replace one of a tenant's keys: a new key is made (printed once), then KEY_ID is revoked.
    Give the new key to its users before you run this: the old one stops working at once."""
    tid = tenant_id(c, name_or_id)
    confirm(f"replace key {key_id} of tenant {tid}, which stops working at once", yes)
    key = c.create_key(tid)
    try:
        c.revoke_key(tid, key_id)
    except AtomqError as exc:
        emit(key, [(key["key_id"], key["api_key"])], ("KEY ID", "API KEY (shown once)"))
        raise Failure(f"the new key above was made, but {key_id} was not revoked: {exc.code}: {exc.message}",
                      exc.code, f"the new key was made, but {key_id} was not revoked: {exc.message}",
                      **exc.details) from None
    emit({**key, "revoked": key_id}, [(key["key_id"], key["api_key"], key_id)],
         ("KEY ID", "API KEY (shown once)", "REVOKED"))
