"""What several commands share: options named after their ``ATOMQ_*`` variable, and ``--log-format``."""

from __future__ import annotations

import os
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
