"""Delayed delivery: a send (or each of its messages, or the queue by default) delays a message's
first delivery; it waits in the redelivery schedule, counts like any stored message, and joins the
ready messages when it falls due, in the order of its due time.

Runs on the real Valkey, the cluster and fakeredis; the restart runs on a Valkey of its own. Delays
are a second or two: a test waits for a message by polling with a deadline; a message that must
stay invisible for the whole test is delayed by a minute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from atomq.errors import InvalidInput, QueueFull
from atomq.platform import MessageState, QueueServer
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from atomq.platform.queues import send_journal
from atomq.platform.store.embedded import EmbeddedValkey
from support.audit import assert_audit_clean
from support.queues import FAST, browse_all, msg
from support.waiting import wait_until

P2P, PUBSUB = "point_to_point", "publish_subscribe"
LONG_S = 60.0
"""A delay no test waits out: its message stays invisible to the end of the test."""


def delayed(text: str, delay_s: float | None, **fields: Any) -> OutgoingMessage:
    return OutgoingMessage(documents=(OutgoingDocument(text),), delay_s=delay_s, **fields)


def texts(deliveries: list[Any]) -> list[str]:
    return [d.documents[0].data for d in deliveries]


def store_clock(client: Any) -> Callable[[], float]:
    """The store's clock in seconds, whole ms, as the scripts read it (due times are on it)."""
    def now() -> float:
        seconds, micros = client.time()
        return (int(seconds) * 1000 + int(micros) // 1000) / 1000
    return now


def taken_when_due(qs: QueueServer, tenant: str, queue: str, want: int, **get: Any) -> list[Any]:
    """Gets until ``want`` messages came, polling with a deadline (a due message is moved by the get)."""
    got: list[Any] = []

    def enough() -> bool:
        got.extend(qs.get(tenant, queue, max_messages=10, **get))
        return len(got) >= want
    wait_until(enough, 20, f"{want} delayed messages to fall due")
    return got


@pytest.fixture
def queue(qs: QueueServer, tenant: str) -> str:
    qs.put_queue(tenant, "jobs", P2P)
    return "jobs"


def test_a_delayed_message_is_invisible_until_due_then_delivered_once(qs: QueueServer, tenant: str,
                                                                      queue: str) -> None:
    now_id = qs.send(tenant, queue, [msg("now")])[0]
    soon_id, later_id = qs.send(tenant, queue, [delayed("soon", 1), delayed("later", LONG_S)])
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.scheduled, info.delayed, info.in_flight) == (3, 2, 2, 0)
    (first,) = qs.get(tenant, queue, max_messages=10)
    assert first.id == now_id
    scheduled = {m.id: m for m in browse_all(qs, tenant, queue) if m.state is MessageState.SCHEDULED}
    later = scheduled[later_id]  # (soon shows as ready once it is due)
    assert later.delivery_count == 0 and later.due_at is not None
    assert round((later.due_at - later.enqueued_at) * 1000) == LONG_S * 1000, "due a minute after its send"

    (soon,) = taken_when_due(qs, tenant, queue, 1)
    assert (soon.id, soon.delivery_count, soon.redelivered) == (soon_id, 1, False)
    assert qs.get(tenant, queue, max_messages=10) == [], "delivered once; the minute's message still waits"
    assert qs.ack(tenant, queue, receipts=[first.receipt, soon.receipt]) == 2
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.scheduled, info.delayed) == (1, 1, 1)
    assert qs.delete_messages(tenant, queue, ids=[later_id]) == 1
    assert qs.get_queue(tenant, queue).delayed == 0  # the audit after the test checks the count, too


