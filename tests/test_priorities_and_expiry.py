"""Priorities (0 to 9, default 4; higher first, send order within one) and expiry
(a message's ``expires_at`` or ``ttl_s``, or its queue's ``message_ttl_s``).

Runs on the real Valkey and on fakeredis (the ``qs`` fixture's fast
redelivery schedule: 0.05, 0.1, 0.15 s).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from atomq import defaults
from atomq.errors import InvalidInput
from atomq.platform import QueueServer
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from support.audit import assert_audit_clean
from support.queues import FAST, browse_all, dead_all
from support.waiting import wait_until

P2P = "point_to_point"


def m(text: str, priority: int | None = None, **timing: float) -> OutgoingMessage:
    return OutgoingMessage(documents=(OutgoingDocument(text),), priority=priority, **timing)


def redelivery_due(qs: QueueServer, tenant: str) -> bool:
    """Moves what fell due, as a maintenance round would; whether nothing waits out a delay any more."""
    qs.sweep(tenant)
    return qs.get_queue(tenant, "q").scheduled == 0


def texts(deliveries: list) -> list[str]:
    return [d.documents[0].data for d in deliveries]


def test_a_higher_priority_is_delivered_first_and_equal_ones_in_send_order(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P)
    qs.send(tenant, "q", [m("d1"), m("low", 0), m("hi9", 9), m("d2"), m("hi7a", 7)])
    qs.send(tenant, "q", [m("hi7b", 7), m("d3", 4), m("low2", 0)])
    info = qs.get_queue(tenant, "q")
    assert info.depth_by_priority == {9: 1, 7: 2, 4: 3, 0: 2}
    got = qs.get(tenant, "q", max_messages=3)
    assert texts(got) == ["hi9", "hi7a", "hi7b"]
    assert [d.envelope.priority for d in got] == [9, 7, 7]
    assert texts(qs.get(tenant, "q", max_messages=10)) == ["d1", "d2", "d3", "low", "low2"]
    assert_audit_clean(qs.client, tenant)


def test_a_redelivery_keeps_its_priority_and_its_place(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, max_redeliveries=3)
    first = qs.send(tenant, "q", [m("a"), m("b")])
    (a,) = qs.get(tenant, "q", max_messages=1)
    assert a.id == first[0]
    qs.send(tenant, "q", [m("c"), m("urgent", 8)])
    qs.nack(tenant, "q", receipts=[a.receipt])
    wait_until(lambda: redelivery_due(qs, tenant), 5, "the redelivery")
    got = qs.get(tenant, "q", max_messages=10)
    # "a" was sent before "b" and "c": back among the default priority at its place, behind "urgent".
    assert texts(got) == ["urgent", "a", "b", "c"]
    assert got[1].redelivered and got[1].delivery_count == 2
    qs.nack(tenant, "q", ids=[got[0].id])
    wait_until(lambda: redelivery_due(qs, tenant), 5, "the redelivery")
    (again,) = qs.get(tenant, "q", max_messages=1)
    assert again.envelope.priority == 8 and again.delivery_count == 2
    assert_audit_clean(qs.client, tenant)


def test_a_waiting_get_wakes_for_a_message_of_another_priority(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P)
    threading.Timer(0.2, lambda: qs.send(tenant, "q", [m("late", 9)])).start()
    started = time.monotonic()
    got = qs.get(tenant, "q", max_messages=1, wait_ms=5000)
    assert texts(got) == ["late"]
    assert time.monotonic() - started < 4, "woken by the send, not by the end of the wait"


def test_a_priority_outside_0_to_9_is_refused(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P)
    for bad in (-1, 10, True, 4.0):
        with pytest.raises(InvalidInput) as err:
            qs.send(tenant, "q", [m("x", bad)])  # type: ignore[arg-type]
        assert err.value.details["field"] == "messages.0.priority"
    assert qs.get_queue(tenant, "q").depth == 0


def test_the_latest_expiry_a_send_takes_reads_back_to_the_millisecond(qs: QueueServer, tenant: str) -> None:
    """An expiry of 10^14 ms or more (after the year 5138) has 15 digits, past the 14 that Lua
    prints a number with: written into the envelope's head as "2.534023007995e+14", it made every
    browse and get of the message fail."""
    qs.put_queue(tenant, "q", P2P)
    latest = defaults.LATEST_TIME_S - 0.001
    (far,) = qs.send(tenant, "q", [m("far", 7, expires_at=latest)])
    (browsed,) = browse_all(qs, tenant, "q")
    assert (browsed.id, browsed.envelope.expires_at, browsed.envelope.priority) == (far, latest, 7)
    (got,) = qs.get(tenant, "q")
    assert (got.id, got.envelope.expires_at) == (far, latest)
    qs.nack(tenant, "q", receipts=[got.receipt])  # the redelivery reads its priority and expiry back in the scripts
    wait_until(lambda: redelivery_due(qs, tenant), 5, "the redelivery")
    (again,) = qs.get(tenant, "q")
    assert (again.id, again.delivery_count, again.envelope.expires_at) == (far, 2, latest)
    qs.ack(tenant, "q", receipts=[again.receipt])
    assert_audit_clean(qs.client, tenant)


@pytest.mark.parametrize("timing", [{"ttl_s": 0.2}, {"expires_at": "soon"}, {"queue": 0.2}])
def test_an_expired_message_is_never_delivered_and_goes_to_the_dead_letter_queue(
        qs: QueueServer, tenant: str, timing: dict) -> None:
    qs.put_queue(tenant, "q", P2P, message_ttl_s=timing.get("queue"))
    given = {"expires_at": time.time() + 0.2} if "expires_at" in timing else {k: v for k, v in timing.items()
                                                                               if k == "ttl_s"}
    (short,) = qs.send(tenant, "q", [m("short", **given)])
    (kept,) = qs.send(tenant, "q", [m("kept", ttl_s=60)]) if "queue" not in timing else (None,)
    time.sleep(0.3)  # past the expiry: what is measured is what the next get does
    got = qs.get(tenant, "q", max_messages=10)
    assert short not in [d.id for d in got]
    assert [d.id for d in got] == ([kept] if kept else [])
    (dead,) = dead_all(qs, tenant, "q")
    assert (dead.id, dead.reason) == (short, "expired")
    assert qs.counters.queue_totals(tenant, ["q"])["q"]["expired"] == 1
    assert_audit_clean(qs.client, tenant)


def test_the_maintenance_expires_a_message_nobody_asks_for(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, on_expire="discard")
    qs.send(tenant, "q", [m("gone soon", ttl_s=0.1), m("stays")])
    wait_until(lambda: qs.due_work([tenant])[tenant].due == ["q"], 5, "the expiry to fall due")
    qs.maintain(tenant)
    assert qs.get_queue(tenant, "q").depth == 1
    assert dead_all(qs, tenant, "q") == [], "discarded, not dead-lettered"
    assert [b.documents[0].data for b in browse_all(qs, tenant, "q")] == ["stays"]
    assert qs.counters.queue_totals(tenant, ["q"])["q"]["expired"] == 1
    assert_audit_clean(qs.client, tenant)


def test_a_message_in_flight_when_it_expires_can_be_acked_but_expires_if_it_fails(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, max_redeliveries=5)
    qs.send(tenant, "q", [m("acked", ttl_s=0.2), m("nacked", ttl_s=0.2)])
    first, second = qs.get(tenant, "q", max_messages=2)
    time.sleep(0.3)
    qs.sweep(tenant)
    assert qs.ack(tenant, "q", receipts=[first.receipt]) == 1
    result = qs.nack(tenant, "q", receipts=[second.receipt])
    assert (result.requeued, result.dead_lettered) == (0, 1)
    (dead,) = dead_all(qs, tenant, "q")
    assert (dead.id, dead.reason) == (second.id, "expired")
    assert_audit_clean(qs.client, tenant)


def test_a_resent_dead_letter_no_longer_expires(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P)
    (mid,) = qs.send(tenant, "q", [m("x", ttl_s=0.1)])
    time.sleep(0.2)
    assert qs.get(tenant, "q") == []
    assert qs.resend_dead_letters(tenant, "q", ids=[mid]) == 1
    time.sleep(0.1)
    (got,) = qs.get(tenant, "q")
    assert got.id == mid and got.envelope.expires_at is None
    qs.nack(tenant, "q", receipts=[got.receipt])
    wait_until(lambda: redelivery_due(qs, tenant), 5, "the redelivery")
    assert [d.id for d in qs.get(tenant, "q")] == [mid]
    assert_audit_clean(qs.client, tenant)


def test_dead_letters_are_listed_resent_and_deleted_by_reason(qs: QueueServer, tenant: str) -> None:
    small = QueueServer(qs.client, dataclasses.replace(FAST, chunk_size=2))  # selections span chunks
    small.put_queue(tenant, "q", P2P, max_redeliveries=0)
    expiring = small.send(tenant, "q", [m(f"x{i}", ttl_s=0.1) for i in range(5)])
    nacked = small.send(tenant, "q", [m(f"n{i}") for i in range(4)])
    time.sleep(0.2)  # past the expiry of the first five
    got = small.get(tenant, "q", max_messages=10)
    assert [d.id for d in got] == nacked
    small.nack(tenant, "q", receipts=[d.receipt for d in got[:2]], reason="bad input")
    small.nack(tenant, "q", receipts=[d.receipt for d in got[2:]])

    def listed(reason: str) -> list[str]:
        return [d.id for d in dead_all(small, tenant, "q", limit=2, reason=reason)]

    assert (listed("expired"), listed("bad input"), listed("nacked")) == (expiring, nacked[:2], nacked[2:])
    assert listed("bad") == [], "a reason is matched whole"
    for selector in ({"ids": [nacked[2]], "reason": "nacked"}, {"all": True, "reason": "nacked"}, {"reason": ""}, {}):
        with pytest.raises(InvalidInput):
            small.resend_dead_letters(tenant, "q", **selector)
    assert small.resend_dead_letters(tenant, "q", reason="expired") == 5
    assert listed("expired") == []
    assert small.delete_dead_letters(tenant, "q", reason="bad input") == 2
    assert small.delete_dead_letters(tenant, "q", reason="bad input") == 0
    assert [d.id for d in dead_all(small, tenant, "q")] == nacked[2:]
    assert [d.id for d in small.get(tenant, "q", max_messages=10)] == expiring
    assert_audit_clean(small.client, tenant)


def test_queue_expiry_settings_are_kept_by_a_put_that_does_not_name_them(qs: QueueServer, tenant: str) -> None:
    info, _ = qs.put_queue(tenant, "q", P2P, message_ttl_s=30, on_expire="discard")
    assert (info.message_ttl_s, info.on_expire.value) == (30, "discard")
    info, created = qs.put_queue(tenant, "q", P2P, max_redeliveries=2)
    assert not created and (info.message_ttl_s, info.on_expire.value, info.max_redeliveries) == (30, "discard", 2)
    for field, value in (("message_ttl_s", -1), ("on_expire", "keep")):
        with pytest.raises(InvalidInput) as err:
            qs.put_queue(tenant, "q", P2P, **{field: value})
        assert err.value.details["field"] == field
