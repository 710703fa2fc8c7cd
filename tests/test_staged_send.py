"""Staged sends (``send_journal``): a call whose documents pass ``STAGE_DOCS`` or ``STAGE_BYTES``
uploads them in bounded steps into a hash that expires, then is prepared, and its documents moved
and copies made in bounded steps, even to one queue: all or nothing for its sender, as a whole
send is, and finished by whoever finds its journal."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from atomq.errors import QueueFull, QuotaExceeded, StorageError, TooLarge
from atomq.platform import QueueServer
from atomq.platform import maintenance as maintenance_module
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from atomq.platform.queues import send_journal
from atomq.platform.store import keys as k, send_keys
from atomq.platform.store.storage import Storage
from atomq.platform.watch import store_sizes
from support.audit import assert_audit_clean
from support.queues import FAST, die_after_steps, send_after_script

DOCS, BYTES = 5, 200
UNMOVED_FIELDS = 2 * 4 + 4
"""What a journal of ``message(0..3)`` holds after its first move step: the two unmoved messages'
3 documents and 1 properties each, and the four messages' sizes the upload wrote."""
"""The test's bounds: steps of at most 5 documents or some 200 bytes."""


def message(i: int, docs: int = 3, size: int = 30) -> OutgoingMessage:
    """Message ``i``: ``docs`` documents of ``size`` bytes, every other one with properties."""
    return OutgoingMessage(documents=tuple(
        OutgoingDocument(f"{i}.{d}:".ljust(size, "x"), {"n": d} if d % 2 else {}) for d in range(docs)),
        properties={"i": i})


@pytest.fixture
def scripts(qs: QueueServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Steps of at most DOCS documents or BYTES bytes; every send script run, in order, with the
    documents the tenant's documents hash held after it (what it wrote there)."""
    monkeypatch.setattr(send_journal, "STAGE_DOCS", DOCS)
    monkeypatch.setattr(send_journal, "STAGE_BYTES", BYTES)
    ran: list[tuple[str, int]] = []
    real_run = Storage.run

    def run(self: Storage, name: str, keys: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        try:
            return real_run(self, name, keys, args, *rest, **kwargs)
        finally:
            if name.startswith("send"):
                ran.append((name, int(self.client.hlen(keys[0])) if name != "send_stage" else len(args) // 2))

    monkeypatch.setattr(Storage, "run", run)
    yield ran


def tenant_keys(qs: QueueServer, tenant: str) -> dict[bytes, Any]:
    """Every key of the tenant, with its type's content: what a refused call must leave as it was."""
    out: dict[bytes, Any] = {}
    for key in qs.client.scan_iter(match=k.TenantKeys(tenant).all_keys_pattern(), count=1000):
        kind = qs.client.type(key)
        out[key] = qs.client.hgetall(key) if kind == b"hash" else kind
    return out


def bodies(qs: QueueServer, tenant: str, queue: str,
           consumer: str | None = None) -> list[tuple[dict[str, Any], list[tuple[Any, Any]]]]:
    got = qs.get(tenant, queue, max_messages=100, consumer=consumer)
    return [(d.properties, [(doc.data, doc.properties) for doc in d.documents]) for d in got]


def expected(n: int) -> list[tuple[dict[str, Any], list[tuple[Any, Any]]]]:
    return [({"i": i}, [(doc.data, dict(doc.properties)) for doc in message(i).documents]) for i in range(n)]


def test_a_send_of_many_documents_to_one_queue_is_staged_in_bounded_steps(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]]) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    ids = qs.send(tenant, "work", [message(i) for i in range(4)])
    names = [name for name, _ in scripts]
    # 12 documents, 4 with properties: 16 fields, uploaded whole messages a step, up to the one that
    # passes 5 documents (or 200 bytes); then the prepare, two steps of moves, the reference counts'
    # (none at one destination) and the copies'.
    assert names == ["send_stage"] * 2 + ["send"] + ["send_apply"] * 4
    assert [fields for name, fields in scripts if name == "send_stage"] == [8, 8], "2 messages of 3 + 1 a step"
    moved = [held for name, held in scripts if name in ("send", "send_apply")]
    assert moved == [0, 6, 12, 12, 12], "the prepare writes no document; a step moves messages until past 5"
    assert bodies(qs, tenant, "work") == expected(4)
    assert [m.id for m in qs.browse(tenant, "work", limit=10).items] == ids
    tk = k.TenantKeys(tenant)
    assert qs.client.zcard(tk.send_journals) == 0 and not qs.client.exists(tk.pending_copies)
    assert not list(qs.client.scan_iter(match=f"{k.tenant_prefix(tenant)}:stg:*"))
    assert not list(qs.client.scan_iter(match=f"{k.tenant_prefix(tenant)}:jd:*"))
    assert_audit_clean(qs.client, {tenant})


def test_a_send_within_the_bounds_carries_its_documents_in_one_script(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]]) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    qs.send(tenant, "work", [message(0, docs=2, size=10)])
    assert [name for name, _ in scripts] == ["send"]


