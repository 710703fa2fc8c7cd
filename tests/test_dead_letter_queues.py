"""Dead letters moved to another queue (a queue's ``dead_letter_queue``): a message that would be
dead-lettered moves, in the script that fails it, into the target as an ordinary message with
its reason; queues without the setting keep their own dead letters. On Valkey, the cluster and
fakeredis."""

from __future__ import annotations

import pytest

from atomq.errors import InvalidInput
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from support.queues import browse_all, counts, dead_all, msg
from support.waiting import wait_until


def grouped(text: str, group: str) -> OutgoingMessage:
    return OutgoingMessage(documents=(OutgoingDocument(text),), group=group)


def test_a_message_nacked_past_its_redeliveries_lands_in_the_target_once_with_its_reason(
        qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point")
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=2, dead_letter_queue="dlq")
    [sent] = qs.send(tenant, "work", [msg("job", kind="a")])
    for n in range(3):
        got = qs.get(tenant, "work", wait_ms=5000)
        assert [m.id for m in got] == [sent] and got[0].delivery_count == n + 1
        result = qs.nack(tenant, "work", receipts=[got[0].receipt], reason="bad input")
        assert (result.requeued, result.dead_lettered) == ((1, 0) if n < 2 else (0, 1))
    assert counts(qs, tenant, "work") == (0, 0, 0), "the source keeps no dead letter"
    assert qs.get_queue(tenant, "work").totals["dead_lettered"] == 1
    [moved] = qs.get(tenant, "dlq", max_messages=10)
    assert moved.id == sent and moved.delivery_count == 1, "an ordinary message of the target, delivered afresh"
    assert moved.documents[0].data == "job"
    assert moved.properties == {"kind": "a", "dead_letter_reason": "bad input", "dead_letter_source": "work",
                                "dead_letter_delivery_count": 3}
    qs.ack(tenant, "dlq", receipts=[moved.receipt])
    assert counts(qs, tenant, "dlq") == (0, 0, 0)
    assert qs.get(tenant, "dlq") == [] and qs.get(tenant, "work") == []


def test_an_ack_time_out_past_the_limit_moves_the_message_with_its_priority(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point")
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, ack_timeout_s=0.05, dead_letter_queue="dlq")
    qs.send(tenant, "work", [OutgoingMessage(documents=(OutgoingDocument("urgent"),), priority=8), msg("plain")])
    assert len(qs.get(tenant, "work", max_messages=2)) == 2
    # The deadlines pass; the get that finds them failed moves both, in the same script.
    wait_until(lambda: not qs.get(tenant, "work") and qs.get_queue(tenant, "dlq").depth == 2, 5, "the moves")
    got = qs.get(tenant, "dlq", max_messages=10)
    assert [(m.documents[0].data, m.envelope.priority) for m in got] == [("urgent", 8), ("plain", 4)]
    assert {m.properties["dead_letter_reason"] for m in got} == {"ack timeout"}
    assert counts(qs, tenant, "work") == (0, 0, 0)


def test_queues_without_the_setting_keep_their_own_dead_letters(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point")
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, dead_letter_queue="dlq")
    qs.put_queue(tenant, "work", "point_to_point", dead_letter_queue="")
    assert qs.get_queue(tenant, "work").dead_letter_queue == ""
    qs.send(tenant, "work", [msg("x")])
    qs.nack(tenant, "work", [qs.get(tenant, "work")[0].id], reason="no")
    assert [m.reason for m in dead_all(qs, tenant, "work")] == ["no"]
    assert counts(qs, tenant, "dlq") == (0, 0, 0)


def test_the_setting_names_another_point_to_point_queue_of_the_tenant(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "work", "point_to_point")
    qs.put_queue(tenant, "fanout", "publish_subscribe")
    qs.put_queue(tenant, "latest", "point_to_point", last_value=True)
    for target, words in (("work", "itself"), ("missing", "does not exist"), ("fanout", "publish/subscribe"),
                          ("latest", "last-value"), ("no/such", "must start")):
        with pytest.raises(InvalidInput) as refused:
            qs.put_queue(tenant, "work", "point_to_point", dead_letter_queue=target)
        assert refused.value.details["field"] == "dead_letter_queue" and words in refused.value.message
    assert qs.get_queue(tenant, "work").dead_letter_queue == "", "a refused setting changes nothing"
    other = f"{tenant[:-1]}x" if tenant[-1] != "x" else f"{tenant[:-1]}y"
    qs.put_queue(other, "theirs", "point_to_point")
    with pytest.raises(InvalidInput, match="does not exist"):
        qs.put_queue(tenant, "work", "point_to_point", dead_letter_queue="theirs")


