"""Chunked sends (``send_journal``): a call whose copies pass ``CHUNK_COPIES`` is prepared in one
script and copied in steps of a few destinations each, all or nothing in outcome, finished by
whoever finds its journal: the request, its retry, or the maintenance once its node died."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from atomq.errors import NotDurable, QueueFull, QuotaExceeded, StorageError, TooLarge
from atomq.platform import QueueServer
from atomq.platform import maintenance as maintenance_module
from atomq.platform.queues import send_journal
from atomq.platform.shared import ChunkBudget
from atomq.platform.store import keys as k, send_keys
from atomq.platform.store.storage import Storage
from support.audit import assert_audit_clean
from support.queues import FAST, die_after_steps, msg, send_after_script

P2P, PUBSUB = "point_to_point", "publish_subscribe"


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Steps of at most 10 copies, and the name of every send script run, in order."""
    monkeypatch.setattr(send_journal, "CHUNK_COPIES", 10)
    ran: list[str] = []
    real_run, real_durably = Storage.run, Storage.run_durably

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("send"):
            ran.append(name)
        return real_run(self, name, *args, **kwargs)

    def run_durably(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        ran.append(name)
        return real_durably(self, name, *args, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    monkeypatch.setattr(Storage, "run_durably", run_durably)
    yield ran


@pytest.fixture
def dies_after_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request's node dies after the first step of copies of a chunked send (the step before it
    writes the documents' reference counts): the journal stays, untouched."""
    die_after_steps(monkeypatch, 2)


def five_destinations(qs: QueueServer, tenant: str, **limits: Any) -> list[tuple[str, str | None]]:
    """Queues a, b (point-to-point) and s (subscribers one, two, three) attracting topic x/>."""
    qs.put_queue(tenant, "a", P2P, topics=["x/>"], **limits)
    qs.put_queue(tenant, "b", P2P, topics=["x/>"], **limits)
    qs.put_queue(tenant, "s", PUBSUB, topics=["x/>"], **limits)
    for sub in ("one", "two", "three"):
        qs.put_subscriber(tenant, "s", sub)
    return [("a", None), ("b", None), ("s", "one"), ("s", "two"), ("s", "three")]


def held(qs: QueueServer, tenant: str, queue: str, subscriber: str | None = None) -> list[str]:
    return [m.id for m in qs.browse(tenant, queue, limit=1000, subscriber=subscriber).items]


def finish_by_maintenance(qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """One maintenance round that sees every journal as left untouched."""
    monkeypatch.setattr(maintenance_module, "STALE_MS", 0)
    return qs.maintain(tenant)


def test_a_publish_past_the_chunk_is_stored_in_steps_one_copy_a_destination_in_order(
        qs: QueueServer, tenant: str, steps: list[str]) -> None:
    destinations = five_destinations(qs, tenant)
    messages = [msg(f"m{i}", f"doc{i}", colour="red") for i in range(4)]
    messages[1] = dataclasses.replace(messages[1], priority=7)
    published = qs.publish(tenant, "x/1", messages)
    assert steps == ["send"] + ["send_apply"] * 4, "the reference counts, then 2 destinations (8 copies) a step"
    assert published.queues == ["a", "b", "s"] and published.copies == 20 and published.dropped == 0
    for queue, sub in destinations:
        assert sorted(held(qs, tenant, queue, sub)) == sorted(published.ids)
        got = qs.get(tenant, queue, max_messages=10, subscriber=sub)
        assert [d.id for d in got] == [published.ids[1], published.ids[0], *published.ids[2:]], "priority first"
        assert [d.documents[1].data for d in got][1] == "doc0"
    assert qs.counters.queue_totals(tenant, ["a"])["a"]["sent"] == 4
    assert qs.client.zcard(k.TenantKeys(tenant).send_journals) == 0
    assert_audit_clean(qs.client, {tenant})


def test_a_call_within_the_chunk_is_one_script_as_before(qs: QueueServer, tenant: str, steps: list[str]) -> None:
    five_destinations(qs, tenant)
    qs.publish(tenant, "x/1", [msg("a"), msg("b")])
    assert steps == ["send"], "10 copies: one script"


@pytest.mark.parametrize("refusal", ["quota", "queue_full", "too_big"])
def test_a_refused_chunked_send_stores_nothing(qs: QueueServer, tenant: str, steps: list[str], refusal: str) -> None:
    five_destinations(qs, tenant)
    quota = 0
    if refusal == "quota":
        quota, error = 5000, QuotaExceeded
    elif refusal == "queue_full":
        qs.put_subscriber(tenant, "s", "four")
        qs.put_queue(tenant, "s", PUBSUB, max_messages=3)  # the last destinations' queue
        error = QueueFull
    else:
        qs.put_queue(tenant, "s", PUBSUB, max_message_bytes=500)
        error = TooLarge
    with pytest.raises(error):
        qs.publish(tenant, "x/1", [msg("x" * 600) for _ in range(4)], quota_bytes=quota)
    assert steps == ["send"]
    for queue in ("a", "b", "s"):
        assert qs.get_queue(tenant, queue).depth == 0
    tk = k.TenantKeys(tenant)
    assert qs.client.hlen(tk.doc) == 0 and qs.client.zcard(tk.send_journals) == 0
    assert not qs.client.exists(tk.pending_copies)
    assert_audit_clean(qs.client, {tenant})


def test_drop_oldest_across_steps_drops_exactly_what_each_destination_needs(
        qs: QueueServer, tenant: str, steps: list[str]) -> None:
    destinations = five_destinations(qs, tenant, max_messages=4, overflow="drop_oldest")
    old = qs.publish(tenant, "x/old", [msg(f"old{i}") for i in range(3)])
    new = qs.publish(tenant, "x/new", [msg(f"new{i}") for i in range(3)])
    assert steps.count("send_apply") == 6, "two chunked publishes: counts, 3 destinations (9 copies), then 2"
    assert new.dropped == 5 * 2, "each destination holds 3 + 3 and keeps 4: two of the oldest go"
    for queue, sub in destinations:
        assert held(qs, tenant, queue, sub) == old.ids[2:] + new.ids
    assert_audit_clean(qs.client, {tenant})


def test_a_last_value_queue_keeps_the_newest_of_each_key_across_steps(
        qs: QueueServer, tenant: str, steps: list[str]) -> None:
    five_destinations(qs, tenant)
    qs.put_queue(tenant, "prices", P2P, topics=["x/>"], last_value=True, last_value_key="sym")
    older = qs.publish(tenant, "x/1", [msg("1.07", sym="EUR"), msg("150", sym="JPY")])
    newer = qs.publish(tenant, "x/1", [msg("1.08", sym="EUR"), msg("1.27", sym="GBP")])
    assert steps.count("send_apply") == 6
    assert sorted(held(qs, tenant, "prices")) == sorted([older.ids[1], *newer.ids])
    assert held(qs, tenant, "a") == older.ids + newer.ids
    assert_audit_clean(qs.client, {tenant})


def test_a_node_dying_between_steps_leaves_the_rest_to_the_maintenance(
        qs: QueueServer, tenant: str, steps: list[str], dies_after_one_step: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = five_destinations(qs, tenant)
    with pytest.raises(StorageError):
        qs.publish(tenant, "x/1", [msg("a"), msg("b"), msg("c")], idempotency_key="k-1")
    depths = [qs.get_queue(tenant, q).depth for q in ("a", "b")]
    assert depths == [3, 3] and qs.get(tenant, "s", subscriber="three") == [], "the first step only"
    assert_audit_clean(qs.client, {tenant})  # a journal under way owes its copies, and says so
    monkeypatch.setattr(maintenance_module, "STALE_MS", 60_000)
    assert qs.maintain(tenant)["sends_finished"] == 0, "not while it may still be going on"
    assert finish_by_maintenance(qs, tenant, monkeypatch)["sends_finished"] == 1
    ids = held(qs, tenant, "a")
    for queue, sub in destinations:
        assert held(qs, tenant, queue, sub) == ids
    again = qs.publish(tenant, "x/1", [msg("a"), msg("b"), msg("c")], idempotency_key="k-1")
    assert again.ids == ids and again.copies == 15, "the retry answers from the record the last step wrote"
    assert all(len(held(qs, tenant, q, s)) == 3 for q, s in destinations), "nothing twice"
    assert_audit_clean(qs.client, {tenant})


def test_a_node_dying_right_after_the_prepare_leaves_the_documents_counted_by_the_journal(
        qs: QueueServer, tenant: str, steps: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = five_destinations(qs, tenant)
    real = send_journal.SendJournals.finish

    def dies(self: send_journal.SendJournals, *args: Any, **kwargs: Any) -> send_journal.Finished:
        raise StorageError("the node died")

    monkeypatch.setattr(send_journal.SendJournals, "finish", dies)
    with pytest.raises(StorageError):
        qs.publish(tenant, "x/1", [msg("a", "b"), msg("c"), msg("d")])
    tk = k.TenantKeys(tenant)
    assert qs.client.hlen(tk.doc) == 4 and qs.client.hlen(tk.doc_refs) == 0, "the first step writes the counts"
    assert_audit_clean(qs.client, {tenant})
    qs.delete_queue(tenant, "b")
    monkeypatch.setattr(send_journal.SendJournals, "finish", real)
    assert finish_by_maintenance(qs, tenant, monkeypatch)["sends_finished"] == 1
    assert {d.documents[0].data for d in qs.get(tenant, "s", max_messages=10, subscriber="two")} == {"a", "c", "d"}
    assert all(len(held(qs, tenant, q, sub)) == 3 for q, sub in destinations if q != "b")
    assert qs.client.hgetall(tk.doc_refs) == {f"{i}.1".encode(): b"4" for i in held(qs, tenant, "a")} | {
        f"{held(qs, tenant, 'a')[0]}.2".encode(): b"4"}, "four destinations left, four references each"
    assert_audit_clean(qs.client, {tenant})


def test_a_retry_mid_journal_goes_on_with_it_and_stores_nothing_twice(
        qs: QueueServer, tenant: str, steps: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = five_destinations(qs, tenant)
    real = send_journal.SendJournals.finish
    calls: list[int] = []

    def first_dies(self: send_journal.SendJournals, tk: k.TenantKeys, name: str, record: str,
                   budget: ChunkBudget | None = None) -> send_journal.Finished:
        calls.append(1)
        if len(calls) == 1:
            real(self, tk, name, record, ChunkBudget(2))
            raise StorageError("the store's answer was lost")
        return real(self, tk, name, record, budget)

    monkeypatch.setattr(send_journal.SendJournals, "finish", first_dies)
    batch = [msg("a", dedupe_id="a"), msg("b"), msg("c")]
    with pytest.raises(StorageError):
        qs.publish(tenant, "x/1", batch, idempotency_key="order-9")
    again = qs.publish(tenant, "x/1", batch, idempotency_key="order-9")
    assert steps == ["send", "send_apply", "send_apply", "send", "send_apply"], "the retry makes the rest"
    for queue, sub in destinations:
        assert held(qs, tenant, queue, sub) == again.ids
    assert qs.publish(tenant, "x/1", batch, idempotency_key="order-9").ids == again.ids
    assert_audit_clean(qs.client, {tenant})


def test_a_queue_removed_or_made_again_mid_journal_releases_what_was_reserved_for_it(
        qs: QueueServer, tenant: str, steps: list[str], dies_after_one_step: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    five_destinations(qs, tenant, max_messages=5)
    qs.put_queue(tenant, "z", P2P, topics=["x/>"], max_messages=5)
    with pytest.raises(StorageError):
        qs.publish(tenant, "x/1", [msg("a"), msg("b"), msg("c")])
    with pytest.raises(QueueFull):  # z holds none yet, but 3 are owed it
        qs.send(tenant, "z", [msg("d"), msg("e"), msg("f")])
    qs.send(tenant, "z", [msg("d"), msg("e")])
    qs.delete_queue(tenant, "s")
    qs.put_queue(tenant, "s", PUBSUB, topics=["x/>"])
    qs.put_subscriber(tenant, "s", "one")
    qs.delete_queue(tenant, "b")
    assert_audit_clean(qs.client, {tenant})
    assert finish_by_maintenance(qs, tenant, monkeypatch)["sends_finished"] == 1
    assert qs.get_queue(tenant, "a").depth == 3 and qs.get_queue(tenant, "z").depth == 5
    assert qs.get(tenant, "s", subscriber="one") == [], "the queue made again is another"
    tk = k.TenantKeys(tenant)
    assert not qs.client.exists(tk.pending_copies)
    assert_audit_clean(qs.client, {tenant})
    qs.delete_queue(tenant, "a")
    qs.delete_queue(tenant, "z")
    while qs.maintain(tenant)["removals"]:
        pass
    assert qs.client.hlen(tk.doc) == 0, "no document outlives its copies"


def test_a_send_to_sync_queues_waits_for_the_disk_after_its_last_step(valkey, tenant: str, steps: list[str]) -> None:
    client = valkey.client()
    qs = QueueServer(client, dataclasses.replace(FAST, sync_min_replicas=1, sync_timeout_ms=20))
    five_destinations(qs, tenant, durability="sync")
    with pytest.raises(NotDurable) as err:
        qs.publish(tenant, "x/1", [msg("a"), msg("b"), msg("c")])
    assert steps == ["send", "send_apply", "send_apply", "send_apply"]
    assert err.value.details["ids"] == held(qs, tenant, "s", "three"), "stored, every copy, not synced"
    batch = [msg("d"), msg("e"), msg("f"), msg("g")]  # 12 copies to the subscribers of s: chunked
    with pytest.raises(NotDurable) as sent:
        qs.send_batch(tenant, "s", batch, idempotency_key="k-1")
    with pytest.raises(NotDurable) as repeated:  # answered from the record, it waits as the first did
        qs.send_batch(tenant, "s", batch, idempotency_key="k-1")
    assert repeated.value.details["ids"] == sent.value.details["ids"]
    assert len(held(qs, tenant, "s", "one")) == 7, "nothing twice"
    client.close()


def test_a_publish_at_the_real_chunk_bound_is_stored_in_steps(valkey, tenant: str) -> None:
    client = valkey.client()
    qs = QueueServer(client, FAST)
    for i in range(7):
        qs.put_queue(tenant, f"q{i}", P2P, topics=["big/>"])
    ran: list[str] = []
    real_run = qs.storage.run
    qs.storage.run = lambda name, *a, **kw: ran.append(name) or real_run(name, *a, **kw)  # type: ignore[method-assign]
    messages = [msg("x") for _ in range(500)]
    published = qs.publish(tenant, "big/1", messages)
    assert send_journal.CHUNK_COPIES == 1_500 and published.copies == 3_500
    assert ran.count("send_apply") == 4, "the reference counts, 3 queues of 500 copies twice, then 1"
    assert all(held(qs, tenant, f"q{i}") == published.ids for i in range(7))
    assert_audit_clean(client, {tenant})
    client.close()


def _publish_and_hang(url: str, tenant: str, stepped: Any) -> None:
    """A process of its own: a chunked publish whose node stops answering after its first step."""
    import redis

    send_journal.CHUNK_COPIES = 10
    real = send_journal.SendJournals.finish

    def one_step_then_hang(self: send_journal.SendJournals, tk: k.TenantKeys, name: str, record: str,
                           budget: ChunkBudget | None = None) -> send_journal.Finished:
        real(self, tk, name, record, ChunkBudget(2))
        stepped.set()
        threading.Event().wait()  # until killed
        raise AssertionError("killed before")

    send_journal.SendJournals.finish = one_step_then_hang  # type: ignore[method-assign]
    QueueServer(redis.Redis.from_url(url), FAST).publish(tenant, "x/1", [msg("a"), msg("b"), msg("c")])


def test_a_node_killed_mid_request_leaves_nothing_lost_or_reserved(
        valkey, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = valkey.client()
    qs = QueueServer(client, FAST)
    destinations = five_destinations(qs, tenant)
    ctx = multiprocessing.get_context("fork")
    stepped = ctx.Event()
    node = ctx.Process(target=_publish_and_hang, args=(valkey.url, tenant, stepped))
    node.start()
    try:
        assert stepped.wait(30), "the publish made its first step"
    finally:
        os.kill(node.pid, signal.SIGKILL)
        node.join(10)
    assert held(qs, tenant, "s", "three") == [] and len(held(qs, tenant, "a")) == 3, "its first step only"
    assert finish_by_maintenance(qs, tenant, monkeypatch)["sends_finished"] == 1
    ids = held(qs, tenant, "a")
    assert len(ids) == 3 and all(held(qs, tenant, q, s) == ids for q, s in destinations)
    assert not client.exists(k.TenantKeys(tenant).pending_copies)
    client.close()


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Steps of at most 10 destinations (copies unbounded), and each send step's script and key count,
    and each read of a journal's destinations' field count (as ("read", fields)), in order."""
    monkeypatch.setattr(send_journal, "CHUNK_DESTINATIONS", 10)
    seen: list[tuple[str, int]] = []
    real_run, real_call = Storage.run, Storage.call

    def run(self: Storage, name: str, keys: list[str], *args: Any, **kwargs: Any) -> Any:
        if name.startswith("send"):
            seen.append((name, len(keys)))
        return real_run(self, name, keys, *args, **kwargs)

    def call(self: Storage, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", "") == "hmget" and len(args) > 1 and isinstance(args[1], list):
            seen.append(("read", len(args[1])))
        return real_call(self, fn, *args, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    monkeypatch.setattr(Storage, "call", call)
    yield seen


def fifty_destinations(qs: QueueServer, tenant: str) -> list[tuple[str, str]]:
    """Publish/subscribe queues w0..w4 attracting topic w/>, ten subscribers each."""
    for q in range(5):
        qs.put_queue(tenant, f"w{q}", PUBSUB, topics=["w/>"])
        for s in range(10):
            qs.put_subscriber(tenant, f"w{q}", f"s{s}")
    return [(f"w{q}", f"s{s}") for q in range(5) for s in range(10)]


def test_a_wide_publish_steps_over_its_destinations_each_step_carrying_only_its_own(
        qs: QueueServer, tenant: str, wide: list[tuple[str, int]]) -> None:
    destinations = fifty_destinations(qs, tenant)
    published = qs.publish(tenant, "w/1", [msg("one")])
    assert published.copies == 50
    applies = [n for name, n in wide if name == "send_apply"]
    assert len(applies) == 6, "the reference counts, then 10 of the 50 destinations a step (50 copies: few)"
    per_destination = len(k.TenantKeys(tenant).destination_named("w0/s0")[1].as_list()) + 2
    assert applies == [14] + [14 + 10 * per_destination] * 5, "a step's keys are its own destinations'"
    assert [n for name, n in wide if name == "read"] == [10] * 5, "a step reads its own destinations only"
    for queue, sub in destinations:
        assert held(qs, tenant, queue, sub) == published.ids
    assert not qs.client.exists(k.TenantKeys(tenant).pending_copies)
    assert_audit_clean(qs.client, {tenant})


def test_a_wide_publish_cut_short_mid_way_is_finished_by_the_maintenance(
        qs: QueueServer, tenant: str, wide: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = fifty_destinations(qs, tenant)
    die_after_steps(monkeypatch, 3)
    with pytest.raises(StorageError):
        qs.publish(tenant, "w/1", [msg("one")], idempotency_key="wide-1")
    assert sum(len(held(qs, tenant, q, s)) for q, s in destinations) == 20, "two steps of 10 destinations"
    assert_audit_clean(qs.client, {tenant})
    assert finish_by_maintenance(qs, tenant, monkeypatch)["sends_finished"] == 1
    ids = held(qs, tenant, "w0", "s0")
    assert len(ids) == 1 and all(held(qs, tenant, q, s) == ids for q, s in destinations), "exactly one copy each"
    again = qs.publish(tenant, "w/1", [msg("one")], idempotency_key="wide-1")
    assert again.ids == ids and again.copies == 50, "the retry answers from the record"
    assert not qs.client.exists(k.TenantKeys(tenant).pending_copies)
    assert_audit_clean(qs.client, {tenant})


@pytest.mark.parametrize("order", [{"access": "exclusive"}, {"ordering": "group"}])
def test_a_send_between_the_steps_of_a_fan_out_reaching_an_ordered_queue_lands_after_it_there(
        qs: QueueServer, tenant: str, steps: list[str], monkeypatch: pytest.MonkeyPatch,
        order: dict[str, str]) -> None:
    """Queue z, last of the fan-out, keeps send order: a send there after the publish's first step
    of copies (a and b) waits for the publish's copies in z, which it makes itself."""
    five_destinations(qs, tenant)
    qs.put_queue(tenant, "z", P2P, topics=["x/>"], **order)
    later, refused = send_after_script(qs, tenant, "z", [msg("later")], monkeypatch,
                                       lambda name: name == "send_apply" and steps.count("send_apply") == 2)
    published = qs.publish(tenant, "x/1", [msg(f"m{i}") for i in range(4)])
    assert published.queues == ["a", "b", "s", "z"] and refused == ["send"], "the send waited once"
    assert held(qs, tenant, "z") == published.ids + later[0]
    assert [d.id for d in qs.get(tenant, "z", max_messages=10, consumer="c")] == published.ids + later[0]
    assert qs.client.zcard(send_keys.send_owed(k.TenantKeys(tenant))) == 0
    assert not qs.client.exists(k.TenantKeys(tenant).pending_copies)
    assert_audit_clean(qs.client, {tenant})