def sends_between_steps(qs: QueueServer, tenant: str, queue: str, after: str, monkeypatch: pytest.MonkeyPatch,
                        messages: list[OutgoingMessage]) -> tuple[list[list[str]], list[str]]:
    """Once, right after the first script ``after`` of a call, another call sends ``messages`` to
    ``queue``: the ids it got, filled once it returns, and the scripts refused while it waited."""
    return send_after_script(qs, tenant, queue, messages, monkeypatch, lambda name: name == after)


def nothing_owed(qs: QueueServer, tenant: str) -> None:
    tk = k.TenantKeys(tenant)
    assert qs.client.zcard(send_keys.send_owed(tk)) == 0 and qs.client.zcard(tk.send_journals) == 0
    assert not qs.client.exists(tk.pending_copies)
    assert_audit_clean(qs.client, {tenant})


@pytest.mark.parametrize("order", [{"access": "exclusive"}, {"ordering": "group"}])
@pytest.mark.parametrize("after", ["send", "send_apply"])
def test_a_big_send_to_a_queue_that_keeps_send_order_is_staged_and_a_send_between_its_steps_lands_after(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], order: dict[str, str], after: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The staged call's ids, given at its prepare, come first in send order: a send made between
    its steps (after the prepare, or after its first move of documents) waits for its copies."""
    qs.put_queue(tenant, "work", "point_to_point", **order)
    later, waited = sends_between_steps(qs, tenant, "work", after, monkeypatch, [message(4)])
    ids = qs.send(tenant, "work", [message(i) for i in range(4)])
    names = [name for name, _ in scripts]
    assert names[:3] == ["send_stage", "send_stage", "send"] and "send_apply" in names, "staged in steps"
    assert next(held for name, held in scripts if name == "send_apply") == 6, "a bounded move of documents"
    assert len(later) == 1 and [m.id for m in qs.browse(tenant, "work", limit=10).items] == ids + later[0]
    assert waited, "the send between the steps waited for the journal"
    assert bodies(qs, tenant, "work", consumer="c") == expected(5)
    nothing_owed(qs, tenant)


@pytest.mark.parametrize("order", [{"access": "exclusive"}, {"ordering": "group"}])
def test_a_staged_send_between_the_steps_of_another_waits_for_it_and_keeps_its_own_order(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], order: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", "point_to_point", **order)
    later, waited = sends_between_steps(qs, tenant, "work", "send", monkeypatch, [message(i) for i in range(4, 8)])
    ids = qs.send(tenant, "work", [message(i) for i in range(4)])
    assert [m.id for m in qs.browse(tenant, "work", limit=10).items] == ids + later[0] and waited
    assert bodies(qs, tenant, "work", consumer="c") == expected(8)
    nothing_owed(qs, tenant)


def test_a_send_waiting_for_a_journal_whose_node_died_finishes_it_and_lands_after(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", "point_to_point", access="exclusive")
    real = send_journal.SendJournals.finish
    die_after_steps(monkeypatch, 1)
    with pytest.raises(StorageError):
        qs.send(tenant, "work", [message(i) for i in range(4)])
    assert qs.get_queue(tenant, "work").depth == 0 and qs.client.zcard(send_keys.send_owed(k.TenantKeys(tenant)))
    monkeypatch.setattr(send_journal.SendJournals, "finish", real)
    later = qs.send(tenant, "work", [message(4)])
    assert [m.id for m in qs.browse(tenant, "work", limit=10).items][4:] == later
    assert bodies(qs, tenant, "work", consumer="c") == expected(5), "the dead request's messages first"
    nothing_owed(qs, tenant)


def test_a_refusal_reaches_the_caller_when_the_upload_cannot_be_deleted_after_it(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", "point_to_point", max_messages=3)

    def connection_lost(*keys: Any) -> Any:
        raise redis.ConnectionError("connection lost")

    monkeypatch.setattr(qs.client, "delete", connection_lost)
    with pytest.raises(QueueFull):
        qs.send(tenant, "work", [message(i) for i in range(4)])
    upload = [key for key in qs.client.scan_iter(match=f"{k.tenant_prefix(tenant)}:stg:*")]
    assert len(upload) == 1 and 0 < qs.client.pttl(upload[0]) <= send_journal.STAGE_TTL_MS, "left to expire"


def test_a_queue_made_exclusive_after_its_route_was_read_still_keeps_a_big_send_in_order(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    qs.send(tenant, "work", [message(0, docs=1, size=10)])  # the route is read and kept: not ordered
    qs.put_queue(tenant, "work", "point_to_point", access="exclusive")
    scripts.clear()
    later, waited = sends_between_steps(qs, tenant, "work", "send_apply", monkeypatch, [message(5)])
    ids = qs.send(tenant, "work", [message(i) for i in range(1, 5)])
    assert [name for name, _ in scripts][:3] == ["send_stage", "send_stage", "send"], "staged"
    assert [m.id for m in qs.browse(tenant, "work", limit=10).items][1:] == ids + later[0] and waited
    assert not list(qs.client.scan_iter(match=f"{k.tenant_prefix(tenant)}:stg:*")), "a first try's upload deleted"
    nothing_owed(qs, tenant)


@pytest.mark.parametrize("refusal", ["quota", "queue_full", "too_big"])
def test_a_staged_send_refused_by_its_prepare_stores_nothing(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], refusal: str) -> None:
    quota, limits = 0, {}
    if refusal == "quota":
        quota, error = 2000, QuotaExceeded
    elif refusal == "queue_full":
        limits, error = {"max_messages": 3}, QueueFull
    else:
        limits, error = {"max_message_bytes": 100}, TooLarge
    qs.put_queue(tenant, "work", "point_to_point", **limits)
    before = tenant_keys(qs, tenant)
    with pytest.raises(error):
        qs.send(tenant, "work", [message(i) for i in range(4)], quota_bytes=quota)
    assert [name for name, _ in scripts] == ["send_stage"] * 2 + ["send"]
    assert tenant_keys(qs, tenant) == before, "the upload deleted, nothing else written"
    assert_audit_clean(qs.client, {tenant})


def test_a_node_dying_mid_move_leaves_the_rest_to_the_maintenance(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    die_after_steps(monkeypatch, 1)
    batch = [message(i) for i in range(4)]
    with pytest.raises(StorageError):
        qs.send(tenant, "work", batch, idempotency_key="big-1")
    tk = k.TenantKeys(tenant)
    assert qs.client.hlen(tk.doc) == 6 and qs.get_queue(tenant, "work").depth == 0, "two messages' documents moved"
    [held] = qs.client.scan_iter(match=f"{k.tenant_prefix(tenant)}:jd:*")
    assert qs.client.hlen(held) == UNMOVED_FIELDS, "the moved documents are held once: gone from the journal's"
    assert_audit_clean(qs.client, {tenant})  # the journal counts what it has not moved yet
    monkeypatch.setattr(maintenance_module, "STALE_MS", 0)
    assert qs.maintain(tenant)["sends_finished"] == 1
    assert qs.get_queue(tenant, "work").depth == 4 and qs.client.hlen(tk.doc) == 12
    ids = [m.id for m in qs.browse(tenant, "work", limit=10).items]
    scripts.clear()
    assert qs.send(tenant, "work", batch, idempotency_key="big-1") == ids, "the retry answers the first's ids"
    assert [name for name, _ in scripts] == ["send"], "and uploads nothing"
    assert qs.get_queue(tenant, "work").depth == 4, "nothing twice"
    assert bodies(qs, tenant, "work") == expected(4)
    assert_audit_clean(qs.client, {tenant})


def test_a_retry_of_a_staged_send_returns_the_same_ids_and_stores_nothing_twice(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]]) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    batch = [message(i) for i in range(3)]
    first = qs.send(tenant, "work", batch, idempotency_key="r-1")
    scripts.clear()
    assert qs.send(tenant, "work", batch, idempotency_key="r-1") == first
    assert [name for name, _ in scripts] == ["send"]
    assert qs.get_queue(tenant, "work").depth == 3 and qs.client.hlen(k.TenantKeys(tenant).doc) == 9
    assert_audit_clean(qs.client, {tenant})


def test_a_staged_publish_to_several_queues_moves_then_copies(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]]) -> None:
    for q in ("a", "b"):
        qs.put_queue(tenant, q, "point_to_point", topics=["x/>"])
    published = qs.publish(tenant, "x/1", [message(i) for i in range(4)])
    assert published.copies == 8 and [name for name, _ in scripts].count("send_stage") == 2
    assert bodies(qs, tenant, "a") == bodies(qs, tenant, "b") == expected(4)
    refs = qs.client.hgetall(k.TenantKeys(tenant).doc_refs)
    assert len(refs) == 12 and set(refs.values()) == {b"2"}
    assert_audit_clean(qs.client, {tenant})


def _upload_and_hang(url: str, tenant: str, uploaded: Any) -> None:
    """A process of its own: a staged send whose client stops after its first upload step."""
    import redis

    send_journal.STAGE_DOCS, send_journal.STAGE_BYTES = DOCS, BYTES
    real = Storage.run

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "send_stage" and uploaded.is_set():
            threading.Event().wait()  # until killed
        reply = real(self, name, *args, **kwargs)
        if name == "send_stage":
            uploaded.set()
        return reply

    Storage.run = run  # type: ignore[method-assign]
    QueueServer(redis.Redis.from_url(url), FAST).send(tenant, "work", [message(i) for i in range(4)])


def test_a_client_killed_mid_upload_leaves_only_an_upload_that_expires(valkey, tenant: str) -> None:
    client = valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "work", "point_to_point")
    before, temporary = tenant_keys(qs, tenant), store_sizes.measure(qs)["temporary_bytes"]
    ctx = multiprocessing.get_context("fork")
    uploaded = ctx.Event()
    node = ctx.Process(target=_upload_and_hang, args=(valkey.url, tenant, uploaded))
    node.start()
    try:
        assert uploaded.wait(30), "the client uploaded its first step"
    finally:
        os.kill(node.pid, signal.SIGKILL)
        node.join(10)
    after = tenant_keys(qs, tenant)
    left = set(after) - set(before)
    assert len(left) == 1 and b":stg:" in next(iter(left)), "only the upload"
    assert {key: after[key] for key in before} == before, "nothing else written"
    assert 0 < client.pttl(next(iter(left))) <= send_journal.STAGE_TTL_MS, "and it expires"
    upload_bytes = client.memory_usage(next(iter(left)))
    assert store_sizes.measure(qs)["temporary_bytes"] - temporary == upload_bytes, "counted as temporary meanwhile"
    client.close()


def test_the_heaviest_send_to_one_queue_stays_within_the_real_bounds(valkey, tenant: str) -> None:
    client = valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "work", "point_to_point")
    ran: list[tuple[str, int, int]] = []  # each send script: its name, the documents and bytes it wrote
    real_run = qs.storage.run
    tk = k.TenantKeys(tenant)

    def run(name: str, keys: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        docs, size = client.hlen(tk.doc), client.memory_usage(tk.doc) or 0
        reply = real_run(name, keys, args, *rest, **kwargs)
        if name == "send_stage":
            ran.append((name, len(args) // 2, sum(len(a) for a in args[2::2])))
        else:
            ran.append((name, client.hlen(tk.doc) - docs, (client.memory_usage(tk.doc) or 0) - size))
        return reply

    qs.storage.run = run  # type: ignore[method-assign]
    ids = qs.send(tenant, "work", [OutgoingMessage(documents=tuple(OutgoingDocument(b"x" * 900) for _ in range(10)))
                                   for _ in range(1000)])
    assert len(ids) == 1000 and qs.get_queue(tenant, "work").depth == 1000
    uploads = [r for r in ran if r[0] == "send_stage"]
    assert sum(r[1] for r in uploads) == 10_000 and all(r[1] < send_journal.STAGE_DOCS + 10 for r in uploads)
    assert all(r[2] < send_journal.STAGE_BYTES + 9_000 for r in uploads), "a step: the bound and one message's"
    prepare = [r for r in ran if r[0] == "send"]
    assert len(prepare) == 1 and prepare[0][1] == 0, "the prepare writes no document"
    moves = [r for r in ran if r[0] == "send_apply" and r[1] > 0]
    assert sum(r[1] for r in moves) == 10_000
    assert all(r[1] <= send_journal.STAGE_DOCS + 10 for r in moves) and len(moves) >= 10
    assert_audit_clean(client, {tenant})
    client.close()


def test_an_upload_expired_before_its_prepare_is_uploaded_again(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    real_run = Storage.run  # the fixture's, which notes each script
    expired: list[str] = []

    def run(self: Storage, name: str, keys: Any, args: Any, *rest: Any, **kwargs: Any) -> Any:
        if name == "send" and not expired:
            expired.append(keys[-4])
            self.client.delete(keys[-4])  # the upload, as if it expired between its last step and the prepare
        return real_run(self, name, keys, args, *rest, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    ids = qs.send(tenant, "work", [message(i) for i in range(4)])
    assert [name for name, _ in scripts] == (["send_stage"] * 2 + ["send"]) * 2 + ["send_apply"] * 4
    assert [m.id for m in qs.browse(tenant, "work", limit=10).items] == ids
    assert bodies(qs, tenant, "work") == expected(4)
    assert_audit_clean(qs.client, {tenant})