def test_delayed_messages_come_in_the_order_they_fall_due(qs: QueueServer, tenant: str, queue: str) -> None:
    late = qs.send(tenant, queue, [delayed("two seconds", 2)])
    early = qs.send(tenant, queue, [delayed("one second", 1)])
    plain = qs.send(tenant, queue, [msg("at once")])
    # None is taken before both are due: then one get shows their order.
    due_at = max(m.due_at for m in browse_all(qs, tenant, queue) if m.state is MessageState.SCHEDULED)
    clock = store_clock(qs.client)
    wait_until(lambda: clock() > due_at, 20, "both delays to end")
    got = qs.get(tenant, queue, max_messages=10)
    assert [m.id for m in got] == plain + early + late, "ready first, then by due time, not by send order"
    assert [m.delivery_count for m in got] == [1, 1, 1]


def test_a_delayed_message_is_held_counted_and_limited_like_any_other(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "small", P2P, max_messages=2)
    qs.send(tenant, "small", [delayed("a", LONG_S), msg("b")])
    info = qs.get_queue(tenant, "small")
    assert (info.depth, info.delayed, info.held_bytes > 0) == (2, 1, True)
    with pytest.raises(QueueFull) as full:
        qs.send(tenant, "small", [msg("c")])
    assert full.value.details["count"] == 2
    assert qs.usage(tenant)["messages"] == 2

    qs.put_queue(tenant, "drops", P2P, max_messages=1, overflow="drop_oldest")
    qs.send(tenant, "drops", [delayed("oldest", LONG_S)])
    qs.send(tenant, "drops", [msg("newer")])
    assert texts(browse_all(qs, tenant, "drops")) == ["newer"], "the oldest waiting message made room"
    assert qs.get_queue(tenant, "drops").delayed == 0


def test_the_queue_delays_what_gives_no_delay_of_its_own(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "later", P2P, delay_s=LONG_S)
    assert qs.get_queue(tenant, "later").delay_s == LONG_S
    waits = qs.send(tenant, "later", [msg("queue's delay")])
    at_once = qs.send(tenant, "later", [delayed("its own: none", 0)])
    by_send = qs.send(tenant, "later", [msg("the send's: one second")], delay_s=1)
    (got,) = qs.get(tenant, "later", max_messages=10)
    assert got.id == at_once[0]
    assert [m.id for m in taken_when_due(qs, tenant, "later", 1)] == by_send
    assert qs.get_queue(tenant, "later").delayed == 1
    assert [m.id for m in browse_all(qs, tenant, "later") if m.state is MessageState.SCHEDULED] == waits
    qs.put_queue(tenant, "later", P2P, delay_s=0)
    assert qs.get_queue(tenant, "later").delay_s == 0


def test_a_delay_on_publish_holds_every_copy(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "eu", P2P, topics=["orders/>"])
    qs.put_queue(tenant, "audit", P2P, topics=["orders/*/paid"])
    qs.put_queue(tenant, "fan", PUBSUB, topics=["orders/>"])
    for sub in ("one", "two"):
        qs.put_subscriber(tenant, "fan", sub)
    published = qs.publish(tenant, "orders/eu/paid", [msg("paid")], delay_s=1)
    assert published.queues == ["audit", "eu", "fan"] and published.copies == 4
    for name in ("eu", "audit", "fan"):
        assert qs.get_queue(tenant, name).delayed == (2 if name == "fan" else 1)
    for name, sub in (("eu", None), ("audit", None), ("fan", "one"), ("fan", "two")):
        got = taken_when_due(qs, tenant, name, 1, subscriber=sub)
        assert [m.id for m in got] == published.ids, f"{name}/{sub}: the one copy, once"
        assert qs.get(tenant, name, max_messages=10, subscriber=sub) == []


