"""Exclusive queues: one consumer at a time gets the messages, in send order also across
redelivery; a consumer that goes silent for the ack time-out loses its place, and the
messages it held come back to the standby that asked first, in order, as redeliveries
that do not count as failed deliveries.

Runs on the real Valkey and on fakeredis (the ``qs`` fixture's fast redelivery
schedule: 0.05, 0.1, 0.15 s).
"""

from __future__ import annotations

import dataclasses

import pytest

from atomq.errors import Conflict, InvalidInput
from atomq.platform import QueueServer
from support.audit import assert_audit_clean
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from support.queues import FAST, browse_all, msg
from support.waiting import wait_until

P2P = "point_to_point"


def texts(deliveries: list) -> list[str]:
    return [d.documents[0].data for d in deliveries]


def send_numbered(qs: QueueServer, tenant: str, n: int) -> list[str]:
    return [qs.send(tenant, "ex", [msg(f"m{i}")])[0] for i in range(1, n + 1)]


def test_the_first_consumer_is_active_and_the_others_wait_their_turn(qs: QueueServer, tenant: str) -> None:
    info, _ = qs.put_queue(tenant, "ex", P2P, access="exclusive")
    assert info.access.value == "exclusive"
    send_numbered(qs, tenant, 3)
    first = qs.take(tenant, "ex", max_messages=2, consumer="a")
    assert (first.active, texts(first.deliveries)) == (True, ["m1", "m2"])
    standby = qs.take(tenant, "ex", max_messages=10, consumer="b")
    assert (standby.active, standby.deliveries) == (False, [])
    assert qs.ack(tenant, "ex", receipts=[first.deliveries[0].receipt], consumer="b") == 0, "a standby settles nothing"
    assert qs.ack(tenant, "ex", receipts=[first.deliveries[0].receipt], consumer="a") == 1
    assert texts(qs.get(tenant, "ex", max_messages=10, consumer="a")) == ["m3"]
    consumers = qs.get_queue(tenant, "ex").consumers
    assert [(c.name, c.active) for c in consumers] == [("a", True), ("b", False)]
    assert all(c.last_seen > 0 for c in consumers)
    assert_audit_clean(qs.client, tenant)


def test_every_call_on_an_exclusive_queue_names_its_consumer(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, access="exclusive")
    qs.put_queue(tenant, "shared", P2P)
    send_numbered(qs, tenant, 1)
    for call in (lambda: qs.get(tenant, "ex"), lambda: qs.ack(tenant, "ex", ids=["1-000000000001"])):
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.details["field"] == "consumer"
    with pytest.raises(InvalidInput) as err:
        qs.get(tenant, "ex", consumer="#active")
    assert err.value.details["field"] == "consumer"
    qs.send(tenant, "shared", [msg("x")])
    taken = qs.take(tenant, "shared", consumer="anyone")
    assert (taken.active, texts(taken.deliveries)) == (None, ["x"]), "accepted and ignored elsewhere"


def test_a_silent_active_consumer_loses_its_place_and_its_messages_come_back_in_order(
        qs: QueueServer, tenant: str) -> None:
    # After b takes over, the checks below run within one ack time-out of b's and c's last calls
    # (else they in turn lose their place): 1 s leaves a loaded machine room for them.
    qs.put_queue(tenant, "ex", P2P, access="exclusive", ack_timeout_s=1.0, max_redeliveries=0)
    ids = send_numbered(qs, tenant, 5)
    held = qs.get(tenant, "ex", max_messages=3, consumer="a")
    assert texts(held) == ["m1", "m2", "m3"]
    assert qs.take(tenant, "ex", consumer="b").active is False
    assert qs.take(tenant, "ex", consumer="c").active is False

    taken: list = []

    def b_took_over() -> bool:
        """b and c both keep asking (so both stay in line) until a has been silent long enough."""
        assert qs.take(tenant, "ex", max_messages=10, consumer="c").deliveries == [], "c asked after b"
        turn = qs.take(tenant, "ex", max_messages=10, consumer="b")
        taken.extend(turn.deliveries)
        return bool(turn.active)

    wait_until(b_took_over, 5, "the standby that asked first to take over")
    assert [d.id for d in taken] == ids
    assert [(d.redelivered, d.delivery_count) for d in taken] == [(True, 2)] * 3 + [(False, 1)] * 2
    assert not any(b.failed_deliveries for b in browse_all(qs, tenant, "ex")), "not counted as failed"
    assert qs.get_queue(tenant, "ex").dead_letters == 0, "max_redeliveries 0, yet nothing dead: no failure"
    late = qs.take(tenant, "ex", consumer="a")
    assert (late.active, late.deliveries) == (False, []), "a comes back at the end of the line"
    assert qs.ack(tenant, "ex", receipts=[held[0].receipt], consumer="a") == 0
    assert [(c.name, c.active) for c in qs.get_queue(tenant, "ex").consumers] == [
        ("b", True), ("c", False), ("a", False)]
    assert_audit_clean(qs.client, tenant)


