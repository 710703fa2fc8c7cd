"""How the management commands reach a node: ``--url``, ``--key``, ``--data-dir`` and ``--json``
on each, ``--tenant`` on those that act on a tenant's queues, and the client they make of them
(``atomq.client``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from atomq import defaults
from atomq.cli.failures import Failure, UsageFailure
from atomq.client import AtomqClient
from atomq.errors import AtomqError
from atomq.tenants.records import TENANT_ID


NO_TENANT = "the owner key acts for a tenant: pass --tenant with its id or name (or set ATOMQ_TENANT)"


def _client(ctx: click.Context) -> AtomqClient:
    o = ctx.find_root().obj or {}
    url = o.get("url") or defaults.NODE_URL
    key = o.get("key") or _owner_key(Path(o.get("data_dir") or defaults.DATA_DIR).absolute() / "owner.key", url)
    return AtomqClient(url, key)


def _owner_key(path: Path, url: str) -> str:
    """The owner key a node keeps in its data directory, for a command given no key; run elsewhere,
    the error names the file it looked for and the options that point elsewhere."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        why = f"{path} does not exist"
    except OSError as exc:
        why = f"cannot read {path}: {exc.strerror or exc}"
    raise UsageFailure(
        f"no key to call {url} with: {why}. Give a key with --key (or ATOMQ_KEY), or the node's data "
        "directory, which holds its owner key, with --data-dir (or ATOMQ_DATA_DIR); --url (or ATOMQ_URL) "
        "names another node.", "no_key", owner_key_file=str(path))


def tenant_id(client: AtomqClient, tenant: str) -> str:
    """The id of the tenant ``tenant`` names, for the owner's calls on ``/v1/tenants/<id>``: an id as
    it is, or a tenant's name (names are unique); a name no tenant has is a usage error. (A queue
    command's --tenant goes to the node as it is: ``X-Atomq-Tenant`` takes a name.)"""
    if TENANT_ID.fullmatch(tenant):
        return tenant
    named = client.tenants(name=tenant)
    if not named:
        raise UsageFailure(f"no tenant has the id or name {tenant!r} (see atomq tenants list)", "not_found",
                           tenant=tenant)
    return str(named[0]["id"])


def connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --key, --tenant, --data-dir and --json on a command that acts on a tenant's queues,
    kept in the context."""
    return _with_connection(f, acts_for_tenant=True)


def owner_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --key, --data-dir and --json on an owner-only command (tenants, the server): no
    --tenant, which means nothing there."""
    return _with_connection(f, acts_for_tenant=False)


def key_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --key, --data-dir and --json on a command about the key itself (its SQS credentials):
    no --tenant, as a key acts for its own tenant only."""
    return _with_connection(f, acts_for_tenant=False)


def _with_connection(f: Callable[..., Any], acts_for_tenant: bool) -> Callable[..., Any]:
    @wraps(f)
    def wrapper(*args: Any, url: str, key: str | None, data_dir: Path | None, as_json: bool,
                tenant: str | None = None, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        ctx.find_root().obj = {"url": url, "key": key, "tenant": tenant, "data_dir": data_dir, "json": as_json}
        try:
            with _client(ctx) as client:
                if tenant:
                    client.act_for(tenant)  # an id or a name: the node finds the tenant either way
                return f(client, *args, **kwargs)
        except AtomqError as exc:
            if exc.code == "invalid_input" and exc.details.get("field") == "X-Atomq-Tenant":
                raise UsageFailure(NO_TENANT, exc.code, **exc.details) from None
            if tenant and exc.code == "not_found" and "tenant" in exc.details:
                raise UsageFailure(f"no tenant has the id or name {tenant!r} (see atomq tenants list)", "not_found",
                                   tenant=tenant) from None
            raise Failure.of(exc) from None

    options = [
        click.option("--url", envvar="ATOMQ_URL", show_envvar=True, default=defaults.NODE_URL, show_default=True,
                     help="The atomq node to talk to."),
        click.option("--key", envvar="ATOMQ_KEY", show_envvar=True,
                     help="A tenant's API key or the owner key (default: the owner key in --data-dir)."
                     if acts_for_tenant else "The owner key (default: the one in --data-dir)."),
        *([click.option("--tenant", envvar="ATOMQ_TENANT", show_envvar=True,
                        help="With the owner key: the tenant (its id or name) whose queues to act on.")]
          if acts_for_tenant else []),
        click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="ATOMQ_DATA_DIR",
                     show_envvar=True, help="The node's data directory, where to find owner.key when no --key "
                                            f"is given (default: {defaults.DATA_DIR} in the current directory)."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print the API's JSON instead of a table, and a failure as the API's error JSON "
                          "on standard error."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