def test_a_chunked_publish_delays_each_destination(qs: QueueServer, tenant: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(send_journal, "CHUNK_COPIES", 4)
    for name in ("a", "b", "c"):
        qs.put_queue(tenant, name, P2P, topics=["x/>"])
    published = qs.publish(tenant, "x/y", [msg("one"), delayed("none", 0), msg("three")], delay_s=LONG_S)
    assert published.copies == 9
    for name in ("a", "b", "c"):
        info = qs.get_queue(tenant, name)
        assert (info.depth, info.delayed) == (3, 2)
        assert texts(qs.get(tenant, name, max_messages=10)) == ["none"]


def test_an_exclusive_queue_takes_no_delay(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ordered", P2P, access="exclusive")
    with pytest.raises(InvalidInput) as refused:
        qs.send(tenant, "ordered", [delayed("late", 1)])
    assert refused.value.details == {"field": "delay_s", "queue": "ordered"}
    qs.send(tenant, "ordered", [delayed("no delay", 0)])  # 0 is no delay
    with pytest.raises(InvalidInput) as refused:
        qs.put_queue(tenant, "ordered", P2P, delay_s=5)
    assert refused.value.details["field"] == "delay_s"
    qs.put_queue(tenant, "later", P2P, delay_s=5)
    with pytest.raises(InvalidInput) as refused:
        qs.put_queue(tenant, "later", P2P, access="exclusive")
    assert refused.value.details["field"] == "access"
    qs.put_queue(tenant, "topics", P2P, topics=["t/>"])
    qs.put_queue(tenant, "ordered", P2P, topics=["t/>"])
    with pytest.raises(InvalidInput):
        qs.publish(tenant, "t/x", [msg("x")], delay_s=1)
    assert qs.get_queue(tenant, "topics").depth == 0, "a refused publish stores nothing anywhere"


@pytest.mark.parametrize(("send_delay", "message_delay", "field"), [
    (-1, None, "delay_s"), (86_401, None, "delay_s"), (float("nan"), None, "delay_s"), (True, None, "delay_s"),
    (None, "1", "messages.1.delay_s"), (1, -0.5, "messages.1.delay_s")])
def test_a_delay_out_of_range_is_refused_by_name(qs: QueueServer, tenant: str, queue: str, send_delay: Any,
                                                 message_delay: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        qs.send(tenant, queue, [msg("fine"), delayed("odd", message_delay)], delay_s=send_delay)
    assert refused.value.details["field"] == field
    assert qs.get_queue(tenant, queue).depth == 0


def test_a_message_that_expires_while_delayed_is_never_delivered(qs: QueueServer, tenant: str, queue: str) -> None:
    (msg_id,) = qs.send(tenant, queue, [delayed("stale", LONG_S, ttl_s=0.5)])
    clock = store_clock(qs.client)
    sent_at = clock()
    wait_until(lambda: clock() > sent_at + 0.6, 20, "the time to live to end")
    assert qs.get(tenant, queue, max_messages=10) == []
    (dead,) = qs.dead_letters(tenant, queue, limit=10).items
    assert (dead.id, dead.reason) == (msg_id, "expired")
    assert qs.get_queue(tenant, queue).delayed == 0


def test_a_last_value_delayed_message_replaces_the_waiting_one(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "prices", P2P, last_value=True, last_value_key="sku")
    qs.send(tenant, "prices", [delayed("9.99", LONG_S, properties={"sku": "a"})])
    newest = qs.send(tenant, "prices", [delayed("8.99", LONG_S, properties={"sku": "a"})])
    info = qs.get_queue(tenant, "prices")
    assert (info.depth, info.delayed, info.totals["superseded"]) == (1, 1, 1)
    assert [m.id for m in browse_all(qs, tenant, "prices")] == newest


@pytest.fixture
def own_valkey(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_delayed_message_survives_a_restart_of_the_store(own_valkey: EmbeddedValkey, tenant: str) -> None:
    client: redis.Redis = own_valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "jobs", P2P)
    (msg_id,) = qs.send(tenant, "jobs", [delayed("after the restart", 1)])
    client.close()
    own_valkey.stop()
    own_valkey.start()
    client = own_valkey.client()
    qs = QueueServer(client, FAST)
    assert qs.get_queue(tenant, "jobs").depth == 1
    (got,) = taken_when_due(qs, tenant, "jobs", 1)
    assert (got.id, got.delivery_count) == (msg_id, 1)
    assert qs.ack(tenant, "jobs", receipts=[got.receipt]) == 1
    assert qs.get_queue(tenant, "jobs").delayed == 0
    assert_audit_clean(client, {tenant})
    client.close()
