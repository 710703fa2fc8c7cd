"""Messages in groups: on a queue whose ordering is ``group`` one message of a group is out at a
time (ready, in flight, or waiting out a redelivery delay), a group's messages go out in send
order also across redeliveries, and groups are independent; a message of no group is ordered
with no other.

Runs on the real Valkey, the cluster and fakeredis (the ``qs`` fixture's fast redelivery
schedule: 0.05, 0.1, 0.15 s).
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from atomq.errors import InvalidInput, QueueFull
from atomq.platform import MessageState, OutgoingMessage, QueueOrdering, QueueServer, QueueSettings
from atomq.platform.queues import send_journal
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage
from support.audit import assert_audit_clean
from support.queues import browse_all, dead_all, msg
from support.waiting import wait_until

P2P, PUBSUB = "point_to_point", "publish_subscribe"


def grouped(text: str, group: str | None, **fields: Any) -> OutgoingMessage:
    return dataclasses.replace(msg(text), group=group, **fields)


def texts(deliveries: list) -> list[str]:
    return [d.documents[0].data for d in deliveries]


@pytest.fixture
def gq(qs: QueueServer, tenant: str) -> str:
    """A group-ordered queue, "g", that redelivers a failed delivery up to 5 times."""
    info, _ = qs.put_queue(tenant, "g", P2P, ordering="group", max_redeliveries=5)
    assert info.ordering is QueueOrdering.GROUP
    return "g"


def test_a_group_is_held_while_its_head_is_out_and_the_others_go_on(qs: QueueServer, tenant: str, gq: str) -> None:
    qs.send(tenant, gq, [grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b"), grouped("a3", "a"),
                         grouped("b2", "b"), grouped("c1", "c")])
    assert qs.get_queue(tenant, gq).depth == 6, "waiting messages count in the depth"
    first = qs.get(tenant, gq, max_messages=10)
    assert texts(first) == ["a1", "b1", "c1"], "one a get per group: the heads, in send order"
    assert [d.envelope.group for d in first] == ["a", "b", "c"]
    assert qs.get(tenant, gq, max_messages=10) == [], "every group's head is in flight"
    qs.ack(tenant, gq, receipts=[first[1].receipt])
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["b2"], "b goes on while a is held"
    qs.ack(tenant, gq, receipts=[first[0].receipt])
    second = qs.get(tenant, gq, max_messages=10)
    assert texts(second) == ["a2"]
    qs.ack(tenant, gq, receipts=[second[0].receipt])
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["a3"]
    assert_audit_clean(qs.client, {tenant})


def test_a_failed_head_comes_back_before_its_groups_next_and_its_delay_holds_the_group(
        qs: QueueServer, tenant: str, gq: str) -> None:
    slow = QueueServer(qs.client, QueueSettings(redelivery_delays_s=(30,)))
    qs.send(tenant, gq, [grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b"), grouped("b2", "b"),
                         grouped("c1", "c"), grouped("c2", "c"), grouped("d1", "d")])
    a1, b1, c1, d1 = qs.get(tenant, gq, max_messages=10)
    slow.nack(tenant, gq, receipts=[a1.receipt])
    qs.release(tenant, gq, receipts=[b1.receipt], delay_s=30)
    qs.ack(tenant, gq, receipts=[d1.receipt])
    assert qs.get(tenant, gq, max_messages=10) == [], "a1 waits out its 30 s delay, b1 its release: a and b held"
    states = {m.documents[0].data: m.state for m in browse_all(qs, tenant, gq)}
    assert (states["a1"], states["a2"], states["b2"]) == (MessageState.SCHEDULED, MessageState.READY,
                                                         MessageState.READY)
    qs.nack(tenant, gq, receipts=[c1.receipt])  # the fast schedule: back after 0.05 s, before c2
    for count in (2, 3):
        again: list = []
        wait_until(lambda: bool(again.extend(qs.get(tenant, gq, max_messages=10)) or again), 10, "c1 again")
        assert [(d.documents[0].data, d.delivery_count, d.redelivered) for d in again] == [("c1", count, True)]
        if count == 2:
            qs.nack(tenant, gq, receipts=[again[0].receipt])
    qs.ack(tenant, gq, receipts=[again[0].receipt])
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["c2"]
    assert_audit_clean(qs.client, {tenant})


def test_a_dead_head_makes_way_and_comes_back_behind_the_groups_head_when_resent(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "g", P2P, ordering="group", max_redeliveries=0)
    ids = qs.send(tenant, "g", [grouped("a1", "a"), grouped("a2", "a"), grouped("a3", "a")])
    (a1,) = qs.get(tenant, "g", max_messages=10)
    assert qs.nack(tenant, "g", receipts=[a1.receipt], reason="bad").dead_lettered == 1
    (a2,) = qs.get(tenant, "g", max_messages=10)
    assert a2.id == ids[1], "the dead letter made way for the next"
    assert qs.resend_dead_letters(tenant, "g", ids=[ids[0]]) == 1
    assert qs.get(tenant, "g", max_messages=10) == [], "the resent a1 waits behind a2, which is out"
    qs.ack(tenant, "g", receipts=[a2.receipt])
    assert [d.id for d in qs.get(tenant, "g", max_messages=10)] == [ids[0]], "a1 is next: it was sent first"
    assert_audit_clean(qs.client, {tenant})


def test_messages_without_a_group_are_ordered_with_none(qs: QueueServer, tenant: str, gq: str) -> None:
    qs.send(tenant, gq, [grouped("a1", "a"), msg("n1"), grouped("a2", "a"), msg("n2"), msg("n3")])
    assert texts(qs.get(tenant, gq, max_messages=2)) == ["a1", "n1"]
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["n2", "n3"], "n2 and n3 need not wait for n1"
    assert_audit_clean(qs.client, {tenant})


def test_a_group_on_another_queue_is_carried_and_orders_nothing(qs: QueueServer, tenant: str) -> None:
    info, _ = qs.put_queue(tenant, "plain", P2P)
    assert info.ordering is QueueOrdering.NONE
    qs.send(tenant, "plain", [grouped("a1", "a"), grouped("a2", "a")])
    got = qs.get(tenant, "plain", max_messages=10)
    assert (texts(got), [d.envelope.group for d in got]) == (["a1", "a2"], ["a", "a"])
    browsed = browse_all(qs, tenant, "plain")
    assert [b.envelope.group for b in browsed] == ["a", "a"]


def test_a_group_is_one_to_128_characters_of_sqs_alphabet(qs: QueueServer, tenant: str, gq: str) -> None:
    odd = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    qs.send(tenant, gq, [grouped("x", odd), grouped("y", "g" * 128), grouped("z", odd)])
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["x", "y"]
    for bad in ("", "g" * 129, "with space", "é", "tab\t", 7):
        with pytest.raises(InvalidInput) as err:
            qs.send(tenant, gq, [msg("ok"), grouped("bad", bad)])  # type: ignore[arg-type]
        assert err.value.details["field"] == "messages.1.group"
    with pytest.raises(InvalidInput) as err:
        qs.put_queue(tenant, gq, P2P, ordering="strict")
    assert err.value.details["field"] == "ordering"
    assert_audit_clean(qs.client, {tenant})


def test_waiting_messages_are_browsed_as_ready_and_a_delete_of_a_head_makes_way(
        qs: QueueServer, tenant: str, gq: str) -> None:
    ids = qs.send(tenant, gq, [grouped("a1", "a"), grouped("a2", "a"), grouped("a3", "a"), grouped("a4", "a")])
    browsed = browse_all(qs, tenant, gq)
    assert [(b.id, b.state, b.envelope.group) for b in browsed] == [(i, MessageState.READY, "a") for i in ids]
    assert [m.id for m in qs.browse(tenant, gq, limit=10, state="ready").items] == ids
    assert qs.delete_messages(tenant, gq, ids=[ids[0], ids[2]]) == 2, "the head and one waiting"
    assert [d.id for d in qs.get(tenant, gq, max_messages=10)] == [ids[1]]
    assert qs.delete_messages(tenant, gq, all=True) == 2
    assert qs.get_queue(tenant, gq).depth == 0
    assert qs.client.exists(k.TenantKeys(tenant).queue(gq).destination().groups) == 0, "no group is left out"
    assert_audit_clean(qs.client, {tenant})


def test_expiry_of_a_head_or_of_a_waiting_message_keeps_the_group_going(
        qs: QueueServer, tenant: str, gq: str) -> None:
    ids = qs.send(tenant, gq, [grouped("a1", "a", ttl_s=0.05), grouped("a2", "a", ttl_s=0.05),
                               grouped("a3", "a"), grouped("b1", "b", ttl_s=0.05), grouped("b2", "b", ttl_s=60),
                               grouped("b3", "b", ttl_s=0.05), grouped("b4", "b")])

    def swept() -> bool:
        qs.sweep(tenant)
        return qs.get_queue(tenant, gq).dead_letters == 4

    wait_until(swept, 10, "the messages of 0.05 s to expire")
    assert {d.id for d in dead_all(qs, tenant, gq)} == {ids[0], ids[1], ids[3], ids[5]}
    got = qs.get(tenant, gq, max_messages=10)
    assert texts(got) == ["a3", "b2"], "a1 expired as a's head, a2 behind it; b1 as b's head, b3 behind b2"
    qs.ack(tenant, gq, receipts=[got[1].receipt])
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["b4"]
    assert_audit_clean(qs.client, {tenant})


def test_a_delayed_message_joins_its_group_when_it_falls_due(qs: QueueServer, tenant: str, gq: str) -> None:
    late, now = qs.send(tenant, gq, [grouped("a1", "a", delay_s=0.1), grouped("a2", "a")])
    (first,) = qs.get(tenant, gq, max_messages=10)
    assert first.id == now, "a1 waits out its delay outside the group: a2 is the group's first"

    def arrived() -> bool:
        qs.sweep(tenant)
        return {m.id: m.state for m in browse_all(qs, tenant, gq)}[late] is MessageState.READY

    wait_until(arrived, 10, "a1 to fall due")
    assert qs.get(tenant, gq, max_messages=10) == [], "a1 joined its group behind a2, which is out"
    qs.ack(tenant, gq, receipts=[first.receipt])
    assert [d.id for d in qs.get(tenant, gq, max_messages=10)] == [late]
    assert_audit_clean(qs.client, {tenant})


def test_a_queues_delay_keeps_each_groups_order(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "slow", P2P, ordering="group", delay_s=0.1)
    qs.send(tenant, "slow", [grouped("a1", "a"), grouped("b1", "b"), grouped("a2", "a"), grouped("a3", "a")])
    got: list = []
    wait_until(lambda: bool(got.extend(qs.get(tenant, "slow", max_messages=10)) or got), 10, "the delay to pass")
    got += qs.get(tenant, "slow", max_messages=10)
    assert sorted(texts(got)) == ["a1", "b1"], "one of each group, a's first"
    for expected in ("a2", "a3"):
        qs.ack(tenant, "slow", receipts=[d.receipt for d in got])
        got = qs.get(tenant, "slow", max_messages=10)
        assert texts(got) == [expected]
    assert_audit_clean(qs.client, {tenant})


def test_a_change_of_ordering_applies_to_what_is_sent_after_it(qs: QueueServer, tenant: str, gq: str) -> None:
    qs.send(tenant, gq, [grouped("a1", "a"), grouped("a2", "a"), grouped("a3", "a")])
    qs.put_queue(tenant, gq, P2P, ordering="none")
    qs.send(tenant, gq, [grouped("a4", "a"), grouped("a5", "a")])
    first = qs.get(tenant, gq, max_messages=10)
    assert texts(first) == ["a1", "a4", "a5"], "a2 and a3 still wait for a1, a4 and a5 wait for nothing"
    qs.ack(tenant, gq, receipts=[d.receipt for d in first])
    assert texts(qs.get(tenant, gq, max_messages=10)) == ["a2"], "the group drains as it was"
    qs.put_queue(tenant, gq, P2P, ordering="group")
    assert qs.get_queue(tenant, gq).ordering is QueueOrdering.GROUP
    assert_audit_clean(qs.client, {tenant})


def test_each_subscriber_keeps_its_own_groups(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ps", PUBSUB, ordering="group")
    for sub in ("x", "y"):
        qs.put_subscriber(tenant, "ps", sub)
    qs.send(tenant, "ps", [grouped("a1", "a"), grouped("a2", "a")])
    (x1,) = qs.get(tenant, "ps", max_messages=10, subscriber="x")
    (y1,) = qs.get(tenant, "ps", max_messages=10, subscriber="y")
    qs.ack(tenant, "ps", receipts=[y1.receipt], subscriber="y")
    assert texts(qs.get(tenant, "ps", max_messages=10, subscriber="y")) == ["a2"]
    assert qs.get(tenant, "ps", max_messages=10, subscriber="x") == [], "x still holds a1"
    qs.ack(tenant, "ps", receipts=[x1.receipt], subscriber="x")
    assert texts(qs.get(tenant, "ps", max_messages=10, subscriber="x")) == ["a2"]
    assert_audit_clean(qs.client, {tenant})


def test_an_exclusive_queue_ordered_by_group_gives_its_active_consumer_one_of_each_group(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, access="exclusive", ordering="group", max_redeliveries=5)
    qs.send(tenant, "ex", [grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b"), grouped("b2", "b")])
    got = qs.get(tenant, "ex", max_messages=10, consumer="one")
    assert texts(got) == ["a1", "b1"]
    assert qs.get(tenant, "ex", max_messages=10, consumer="two") == []
    qs.ack(tenant, "ex", receipts=[got[1].receipt], consumer="one")
    assert texts(qs.get(tenant, "ex", max_messages=10, consumer="one")) == ["b2"]
    assert_audit_clean(qs.client, {tenant})


def test_a_last_value_queue_ordered_by_group_supersedes_within_and_across_groups(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, ordering="group", last_value=True, last_value_key="k")
    qs.send(tenant, "lv", [grouped("a1", "a", properties={"k": "x"}), grouped("a2", "a", properties={"k": "y"}),
                           grouped("a3", "a", properties={"k": "y"})])
    (a1,) = qs.get(tenant, "lv", max_messages=10)
    qs.send(tenant, "lv", [grouped("a4", "a", properties={"k": "x"})])
    qs.ack(tenant, "lv", receipts=[a1.receipt])
    assert texts(qs.get(tenant, "lv", max_messages=10)) == ["a3"], "a2 was superseded while it waited"
    qs.send(tenant, "lv", [grouped("b1", "b", properties={"k": "x"})])
    assert [m.documents[0].data for m in browse_all(qs, tenant, "lv")] == ["a3", "b1"], "b1 superseded a4"
    assert_audit_clean(qs.client, {tenant})


def test_an_overflow_drops_what_a_get_could_take_and_the_group_goes_on(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "g", P2P, ordering="group", max_messages=3, overflow="drop_oldest")
    qs.send(tenant, "g", [grouped("a1", "a"), grouped("a2", "a"), msg("n1")])
    assert qs.send_batch(tenant, "g", [msg("n2")]).dropped == 1
    assert texts(qs.get(tenant, "g", max_messages=10)) == ["a2", "n1", "n2"], "a1, the oldest, made room"
    with pytest.raises(QueueFull):  # all three are in flight: nothing a get could take to drop
        qs.send(tenant, "g", [msg("n3")])
    assert_audit_clean(qs.client, {tenant})


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Chunked sends of at most 10 copies a step, and the names of the send scripts run."""
    monkeypatch.setattr(send_journal, "CHUNK_COPIES", 10)
    ran: list[str] = []
    real_run = Storage.run

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("send"):
            ran.append(name)
        return real_run(self, name, *args, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    yield ran


def test_a_chunked_publish_keeps_the_groups_of_every_destination(
        qs: QueueServer, tenant: str, small_chunks: list[str]) -> None:
    for name in ("g1", "g2", "g3"):
        qs.put_queue(tenant, name, P2P, ordering="group", topics=["x/>"])
    published = qs.publish(tenant, "x/1", [grouped(f"m{i}", "ab"[i % 2]) for i in range(6)])
    assert "send_apply" in small_chunks, "18 copies: the send was chunked"
    for name in ("g1", "g2", "g3"):
        got = qs.get(tenant, name, max_messages=10)
        assert texts(got) == ["m0", "m1"]
        qs.ack(tenant, name, receipts=[d.receipt for d in got])
        assert texts(qs.get(tenant, name, max_messages=10)) == ["m2", "m3"]
    assert published.copies == 18
    assert_audit_clean(qs.client, {tenant})


def test_many_consumers_settle_every_group_in_send_order_and_lose_nothing(
        qs: QueueServer, tenant: str) -> None:
    """Four consumers take batches of 1 to 5, nack about one delivery in five and ack the rest:
    no group ever has two messages out, every group is acked in send order, and every message is
    acked once."""
    qs.put_queue(tenant, "g", P2P, ordering="group", max_redeliveries=1000, ack_timeout_s=60)
    groups = [f"group-{n}" for n in range(6)]
    sent: dict[str | None, list[str]] = defaultdict(list)
    batch = [grouped(f"{g}/{i}", g) for i in range(15) for g in groups] + [msg(f"none/{i}") for i in range(10)]
    for start in range(0, len(batch), 25):
        part = batch[start:start + 25]
        for m, message_id in zip(part, qs.send(tenant, "g", part)):
            sent[m.group].append(message_id)
    total = len(batch)
    lock = threading.Lock()
    out: dict[str, str] = {}
    acked: dict[str | None, list[str]] = defaultdict(list)
    overlaps: list[str] = []
    failures: list[BaseException] = []

    def consume(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            while True:
                with lock:
                    if sum(len(ids) for ids in acked.values()) == total:
                        return
                for d in qs.get(tenant, "g", max_messages=rnd.randint(1, 5), wait_ms=50):
                    group = d.envelope.group
                    with lock:
                        if group is not None:
                            if group in out:
                                overlaps.append(f"{d.id} of {group} while {out[group]} is out")
                            out[group] = d.id
                    nack = rnd.random() < 0.2
                    # What a settle makes way for may be taken at once by another consumer: the
                    # record of it comes first.
                    with lock:
                        out.pop(group or "", None)
                        if not nack:
                            acked[group].append(d.id)
                    if nack:
                        assert qs.nack(tenant, "g", receipts=[d.receipt]).requeued == 1
                    else:
                        assert qs.ack(tenant, "g", receipts=[d.receipt]) == 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=consume, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "the consumers finish"
    assert failures == [] and overlaps == []
    for g in groups:
        assert acked[g] == sent[g], f"group {g} in send order"
    assert sorted(acked[None]) == sorted(sent[None])
    info = qs.get_queue(tenant, "g")
    assert (info.depth, info.in_flight, info.dead_letters) == (0, 0, 0)
    assert info.totals["acked"] == total
    assert_audit_clean(qs.client, {tenant})


def test_a_queue_counts_its_groups_out_and_the_messages_they_hold_back(qs: QueueServer, tenant: str,
                                                                         gq: str) -> None:
    qs.send(tenant, gq, [grouped("a1", "a"), grouped("a2", "a"), grouped("b1", "b"), grouped("a3", "a"),
                         grouped("n1", None)])

    def shown() -> tuple[int, int, int]:
        info = qs.get_queue(tenant, gq)
        return info.groups, info.held_by_group, info.depth

    assert shown() == (2, 2, 5), "a and b have a head out; a2 and a3 wait behind a1"
    got = qs.get(tenant, gq, max_messages=10)
    assert sorted(texts(got)) == ["a1", "b1", "n1"]
    assert shown() == (2, 2, 2), "heads in flight still hold their groups"
    qs.ack(tenant, gq, receipts=[d.receipt for d in got if d.documents[0].data in ("a1", "n1")])
    assert shown() == (2, 1, 2), "a2 is a's head now"
    qs.ack(tenant, gq, receipts=[d.receipt for d in got if d.documents[0].data == "b1"])
    assert shown() == (1, 1, 2)
    info, _ = qs.put_queue(tenant, "plain", P2P)
    assert (info.groups, info.held_by_group) == (0, 0)
