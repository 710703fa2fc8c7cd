"""What several commands share: options named after their ``ATOMQ_*`` variable, ``--log-format``,
and NAME=VALUE arguments."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import click


def env(name: str) -> dict[str, Any]:
    """An option's ``ATOMQ_<name>`` variable, shown in ``--help``."""
    return {"envvar": f"ATOMQ_{name}", "show_envvar": True}


def _setup_logging(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Sets up logging as the option is read; the execution workers ``serve`` starts are
    processes of their own, which read the format from the environment."""
    from atomq.telemetry import setup_logging

    setup_logging(value)
    os.environ["ATOMQ_LOG_FORMAT"] = value
    return value


log_format_option = click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True, **env("LOG_FORMAT"),
    expose_value=False, callback=_setup_logging,
    help="Log lines as text, or as JSON objects: time, level, logger, message, and tenant, queue, listener, "
         "trace_id and span_id when known. Traces: see the OTEL_* variables in the README.")


def name_value_pairs(items: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(NAME, VALUE) of each ``NAME=VALUE`` (split at the first ``=``; VALUE may be empty)."""
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{item!r} is not NAME=VALUE")
        yield name, text
