"""How the management commands reach a node: ``--url``, ``--key``, ``--tenant``, ``--data-dir``
and ``--json`` on each, and the client they make of them (``atomq.client``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from atomq import defaults
from atomq.client import AtomqClient
from atomq.errors import AtomqError


def _client(ctx: click.Context) -> AtomqClient:
    o = ctx.find_root().obj or {}
    key = o.get("key")
    if not key:
        owner_file = Path(o.get("data_dir") or defaults.DATA_DIR) / "owner.key"
        if not owner_file.exists():
            raise click.UsageError("give a key: --key or ATOMQ_KEY (or run where DIR/owner.key exists)")
        key = owner_file.read_text().strip()
    return AtomqClient(o.get("url") or defaults.NODE_URL, key, tenant=o.get("tenant"))


def connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --key, --tenant, --data-dir and --json on a command, kept in the context."""

    @click.option("--url", envvar="ATOMQ_URL", show_envvar=True, default=defaults.NODE_URL, show_default=True,
                  help="The atomq node to talk to.")
    @click.option("--key", envvar="ATOMQ_KEY", show_envvar=True,
                  help="A tenant's API key or the owner key (default: the owner key in --data-dir).")
    @click.option("--tenant", envvar="ATOMQ_TENANT", show_envvar=True,
                  help="With the owner key: the tenant whose queues to act on.")
    @click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="ATOMQ_DATA_DIR",
                  show_envvar=True, help="Where to find owner.key when no --key is given.")
    @click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of a table.")
    @wraps(f)
    def wrapper(*args: Any, url: str, key: str | None, tenant: str | None, data_dir: Path | None,
                as_json: bool, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        ctx.find_root().obj = {"url": url, "key": key, "tenant": tenant, "data_dir": data_dir, "json": as_json}
        try:
            with _client(ctx) as client:
                return f(client, *args, **kwargs)
        except AtomqError as exc:
            raise click.ClickException(f"{exc.code}: {exc.message}") from None

    return wrapper
