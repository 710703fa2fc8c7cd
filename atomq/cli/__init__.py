"""The ``atomq`` command line: the group ``main`` and its commands, one module each.

``atomq serve`` runs the main node; ``atomq worker`` and ``atomq spark-worker`` run
executions; ``atomq selftest`` shows the queue server at work on its embedded
defaults; ``atomq audit`` checks a tenant's stored queues for broken invariants;
``atomq demo`` runs the worked example. The management commands (tenants, queues,
subscribers, send, publish, get, dead-letters, listeners) speak to a running node.

With ``--json``, a command that fails prints the API's error JSON on standard error
(``atomq.cli.failures``). Settings come from, lowest first: a TOML config file (``--config``, its
``[serve]`` table for ``atomq serve``), ``ATOMQ_*`` environment variables,
then flags; each flag names its variable in ``--help``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import click

from atomq.cli.audit import audit
from atomq.cli.credentials import credentials
from atomq.cli.dead_letters import dead_letters
from atomq.cli.demo.command import demo
from atomq.cli.failures import FailsAsJson
from atomq.cli.listeners import listeners
from atomq.cli.messages import browse, get, publish, send
from atomq.cli.queues import queues
from atomq.cli.selftest import selftest
from atomq.cli.serve import serve
from atomq.cli.server import server
from atomq.cli.settle import ack, extend, nack, release
from atomq.cli.spark_worker import spark_worker
from atomq.cli.subscribers import subscribers
from atomq.cli.tenants import tenants
from atomq.cli.worker import worker


def _load_config_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Makes a TOML file's tables the defaults of the commands they name."""
    if value is None:
        return None
    try:
        data = tomllib.loads(value.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value}: {exc}") from None
    ctx.default_map = {command: {k.replace("-", "_"): v for k, v in table.items()}
                       for command, table in data.items() if isinstance(table, dict)}
    return value


@click.group(cls=FailsAsJson)
@click.version_option(package_name="atomq")
@click.option("--config", type=click.Path(dir_okay=False, exists=True, path_type=Path), envvar="ATOMQ_CONFIG",
              show_envvar=True, is_eager=True, expose_value=False, callback=_load_config_file,
              help="TOML file whose [serve] (etc.) table sets defaults; env vars and flags override it.")
def main() -> None:
    """atomq: a multi-tenant queue platform on Redis streams."""


for _command in (serve, worker, demo, spark_worker, selftest, audit, server,
                 tenants, queues, subscribers, send, publish, get, ack, nack, extend, release, browse, dead_letters,
                 listeners, credentials):
    main.add_command(_command)
