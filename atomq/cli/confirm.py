"""Confirmation of what cannot be undone: asked on a terminal, ``--yes`` in scripts."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click


def yes_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--yes``: do it without asking."""
    return click.option("--yes", "-y", is_flag=True, help="Do it without asking (what a script passes).")(f)


def confirm(what: str, yes: bool) -> None:
    """Asks whether to ``what`` on a terminal, unless ``yes``; without a terminal to ask on and
    without ``--yes`` it refuses, rather than guess."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"this would {what}, which cannot be undone: pass --yes to confirm")
    click.confirm(f"{what[0].upper()}{what[1:]}?", abort=True)
