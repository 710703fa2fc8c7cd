"""Last-value queues: at most one waiting message per value of a property, a new one
replacing it; an in-flight one is not replaced, but is dropped instead of coming back
when it fails after a newer one arrived.

Runs on the real Valkey and on fakeredis (the ``qs`` fixture's fast redelivery
schedule: 0.05, 0.1, 0.15 s).
"""

from __future__ import annotations

import pytest

from atomq.errors import InvalidInput
from atomq.platform import QueueServer
from support.audit import assert_audit_clean
from support.queues import browse_all, dead_all, msg
from support.waiting import wait_until

P2P = "point_to_point"


def values(qs: QueueServer, tenant: str, queue: str = "lv") -> list[tuple[str, str]]:
    """What a browse shows: (key property, text) of each message, in send order."""
    return [(b.properties.get("k", ""), b.documents[0].data) for b in browse_all(qs, tenant, queue)]


def superseded(qs: QueueServer, tenant: str, queue: str = "lv") -> int:
    return qs.counters.queue_totals(tenant, [queue])[queue]["superseded"]


def test_a_new_message_replaces_the_waiting_one_of_its_key(qs: QueueServer, tenant: str) -> None:
    info, _ = qs.put_queue(tenant, "lv", P2P, last_value=True, last_value_key="k")
    assert (info.last_value, info.last_value_key) == (True, "k")
    qs.send(tenant, "lv", [msg("a1", k="a"), msg("b1", k="b"), msg("none1")])
    qs.send(tenant, "lv", [msg("a2", k="a"), msg("none2"), msg("a3", k="a")])
    assert values(qs, tenant) == [("b", "b1"), ("", "none2"), ("a", "a3")], "browsing reads the current values"
    assert values(qs, tenant) == [("b", "b1"), ("", "none2"), ("a", "a3")], "and consumes nothing"
    assert superseded(qs, tenant) == 3
    info = qs.get_queue(tenant, "lv")
    assert (info.depth, info.totals["sent"]) == (3, 6)
    assert [d.documents[0].data for d in qs.get(tenant, "lv", max_messages=10)] == ["b1", "none2", "a3"]
    assert_audit_clean(qs.client, tenant)


def test_without_a_key_property_the_queue_holds_one_message(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True)
    for i in range(5):
        qs.send(tenant, "lv", [msg(f"checkpoint {i}", k=str(i))])
    assert [b.documents[0].data for b in browse_all(qs, tenant, "lv")] == ["checkpoint 4"]
    assert superseded(qs, tenant) == 4
    assert_audit_clean(qs.client, tenant)


def test_a_key_that_is_not_text_is_keyed_by_its_json(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True, last_value_key="k")
    qs.send(tenant, "lv", [msg("n1", k=7), msg("s1", k="x"), msg("n2", k=7), msg("l1", k=[1, 2]),  # type: ignore[arg-type]
                           msg("l2", k=[1, 2])])  # type: ignore[arg-type]
    assert [b.documents[0].data for b in browse_all(qs, tenant, "lv")] == ["s1", "n2", "l2"]
    assert_audit_clean(qs.client, tenant)


def test_an_in_flight_message_is_kept_but_dropped_if_it_fails_after_a_newer_arrived(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True, last_value_key="k", max_redeliveries=5)
    qs.send(tenant, "lv", [msg("a1", k="a"), msg("b1", k="b"), msg("c1", k="c")])
    a1, b1, c1 = qs.get(tenant, "lv", max_messages=3)
    qs.send(tenant, "lv", [msg("a2", k="a"), msg("b2", k="b")])
    assert [(b.documents[0].data, b.state.value) for b in browse_all(qs, tenant, "lv")] == [
        ("a1", "in_flight"), ("b1", "in_flight"), ("c1", "in_flight"), ("a2", "ready"), ("b2", "ready")]
    assert superseded(qs, tenant) == 0, "nothing in flight is replaced"
    assert qs.ack(tenant, "lv", receipts=[a1.receipt]) == 1, "a superseded delivery can still be acked"
    result = qs.nack(tenant, "lv", receipts=[b1.receipt, c1.receipt])
    assert (result.requeued, result.dead_lettered) == (1, 0), "b1 is dropped, c1 (nothing newer) comes back"
    assert superseded(qs, tenant) == 1
    wait_until(lambda: qs.sweep(tenant) >= 0 and qs.get_queue(tenant, "lv").scheduled == 0, 5, "the redelivery")
    got = qs.get(tenant, "lv", max_messages=10)
    assert sorted(d.documents[0].data for d in got) == ["a2", "b2", "c1"]
    assert dead_all(qs, tenant, "lv") == []
    assert_audit_clean(qs.client, tenant)