def test_nothing_sent_after_a_message_waiting_for_redelivery_goes_before_it(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, access="exclusive", max_redeliveries=5)
    send_numbered(qs, tenant, 5)
    first, second = qs.get(tenant, "ex", max_messages=2, consumer="a")
    qs.nack(tenant, "ex", receipts=[first.receipt], consumer="a")
    assert qs.get(tenant, "ex", max_messages=10, consumer="a") == [], "m3 waits behind the redelivery of m1"
    qs.ack(tenant, "ex", receipts=[second.receipt], consumer="a")
    got = qs.get(tenant, "ex", max_messages=10, wait_ms=3000, consumer="a")
    assert texts(got) == ["m1", "m3", "m4", "m5"]
    assert got[0].redelivered and not got[1].redelivered
    assert_audit_clean(qs.client, tenant)


def test_exclusive_is_for_point_to_point_queues_and_the_line_is_bounded(qs: QueueServer, tenant: str) -> None:
    with pytest.raises(InvalidInput) as err:
        qs.put_queue(tenant, "ps", "publish_subscribe", access="exclusive")
    assert err.value.details["field"] == "access"
    qs.put_queue(tenant, "ex", P2P, access="exclusive")
    with pytest.raises(InvalidInput) as err:
        qs.put_queue(tenant, "ex", "publish_subscribe")
    assert err.value.details["field"] == "access"
    with pytest.raises(InvalidInput) as err:
        qs.put_queue(tenant, "ex", P2P, access="shared")
    assert err.value.details["field"] == "access"
    small = QueueServer(qs.client, dataclasses.replace(FAST, max_consumers=2))
    small.get(tenant, "ex", consumer="one")
    small.get(tenant, "ex", consumer="two")
    with pytest.raises(Conflict) as full:
        small.get(tenant, "ex", consumer="three")
    assert full.value.code == "too_many_consumers"


def test_an_exclusive_queue_delivers_in_send_order_whatever_the_priorities(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, access="exclusive", max_redeliveries=5)
    qs.send(tenant, "ex", [OutgoingMessage(documents=(OutgoingDocument(f"p{p}-{i}"),), priority=p)
                           for i, p in enumerate((4, 9, 0, 4, 7, 9, 4))])
    assert qs.get_queue(tenant, "ex").depth_by_priority == {9: 2, 7: 1, 4: 3, 0: 1}
    first = qs.get(tenant, "ex", max_messages=3, consumer="a")
    assert texts(first) == ["p4-0", "p9-1", "p0-2"]
    qs.nack(tenant, "ex", receipts=[first[1].receipt], consumer="a")
    qs.ack(tenant, "ex", receipts=[first[0].receipt, first[2].receipt], consumer="a")
    rest = qs.get(tenant, "ex", max_messages=10, wait_ms=3000, consumer="a")
    assert texts(rest) == ["p9-1", "p4-3", "p7-4", "p9-5", "p4-6"], "the redelivery first, then in send order"
    assert_audit_clean(qs.client, tenant)


def test_an_operators_release_frees_the_active_consumers_delivery_and_lists_it_by_deadline(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, access="exclusive")
    ids = send_numbered(qs, tenant, 3)
    held = qs.take(tenant, "ex", max_messages=2, consumer="gone")
    assert texts(held.deliveries) == ["m1", "m2"]
    qs.extend(tenant, "ex", ids=[ids[0]], seconds=600, consumer="gone")
    listed = qs.in_flight(tenant, "ex")
    assert [(d.id, d.delivery_count, d.failed_deliveries) for d in listed] == [(ids[1], 1, 0), (ids[0], 1, 0)], \
        "the first due first"
    assert listed[0].deadline < listed[1].deadline
    assert qs.release(tenant, "ex", ids=[ids[0]], consumer="other") == 0, "a standby's own release is refused"
    assert qs.release(tenant, "ex", ids=[ids[0]], delay_s=0) == 1, "without a consumer: whoever holds it"
    assert [d.id for d in qs.in_flight(tenant, "ex")] == [ids[1]]
    again = qs.take(tenant, "ex", max_messages=5, consumer="gone")
    assert [(d.id, d.redelivered) for d in again.deliveries] == [(ids[0], True), (ids[2], False)]
    assert_audit_clean(qs.client, tenant)

