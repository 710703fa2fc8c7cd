"""The management commands of ``atomq``: tenants, queues, send, get, dead letters, listeners.

They speak to a running node through ``atomq.client``, print tables for
people and, with ``--json``, the API's own JSON for scripts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any

import click

from atomq import defaults
from atomq.client import DEFAULT_URL, AtomqClient
from atomq.errors import AtomqError


def _client(ctx: click.Context) -> AtomqClient:
    o = ctx.find_root().obj or {}
    key = o.get("key")
    if not key:
        owner_file = Path(o.get("data_dir") or "atomq-data") / "owner.key"
        if not owner_file.exists():
            raise click.UsageError("give a key: --key or ATOMQ_KEY (or run where DIR/owner.key exists)")
        key = owner_file.read_text().strip()
    return AtomqClient(o.get("url") or DEFAULT_URL, key, tenant=o.get("tenant"))


def connection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--url, --key, --tenant, --data-dir and --json on a command, kept in the context."""

    @click.option("--url", envvar="ATOMQ_URL", show_envvar=True, default=DEFAULT_URL, show_default=True,
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


def emit(data: Any, rows: Iterable[Sequence[Any]] | None = None, headers: Sequence[str] = ()) -> None:
    """JSON with --json; else a table of ``rows`` under ``headers``."""
    if click.get_current_context().find_root().obj.get("json") or rows is None:
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    table = [list(map(str, headers))] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


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
@click.option("--rate-limit-per-minute", type=click.IntRange(0), default=0, show_default=True)
@click.option("--disk-quota-bytes", type=click.IntRange(0), default=0, show_default=True)
@click.option("--spark-weight", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Weight (1 to 1000) of the tenant's FAIR scheduler pool when its listeners run on Spark.")
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


@click.group()
def queues() -> None:
    """The tenant's queues."""


@queues.command("list")
@connection_options
def queues_list(c: AtomqClient) -> None:
    """Queues with their depth, in-flight and dead-letter counts."""
    data = c.queues()
    emit(data, [(q["name"], q["model"], q["depth"], q["in_flight"], q["dead_letters"]) for q in data],
         ("NAME", "MODEL", "DEPTH", "IN FLIGHT", "DEAD"))


@queues.command("create")
@click.argument("name")
@click.option("--model", type=click.Choice(["point_to_point", "publish_subscribe"]), default="point_to_point",
              show_default=True)
@click.option("--max-redeliveries", type=click.IntRange(0, 1000), default=6, show_default=True)
@click.option("--ack-timeout", "ack_timeout_s", type=click.FloatRange(0.01, 86400), default=30.0, show_default=True)
@connection_options
def queues_create(c: AtomqClient, name: str, model: str, max_redeliveries: int, ack_timeout_s: float) -> None:
    """Create or update a queue."""
    q = c.put_queue(name, model, max_redeliveries=max_redeliveries, ack_timeout_s=ack_timeout_s)
    emit(q, [(q["name"], q["model"], q["max_redeliveries"], q["ack_timeout_s"])],
         ("NAME", "MODEL", "MAX REDELIVERIES", "ACK TIMEOUT S"))


@queues.command("delete")
@click.argument("name")
@connection_options
def queues_delete(c: AtomqClient, name: str) -> None:
    """Delete a queue with its messages, dead letters and subscribers."""
    c.delete_queue(name)
    emit({"deleted": name}, [(name,)], ("DELETED",))


@click.command()
@click.argument("queue")
@click.argument("texts", nargs=-1)
@connection_options
def send(c: AtomqClient, queue: str, texts: tuple[str, ...]) -> None:
    """Send one message per TEXT (or per line of standard input when none is given)."""
    lines = list(texts) or [line.rstrip("\n") for line in sys.stdin]
    ids: list[str] = []
    for start in range(0, len(lines), 100):
        ids += c.send_texts(queue, lines[start:start + 100])
    emit({"ids": ids}, [(i,) for i in ids], ("ID",))


@click.command()
@click.argument("queue")
@click.option("--max", "max_messages", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--wait-ms", type=click.IntRange(0, 20_000), default=0, show_default=True)
@click.option("--subscriber", help="For a publish/subscribe queue.")
@click.option("--ack", is_flag=True, help="Ack what was received (else it is redelivered after the ack time-out).")
@connection_options
def get(c: AtomqClient, queue: str, max_messages: int, wait_ms: int, subscriber: str | None, ack: bool) -> None:
    """Receive messages from QUEUE."""
    got = c.get(queue, max_messages, wait_ms, subscriber)
    if ack and got:
        c.ack(queue, receipts=[m["receipt"] for m in got], subscriber=subscriber)
    emit(got, [(m["id"], m["delivery_count"], " | ".join(str(d.get("data", "<bytes>")) for d in m["documents"]))
               for m in got], ("ID", "DELIVERY", "DOCUMENTS"))


@click.group("dead-letters")
def dead_letters() -> None:
    """A queue's dead letters."""


@dead_letters.command("list")
@click.argument("queue")
@click.option("--subscriber")
@connection_options
def dead_letters_list(c: AtomqClient, queue: str, subscriber: str | None) -> None:
    """Every dead letter with its reason."""
    data = list(c.dead_letters(queue, subscriber))
    emit(data, [(m["id"], m["failed_deliveries"], m["reason"]) for m in data], ("ID", "FAILED", "REASON"))


@dead_letters.command("resend")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--subscriber")
@connection_options
def dead_letters_resend(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None) -> None:
    """Resend the dead letters IDS (all of them when none is given)."""
    n = c.resend_dead_letters(queue, list(ids) or None, subscriber)
    emit({"resent": n}, [(n,)], ("RESENT",))


@dead_letters.command("delete")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--subscriber")
@connection_options
def dead_letters_delete(c: AtomqClient, queue: str, ids: tuple[str, ...], subscriber: str | None) -> None:
    """Delete the dead letters IDS (all of them when none is given)."""
    n = c.delete_dead_letters(queue, list(ids) or None, subscriber)
    emit({"deleted": n}, [(n,)], ("DELETED",))


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
@click.option("--batch-size", type=click.IntRange(1, defaults.MAX_LISTENER_BATCH_SIZE), default=10, show_default=True,
              help="Most messages one execution processes.")
@click.option("--max-concurrent", "max_concurrent", type=click.IntRange(0, defaults.MAX_CONCURRENT_EXECUTIONS), default=0,
              show_default=True, help="Most executions running at once (0: no limit).")
@click.option("--setting", "pairs", multiple=True, metavar="KEY=VALUE",
              help="A setting of the process, its value a string (repeatable; overrides --settings-json), "
                   "e.g. --setting to=results for forward.")
@click.option("--settings-json", metavar="JSON",
              help="The process's settings as a JSON object, for values that are not strings.")
@connection_options
def listeners_deploy(c: AtomqClient, name: str, queue: str, process: str, subscriber: str | None,
                     batch_size: int, max_concurrent: int, pairs: tuple[str, ...],
                     settings_json: str | None) -> None:
    """Deploy listener NAME, or redeploy it (its state and counts stay).

    The process must be registered and accept the settings, else nothing is deployed.
    """
    x = c.put_listener(name, queue, process, subscriber=subscriber, batch_size=batch_size,
                       max_concurrent_executions=max_concurrent, settings=_settings(settings_json, pairs))
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


COMMANDS = (tenants, queues, send, get, dead_letters, listeners)
