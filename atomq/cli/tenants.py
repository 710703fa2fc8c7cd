"""``atomq tenants``: tenants and their keys (owner key)."""

from __future__ import annotations

import click

from atomq import defaults
from atomq.cli.connection import connection_options
from atomq.cli.output import emit
from atomq.client import AtomqClient


@click.group()
def tenants() -> None:
    """Tenants and their keys (owner key)."""


@tenants.command("list")
@connection_options
def tenants_list(c: AtomqClient) -> None:
    """Every tenant."""
    data = c.tenants()
    emit(data, [(t["id"], t["name"], t["rate_limit_per_minute"], t["disk_quota_bytes"], t["spark_weight"])
                for t in data],
         ("ID", "NAME", "RATE LIMIT/MIN", "DISK QUOTA", "SPARK WEIGHT"))


@tenants.command("create")
@click.argument("name")
@click.option("--rate-limit-per-minute", type=click.IntRange(0), default=defaults.TENANT_RATE_LIMIT_PER_MINUTE,
              show_default=True)
@click.option("--disk-quota-bytes", type=click.IntRange(0), default=defaults.TENANT_DISK_QUOTA_BYTES,
              show_default=True)
@click.option("--spark-weight", type=click.IntRange(1, defaults.MAX_SPARK_WEIGHT), default=defaults.SPARK_WEIGHT,
              show_default=True,
              help=f"Weight (1 to {defaults.MAX_SPARK_WEIGHT}) of the tenant's FAIR scheduler pool when its listeners run on Spark.")
@connection_options
def tenants_create(c: AtomqClient, name: str, rate_limit_per_minute: int, disk_quota_bytes: int,
                   spark_weight: int) -> None:
    """Create a tenant; prints its API key, shown only this once."""
    t = c.create_tenant(name, rate_limit_per_minute=rate_limit_per_minute, disk_quota_bytes=disk_quota_bytes,
                        spark_weight=spark_weight)
    emit(t, [(t["id"], t["name"], t["api_key"])], ("ID", "NAME", "API KEY (shown once)"))


@tenants.command("delete")
@click.argument("tenant_id")
@connection_options
def tenants_delete(c: AtomqClient, tenant_id: str) -> None:
    """Delete a tenant, its keys and all its data."""
    c.delete_tenant(tenant_id)
    emit({"deleted": tenant_id}, [(tenant_id,)], ("DELETED",))