def test_a_superseded_delivery_that_times_out_or_is_released_is_dropped(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True, last_value_key="k", ack_timeout_s=0.2)
    qs.send(tenant, "lv", [msg("t1", k="t"), msg("r1", k="r")])
    t1, r1 = qs.get(tenant, "lv", max_messages=2)
    qs.send(tenant, "lv", [msg("t2", k="t"), msg("r2", k="r")])
    assert qs.release(tenant, "lv", receipts=[r1.receipt]) == 1
    wait_until(lambda: qs.sweep(tenant) >= 0 and qs.get_queue(tenant, "lv").in_flight == 0, 5, "the ack time-out")
    assert values(qs, tenant) == [("t", "t2"), ("r", "r2")]
    assert superseded(qs, tenant) == 2
    assert_audit_clean(qs.client, tenant)


def test_a_scheduled_redelivery_is_replaced_like_a_ready_message(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True, last_value_key="k", max_redeliveries=5)
    qs.send(tenant, "lv", [msg("old", k="a")])
    (old,) = qs.get(tenant, "lv")
    qs.nack(tenant, "lv", receipts=[old.receipt])
    assert qs.get_queue(tenant, "lv").scheduled == 1
    qs.send(tenant, "lv", [msg("new", k="a")])
    assert values(qs, tenant) == [("a", "new")]
    assert qs.get_queue(tenant, "lv").scheduled == 0
    assert_audit_clean(qs.client, tenant)


def test_a_resent_dead_letter_replaces_the_waiting_one_of_its_key(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True, last_value_key="k", max_redeliveries=0)
    (dead_id,) = qs.send(tenant, "lv", [msg("dead", k="a")])
    (d,) = qs.get(tenant, "lv")
    assert qs.nack(tenant, "lv", receipts=[d.receipt]).dead_lettered == 1
    qs.send(tenant, "lv", [msg("waiting", k="a")])
    assert values(qs, tenant) == [("a", "waiting")], "a dead letter is not waiting: nothing replaced"
    assert qs.resend_dead_letters(tenant, "lv", ids=[dead_id]) == 1
    assert values(qs, tenant) == [("a", "dead")]
    assert superseded(qs, tenant) == 1
    assert_audit_clean(qs.client, tenant)


def test_last_value_is_for_point_to_point_queues(qs: QueueServer, tenant: str) -> None:
    for settings in ({"last_value": True}, {"last_value_key": "k"}):
        with pytest.raises(InvalidInput) as err:
            qs.put_queue(tenant, "ps", "publish_subscribe", **settings)
        assert err.value.details["field"] == next(iter(settings))
    qs.put_queue(tenant, "lv", P2P, last_value=True)
    with pytest.raises(InvalidInput) as err:
        qs.put_queue(tenant, "lv", "publish_subscribe")
    assert err.value.details["field"] == "last_value", "an empty queue's model changes, but not into this"
    info, _ = qs.put_queue(tenant, "lv", "publish_subscribe", last_value=False)
    assert info.model.value == "publish_subscribe" and not info.last_value
    for field, value in (("last_value", "yes"), ("last_value_key", 5), ("last_value_key", "k" * 257)):
        with pytest.raises(InvalidInput) as err:
            qs.put_queue(tenant, "q2", P2P, **{field: value})
        assert err.value.details["field"] == field


def test_a_publish_reaches_a_last_value_queue_as_a_send_does(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "lv", P2P, last_value=True, topics=["boomi/checkpoint/>"])
    qs.put_queue(tenant, "log", P2P, topics=["boomi/checkpoint/>"])
    for i in range(3):
        qs.publish(tenant, "boomi/checkpoint/echo-service", [msg(f"offset {i}")])
    assert [b.documents[0].data for b in browse_all(qs, tenant, "lv")] == ["offset 2"]
    assert [b.documents[0].data for b in browse_all(qs, tenant, "log")] == ["offset 0", "offset 1", "offset 2"]
    assert_audit_clean(qs.client, tenant)