def test_a_full_target_leaves_the_dead_letter_in_the_source_and_loses_nothing(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point", max_messages=1)
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, dead_letter_queue="dlq")
    ids = qs.send(tenant, "work", [msg("a"), msg("b")])
    got = qs.get(tenant, "work", max_messages=2)
    result = qs.nack(tenant, "work", [m.id for m in got], reason="failed")
    assert result.dead_lettered == 2
    assert [m.id for m in browse_all(qs, tenant, "dlq")] == [ids[0]], "the target took what it had room for"
    assert [(m.id, m.reason) for m in dead_all(qs, tenant, "work")] == [(ids[1], "failed")]
    assert qs.resend_dead_letters(tenant, "work", all=True) == 1, "resent from the source's own dead letters"
    assert [m.id for m in qs.get(tenant, "work")] == [ids[1]]


def test_a_target_over_max_bytes_or_max_message_bytes_takes_nothing(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point", max_message_bytes=40)
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, dead_letter_queue="dlq")
    qs.send(tenant, "work", [msg("x" * 10)])
    qs.nack(tenant, "work", [qs.get(tenant, "work")[0].id])
    assert counts(qs, tenant, "dlq") == (0, 0, 0), "with the record of its move it passes max_message_bytes"
    assert len(dead_all(qs, tenant, "work")) == 1


def test_a_target_deleted_later_leaves_the_dead_letters_in_the_source(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point")
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, dead_letter_queue="dlq")
    qs.delete_queue(tenant, "dlq")
    assert qs.get_queue(tenant, "work").dead_letter_queue == "dlq", "the setting stays"
    qs.send(tenant, "work", [msg("a")])
    qs.nack(tenant, "work", [qs.get(tenant, "work")[0].id], reason="r1")
    assert [m.reason for m in dead_all(qs, tenant, "work")] == ["r1"]
    qs.put_queue(tenant, "dlq", "point_to_point")
    qs.send(tenant, "work", [msg("b")])
    qs.nack(tenant, "work", [qs.get(tenant, "work")[0].id], reason="r2")
    assert [m.properties["dead_letter_reason"] for m in browse_all(qs, tenant, "dlq")] == ["r2"], "made again: moves"


def test_a_cycle_passes_a_message_on_only_when_it_fails_again(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "a", "point_to_point")
    qs.put_queue(tenant, "b", "point_to_point", max_redeliveries=0, dead_letter_queue="a")
    qs.put_queue(tenant, "a", "point_to_point", max_redeliveries=0, dead_letter_queue="b")
    [sent] = qs.send(tenant, "a", [msg("ping", owner="me")])
    for here, there in (("a", "b"), ("b", "a"), ("a", "b")):
        [got] = qs.get(tenant, here)
        assert got.id == sent and got.delivery_count == 1
        qs.nack(tenant, here, [got.id], reason=f"failed in {here}")
        assert counts(qs, tenant, here) == (0, 0, 0) and counts(qs, tenant, there) == (1, 0, 0)
    [last] = browse_all(qs, tenant, "b")
    assert last.properties == {"owner": "me", "dead_letter_reason": "failed in a", "dead_letter_source": "a",
                               "dead_letter_delivery_count": 1}, "only the newest move's record"


def test_an_expired_message_moves_without_an_expiry_so_expiry_cannot_cycle(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "b", "point_to_point", message_ttl_s=0.05)
    qs.put_queue(tenant, "a", "point_to_point", message_ttl_s=0.05, dead_letter_queue="b")
    qs.put_queue(tenant, "b", "point_to_point", dead_letter_queue="a")
    qs.send(tenant, "a", [msg("brief")])
    wait_until(lambda: qs.maintain(tenant) is not None and qs.get_queue(tenant, "b").depth == 1, 5, "the expiry")
    qs.maintain(tenant)
    [moved] = browse_all(qs, tenant, "b")
    assert moved.envelope.expires_at is None and moved.properties["dead_letter_reason"] == "expired"
    assert counts(qs, tenant, "a") == (0, 0, 0)


