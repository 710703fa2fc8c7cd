"""``atomq listeners``: the tenant's listeners, deployed, shown, paused, resumed, restarted, deleted."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click

from atomq import defaults
from atomq.cli.connection import connection_options
from atomq.cli.output import emit
from atomq.client import AtomqClient
from atomq.errors import NotFound


@click.group()
def listeners() -> None:
    """The tenant's listeners: a registered process run on a queue's messages.

    A listener takes batches of messages from its queue (or, on a
    publish/subscribe queue, from its own subscriber) and runs a process the
    platform owner registered (such as forward) on each batch, in
    executions on the node's workers. Queues must exist before a listener
    is deployed on them.
    """


LAST_ERROR_WIDTH = 40


def _truncated(text: str, width: int = LAST_ERROR_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _listener_rows(data: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [(x["name"], x["queue"], x["process"], x["state"], x["executions"], x["failures"],
             _truncated(x["last_error"])) for x in data]


LISTENER_HEADERS = ("NAME", "QUEUE", "PROCESS", "STATE", "EXECUTIONS", "FAILURES", "LAST ERROR")


def _emit_listener(x: Any) -> None:
    emit(x, _listener_rows([x]), LISTENER_HEADERS)


def _settings(settings_json: str | None, pairs: tuple[str, ...]) -> dict[str, Any]:
    """--settings-json's object, then each --setting key=value over it."""
    settings: dict[str, Any] = {}
    if settings_json is not None:
        try:
            loaded = json.loads(settings_json)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--settings-json") from None
        if not isinstance(loaded, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--settings-json")
        settings.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"takes key=value, not {pair!r}", param_hint="--setting")
        settings[key.strip()] = value
    return settings


@listeners.command("list")
@connection_options
def listeners_list(c: AtomqClient) -> None:
    """Every listener with its state and counts.

    STATE is running, paused, error (the last execution failed) or waiting: no worker of the
    listener's engine is alive, and LAST ERROR says what is missing. LAST ERROR is cut short
    here; `listeners show` or --json has it whole.
    """
    data = c.listeners()
    emit(data, _listener_rows(data), LISTENER_HEADERS)


@listeners.command("show")
@click.argument("name")
@connection_options
def listeners_show(c: AtomqClient, name: str) -> None:
    """One listener in full: its deployment, settings, state and counts."""
    x = c.listener(name)
    emit(x, [(k, json.dumps(v, ensure_ascii=False) if isinstance(v, dict) else v) for k, v in x.items()],
         ("FIELD", "VALUE"))


@listeners.command("deploy")
@click.argument("name")
@click.option("--queue", required=True, help="The queue whose messages the listener processes (it must exist).")
@click.option("--process", required=True,
              help="A process registered on the platform, such as forward or echo-service.")
@click.option("--subscriber",
              help="Publish/subscribe queues only: the subscriber to read (default: the listener's name); "
                   "created when deployed.")
@click.option("--batch-size", type=click.IntRange(1, defaults.MAX_SPARK_LISTENER_BATCH_SIZE),
              default=defaults.LISTENER_BATCH_SIZE, show_default=True,
              help=f"Most messages one execution processes: up to {defaults.MAX_LISTENER_BATCH_SIZE} on the fork "
                   f"engine, {defaults.MAX_SPARK_LISTENER_BATCH_SIZE} on Spark.")
@click.option("--max-concurrent", "max_concurrent", type=click.IntRange(0, defaults.MAX_CONCURRENT_EXECUTIONS),
              default=0, show_default=True, help="Most executions running at once (0: no limit).")
@click.option("--engine", type=click.Choice(["fork", "spark"]),
              help="What runs the executions: a forked work horse, or a DataFrame pipeline on the Spark worker "
                   "(default: fork, or on a redeploy the listener's own).")
@click.option("--setting", "pairs", multiple=True, metavar="KEY=VALUE",
              help="A setting of the process, its value a string (repeatable; overrides --settings-json), "
                   "e.g. --setting to=results for forward.")
@click.option("--settings-json", metavar="JSON",
              help="The process's settings as a JSON object, for values that are not strings.")
@connection_options
def listeners_deploy(c: AtomqClient, name: str, queue: str, process: str, subscriber: str | None,
                     batch_size: int, max_concurrent: int, engine: str | None, pairs: tuple[str, ...],
                     settings_json: str | None) -> None:
    """Deploy listener NAME, or redeploy it (its state and counts stay).

    The process must be registered and accept the settings, else nothing is deployed.
    """
    if engine is None:
        try:
            engine = str(c.listener(name)["engine"])
        except NotFound:
            engine = "fork"
    x = c.put_listener(name, queue, process, subscriber=subscriber, batch_size=batch_size,
                       max_concurrent_executions=max_concurrent, engine=engine,
                       settings=_settings(settings_json, pairs))
    _emit_listener(x)


@listeners.command("pause")
@click.argument("name")
@connection_options
def listeners_pause(c: AtomqClient, name: str) -> None:
    """Pause NAME: no new execution starts.

    Running executions finish; messages wait in the queue until it resumes.
    """
    _emit_listener(c.pause_listener(name))


@listeners.command("resume")
@click.argument("name")
@connection_options
def listeners_resume(c: AtomqClient, name: str) -> None:
    """Start executions of a paused NAME again."""
    _emit_listener(c.resume_listener(name))


@listeners.command("restart")
@click.argument("name")
@connection_options
def listeners_restart(c: AtomqClient, name: str) -> None:
    """Restart NAME, after an error for instance.

    Clears its error, frees the slots of executions it waits for, and runs it again.
    """
    _emit_listener(c.restart_listener(name))


@listeners.command("delete")
@click.argument("name")
@connection_options
def listeners_delete(c: AtomqClient, name: str) -> None:
    """Delete NAME; running executions finish, no new one starts. Its queue and subscriber stay."""
    c.delete_listener(name)
    emit({"deleted": name}, [(name,)], ("DELETED",))
