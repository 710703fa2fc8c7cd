"""``atomq selftest``: the queue server at work on the embedded Valkey, each step said."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path

import click

from atomq.errors import AtomqError
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.store.data_dir import DataDirLock
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.watch.audit import audit_tenant


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="ATOMQ_DATA_DIR",
    show_envvar=True,
    help="Keep the embedded Valkey's data here (default: a temporary directory, removed afterwards).",
)
def selftest(data_dir: Path | None) -> None:
    """Start the embedded Valkey, then send, get, ack and nack a few messages, saying what happens."""
    temp = data_dir is None
    root = Path(tempfile.mkdtemp(prefix="atomq-selftest-")) if data_dir is None else data_dir
    lock = DataDirLock(root)
    server = EmbeddedValkey(root / "valkey")
    try:
        lock.acquire("selftest")
        click.echo(f"starting the embedded Valkey in {server.data_dir} (AOF on, noeviction) ...")
        server.start()
        qs = QueueServer(server.client())
        tenant = f"selftest-{uuid.uuid4().hex[:8]}"
        qs.put_queue(tenant, "orders", "point_to_point", max_redeliveries=1)
        click.echo(f"tenant {tenant}: created point-to-point queue 'orders' (max_redeliveries 1)")
        ids = qs.send(tenant, "orders", [
            OutgoingMessage(documents=(OutgoingDocument(f'{{"msgId": {n}}}', {"kind": "test"}),))
            for n in range(3)
        ])
        click.echo(f"sent 3 messages in one batch: {', '.join(ids)}")
        got = qs.get(tenant, "orders", max_messages=10)
        click.echo(f"got {len(got)}: " + ", ".join(f"{_text(d.documents[0].data)} (delivery {d.delivery_count})"
                                                   for d in got))
        acked = qs.ack(tenant, "orders", receipts=[d.receipt for d in got[:2]])
        click.echo(f"acked {acked}; nacking the last one")
        qs.nack(tenant, "orders", receipts=[got[2].receipt], reason="selftest failure")
        start = time.monotonic()
        (again,) = qs.get(tenant, "orders", wait_ms=5000)
        click.echo(f"redelivered after {time.monotonic() - start:.1f} s: {again.id} delivery_count "
                   f"{again.delivery_count}, redelivered {again.redelivered}")
        qs.nack(tenant, "orders", receipts=[again.receipt], reason="selftest failure")
        (dead,) = qs.dead_letters(tenant, "orders").items
        click.echo(f"failed again: dead-lettered with reason {dead.reason!r} after {dead.failed_deliveries} "
                   "failed deliveries")
        info = qs.get_queue(tenant, "orders")
        click.echo(f"queue 'orders': depth {info.depth}, in flight {info.in_flight}, "
                   f"dead letters {info.dead_letters}")
        problems = audit_tenant(qs.client, tenant)
        qs.delete_queue(tenant, "orders")
        if problems:
            raise click.ClickException("audit found: " + "; ".join(problems))
        click.echo("audit: consistent. selftest passed.")
    except AtomqError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        try:
            server.stop()
        finally:
            lock.release()
        if temp:
            shutil.rmtree(root, ignore_errors=True)


def _text(data: str | bytes) -> str:
    """A document's data as sent: the selftest sends text, which comes back as text."""
    return data if isinstance(data, str) else data.decode(errors="replace")