def test_a_failure_move_takes_the_targets_time_to_live_from_its_arrival(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point", message_ttl_s=3600)
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, dead_letter_queue="dlq")
    qs.send(tenant, "work", [OutgoingMessage(documents=(OutgoingDocument("x"),), ttl_s=1000)])
    before = qs.get(tenant, "work")[0].enqueued_at
    qs.nack(tenant, "work", [qs.browse(tenant, "work").items[0].id])
    [moved] = browse_all(qs, tenant, "dlq")
    assert moved.envelope.expires_at is not None and moved.envelope.expires_at > before + 3000


def test_a_subscribers_dead_letters_move_named_by_queue_and_subscriber(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point")
    qs.put_queue(tenant, "events", "publish_subscribe", max_redeliveries=0, dead_letter_queue="dlq")
    qs.put_subscriber(tenant, "events", "billing")
    qs.put_subscriber(tenant, "events", "audit")
    qs.send(tenant, "events", [msg("e")])
    qs.nack(tenant, "events", [qs.get(tenant, "events", subscriber="billing")[0].id], subscriber="billing")
    [moved] = browse_all(qs, tenant, "dlq")
    assert moved.properties["dead_letter_source"] == "events/billing"
    assert qs.get(tenant, "events", subscriber="audit")[0].id == moved.id, "the other subscriber's copy stays"


def test_a_target_that_holds_the_same_message_leaves_it_in_the_source(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "dlq", "point_to_point", topics=["orders.*"])
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0, dead_letter_queue="dlq", topics=["orders.*"])
    qs.publish(tenant, "orders.new", [msg("o")])
    qs.nack(tenant, "work", [qs.get(tenant, "work")[0].id], reason="dup")
    assert [m.reason for m in dead_all(qs, tenant, "work")] == ["dup"]
    assert counts(qs, tenant, "dlq") == (1, 0, 0)


def test_a_setting_changed_through_another_server_is_followed_at_once(qs: QueueServer, tenant: str) -> None:
    """Each server caches a queue's setting; the scripts check it, so a stale cache costs a retry."""
    other = QueueServer(qs.client, qs.settings)
    for name in ("dlq1", "dlq2"):
        qs.put_queue(tenant, name, "point_to_point")
    qs.put_queue(tenant, "work", "point_to_point", max_redeliveries=0)
    qs.send(tenant, "work", [msg("1"), msg("2"), msg("3"), msg("4")])
    qs.nack(tenant, "work", [qs.get(tenant, "work", max_messages=1)[0].id])  # caches "none"
    other.put_queue(tenant, "work", "point_to_point", dead_letter_queue="dlq1")
    qs.nack(tenant, "work", [qs.get(tenant, "work", max_messages=1)[0].id])
    other.put_queue(tenant, "work", "point_to_point", dead_letter_queue="dlq2")
    got = qs.take(tenant, "work", max_messages=1)  # a get reads the setting too
    qs.nack(tenant, "work", [got.deliveries[0].id])
    held = qs.take(tenant, "work", max_messages=1).deliveries
    other.put_queue(tenant, "work", "point_to_point", dead_letter_queue="dlq1")
    # A get that acks first: both scripts of its round trip are stale, and run again.
    again = qs.take(tenant, "work", max_messages=1, ack_ids=[held[0].id])
    assert again.acked == 1 and again.deliveries == []
    assert [len(dead_all(qs, tenant, "work"))] + [qs.get_queue(tenant, n).depth for n in ("dlq1", "dlq2")] == [1, 1, 1]


def test_groups_hold_across_a_move_out_of_and_into_queues_ordered_by_group(qs: QueueServer, tenant: str) -> None:
    """A group's head that moves out makes way for its next; one that lands where its group has a
    message out waits behind it."""
    qs.put_queue(tenant, "dlq", "point_to_point", ordering="group")
    qs.put_queue(tenant, "work", "point_to_point", ordering="group", max_redeliveries=0, dead_letter_queue="dlq")
    first, second = qs.send(tenant, "work", [grouped("a1", "acct"), grouped("a2", "acct")])
    [head] = qs.get(tenant, "work", max_messages=10)
    assert head.id == first, "one of a group out at a time"
    qs.nack(tenant, "work", [first], reason="bad")
    [then] = qs.get(tenant, "work")
    assert then.id == second, "the group's next goes out once its head moved away"
    [in_dlq] = qs.get(tenant, "dlq")
    assert in_dlq.id == first and in_dlq.envelope.group == "acct"
    qs.nack(tenant, "work", [second], reason="bad too")  # lands behind its group's head, out in dlq
    assert qs.get(tenant, "dlq") == []
    qs.ack(tenant, "dlq", [first])
    assert [m.id for m in qs.get(tenant, "dlq")] == [second]
