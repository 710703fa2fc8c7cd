"""How a command fails: a message for people on standard error and a non-zero exit status; with
``--json``, the same failure as the API's error JSON, ``{"error": {"code", "message", "details"}}``
(``atomq.api.errors``), so that a script reads one shape whether the node or the command refused.

``Failure`` carries the code and details of what failed (the node's own, for an error it
answered); a usage error click raises (an unknown option, a value out of range) has the code
``invalid_usage``, any other failure ``command_failed``. The exit status is the same with and
without ``--json``: 1 for a failure, 2 for a usage error.
"""

from __future__ import annotations

import json
from typing import Any

import click

from atomq.errors import AtomqError

ARGS = "atomq.args"
"""``ctx.meta`` of the root context: the command line's arguments, read before click parses them,
so that a usage error is printed as JSON too when ``--json`` was given."""


class Failure(click.ClickException):
    """A failure with the code and details of the API's error JSON. ``text`` is what people read
    (it may spell out the details); ``message`` is the JSON's, ``text`` when not given."""

    def __init__(self, text: str, code: str, message: str | None = None, **details: Any) -> None:
        super().__init__(text)
        self.body: dict[str, Any] = {"code": code, "message": message or text, "details": details}

    @classmethod
    def of(cls, exc: AtomqError) -> Failure:
        """An error the node answered (or the client raised), with the fields a schema refused
        spelled out in the text, which the message only points to."""
        return cls(describe(exc), exc.code, exc.message, **exc.details)


class UsageFailure(Failure):
    """A failure of how the command was called (exit status 2, as click's usage errors)."""

    exit_code = 2


def describe(exc: AtomqError) -> str:
    """An error as the command prints it: its code and message, and the fields a schema refused
    (``details.fields``, by location)."""
    text = f"{exc.code}: {exc.message}"
    for location in (exc.details.get("fields") or {}).values():
        for name, problems in location.items():
            text += f"\n  {name}: {'; '.join(map(str, problems)) if isinstance(problems, list) else problems}"
    return text


def error_json(exc: click.ClickException) -> dict[str, Any]:
    """The API's error JSON of a failure."""
    if isinstance(exc, Failure):
        return {"error": exc.body}
    if isinstance(exc, click.UsageError):
        details = {"command": exc.ctx.command_path} if exc.ctx is not None else {}
        return {"error": {"code": "invalid_usage", "message": exc.format_message(), "details": details}}
    return {"error": {"code": "command_failed", "message": exc.format_message(), "details": {}}}


def wants_json(ctx: click.Context) -> bool:
    """Whether the command was given ``--json``: as its options say once they are parsed, else as
    its arguments do (up to a ``--``, after which ``--json`` would be a text)."""
    if (ctx.obj or {}).get("json"):
        return True
    args: list[str] = ctx.meta.get(ARGS, [])
    return "--json" in (args[:args.index("--")] if "--" in args else args)


class FailsAsJson(click.Group):
    """The root group: with ``--json``, whatever failure a command ends with is printed as the
    API's error JSON on standard error, with the exit status it has without."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[ARGS] = list(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            if not wants_json(ctx):
                raise
            click.echo(json.dumps(error_json(exc), ensure_ascii=False), err=True)
            ctx.exit(exc.exit_code)
