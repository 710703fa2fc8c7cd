"""The queue server's semantics, on the real Valkey and on fakeredis.

The fast schedule of the ``qs`` fixture redelivers after 0.05, 0.1 and
0.15 s (the last repeating); blocking gets wait for due redeliveries, so no
test sleeps to let one happen.
"""

from __future__ import annotations

import time

import pytest
import redis

from atomq.errors import Conflict, InvalidInput, NotFound, StorageError, TooLarge
from atomq.platform import DeadLetterReasons, MessageState, OutgoingDocument, OutgoingMessage, QueueServer, ReasonCount
from atomq.platform.queues import management
from atomq.platform.watch.audit import audit_tenant
from support.queues import msg

P2P = "point_to_point"
PUBSUB = "publish_subscribe"


def texts(deliveries: list) -> list:
    return [d.documents[0].data for d in deliveries]


@pytest.fixture
def queue(qs: QueueServer, tenant: str) -> str:
    qs.put_queue(tenant, "orders", P2P, max_redeliveries=3, ack_timeout_s=30)
    return "orders"


def test_send_get_ack_round_trip_keeps_documents_and_properties(qs, tenant, queue, backend) -> None:
    doc = OutgoingDocument(b"\x00\xffbinary", {"filename": "a.bin"})
    ids = qs.send(tenant, queue, [OutgoingMessage(documents=(OutgoingDocument("text é"), doc),
                                                  properties={"k": "v"}, priority=4, traceparent="00-ab-cd-01")])
    (d,) = qs.get(tenant, queue, max_messages=10)
    assert d.id == ids[0]
    assert d.delivery_count == 1 and not d.redelivered
    assert d.properties == {"k": "v"}
    assert d.envelope.priority == 4 and d.envelope.traceparent == "00-ab-cd-01" and d.envelope.version == 1
    assert [x.data for x in d.documents] == ["text é", b"\x00\xffbinary"]
    assert [x.properties for x in d.documents] == [{}, {"filename": "a.bin"}]
    assert d.enqueued_at > 1.7e9
    assert qs.get_queue(tenant, queue).in_flight == 1
    assert qs.ack(tenant, queue, ids=[d.id]) == 1
    assert qs.ack(tenant, queue, ids=[d.id]) == 0
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.in_flight, info.dead_letters) == (0, 0, 0)
    assert audit_tenant(backend, tenant) == []
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 0, "acked documents are freed"


def test_a_get_acks_the_previous_batch_first_and_says_how_many(qs, tenant, queue, backend) -> None:
    """A consumer loop: each get acks the batch before it, in the same round trip to the store."""
    qs.send(tenant, queue, [msg(f"m{i}") for i in range(25)])
    first = qs.take(tenant, queue, max_messages=10)
    assert first.acked is None, "a get given nothing to ack does not say it acked"
    second = qs.take(tenant, queue, max_messages=10, ack_receipts=[d.receipt for d in first.deliveries])
    assert (second.acked, texts(second.deliveries)) == (10, [f"m{i}" for i in range(10, 20)])
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.in_flight, info.totals["acked"]) == (5, 10, 10)
    third = qs.take(tenant, queue, max_messages=10, ack_ids=[d.id for d in second.deliveries])
    assert (third.acked, texts(third.deliveries)) == (10, [f"m{i}" for i in range(20, 25)])
    # Receipts of deliveries already acked ack nothing; the get still delivers (here: nothing is left).
    again = qs.take(tenant, queue, max_messages=10, ack_receipts=[d.receipt for d in first.deliveries])
    assert (again.acked, again.deliveries) == (0, [])
    last = qs.take(tenant, queue, ack_receipts=[d.receipt for d in third.deliveries])
    assert (last.acked, last.deliveries) == (5, [])
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.in_flight, info.totals["acked"]) == (0, 0, 25)
    assert audit_tenant(backend, tenant) == []


def test_a_new_subscribers_first_get_may_carry_an_ack_of_nothing(qs, tenant) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    taken = qs.take(tenant, "news", subscriber="fresh", ack_ids=["1-1"])
    assert (taken.acked, taken.deliveries) == (0, [])
    qs.send(tenant, "news", [msg("n")])
    (d,) = qs.take(tenant, "news", subscriber="fresh").deliveries
    assert qs.take(tenant, "news", subscriber="fresh", ack_receipts=[d.receipt]).acked == 1


def test_what_a_get_took_goes_back_when_its_ack_failed(qs, tenant, queue, monkeypatch) -> None:
    """The store failed the ack but not the get (between the two scripts of its round trip): the
    caller gets the error, and what the get took is ready again at once, as a redelivery."""
    qs.send(tenant, queue, [msg("a"), msg("b")])
    real = qs.storage.run_together

    def ack_fails(calls):
        return [StorageError("Redis failed: the ack's connection dropped"), real(calls)[1]]

    monkeypatch.setattr(qs.storage, "run_together", ack_fails)
    with pytest.raises(StorageError):
        qs.take(tenant, queue, ack_ids=["1-1"])
    monkeypatch.undo()
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.in_flight) == (2, 0)
    again = qs.take(tenant, queue).deliveries
    assert texts(again) == ["a", "b"] and [d.delivery_count for d in again] == [2, 2]


def test_a_get_whose_ack_is_refused_takes_nothing(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("a")])
    with pytest.raises(InvalidInput) as bad:
        qs.take(tenant, queue, ack_receipts=["not a receipt"])
    assert bad.value.details["field"] == "ack.receipts"
    with pytest.raises(InvalidInput) as both:
        qs.take(tenant, queue, ack_ids=["x"], ack_receipts=["x~1"])
    assert both.value.details["field"] == "ack.ids"
    with pytest.raises(NotFound):
        qs.take(tenant, "no-such-queue", ack_ids=["x"])
    assert qs.get_queue(tenant, queue).in_flight == 0


def test_get_returns_messages_in_send_order_and_at_most_max(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg(f"m{i}") for i in range(25)])
    first = qs.get(tenant, queue, max_messages=10)
    second = qs.get(tenant, queue, max_messages=100)
    assert texts(first) == [f"m{i}" for i in range(10)]
    assert texts(second) == [f"m{i}" for i in range(10, 25)]
    assert qs.get(tenant, queue) == []


def test_a_batch_is_stored_whole_or_not_at_all(qs, tenant, queue) -> None:
    bad = [msg("ok"), OutgoingMessage(documents=())]
    with pytest.raises(InvalidInput) as err:
        qs.send(tenant, queue, bad)
    assert err.value.details["field"] == "messages.1.documents"
    too_big = [msg("ok"), msg("x" * (qs.settings.max_document_bytes + 1))]
    with pytest.raises(TooLarge):
        qs.send(tenant, queue, too_big)
    assert qs.get_queue(tenant, queue).depth == 0


def test_repeated_dedupe_id_stores_nothing_and_returns_the_original_id(qs, tenant, queue) -> None:
    first = qs.send(tenant, queue, [msg("a", dedupe_id="order-1"), msg("b", dedupe_id="order-1"), msg("c")])
    assert first[0] == first[1] != first[2]
    again = qs.send(tenant, queue, [msg("a2", dedupe_id="order-1")])
    assert again == [first[0]]
    assert texts(qs.get(tenant, queue, max_messages=10)) == ["a", "c"]


def test_dedupe_ids_are_per_queue(qs, tenant, queue) -> None:
    qs.put_queue(tenant, "other", P2P)
    a = qs.send(tenant, queue, [msg("a", dedupe_id="x")])
    b = qs.send(tenant, "other", [msg("b", dedupe_id="x")])
    assert a != b


def test_dedupe_marker_of_a_deleted_queue_does_not_survive_recreation(qs, tenant, queue) -> None:
    old = qs.send(tenant, queue, [msg("a", dedupe_id="x")])
    qs.delete_queue(tenant, queue)
    qs.put_queue(tenant, queue, P2P)
    new = qs.send(tenant, queue, [msg("a", dedupe_id="x")])
    assert new != old
    assert texts(qs.get(tenant, queue)) == ["a"]


def test_failed_delivery_k_waits_delay_k_and_the_last_delay_repeats(qs, tenant) -> None:
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=4)
    (msg_id,) = qs.send(tenant, "jobs", [msg("poison")])
    expected_delays = [0.05, 0.1, 0.15, 0.15]
    (d,) = qs.get(tenant, "jobs")
    for failure in range(1, 5):
        nacked_at = time.monotonic()  # before the call: the script's clock sets the due time after it
        assert qs.nack(tenant, "jobs", receipts=[d.receipt], reason=f"failure {failure}").requeued == 1
        (waiting,) = qs.browse(tenant, "jobs").items
        # Scheduled until its delay is over (then browsed as ready): surely so if the browse answered
        # before the delay, counted from before the nack, was over.
        if time.monotonic() - nacked_at < expected_delays[failure - 1] - 0.005:
            assert waiting.state == MessageState.SCHEDULED
        assert waiting.failed_deliveries == failure and waiting.state != MessageState.IN_FLIGHT
        (d,) = qs.get(tenant, "jobs", wait_ms=5000)
        waited = time.monotonic() - nacked_at
        assert waited >= expected_delays[failure - 1] - 0.005
        assert (d.id, d.delivery_count, d.redelivered) == (msg_id, failure + 1, True)
    result = qs.nack(tenant, "jobs", receipts=[d.receipt], reason="gave up")
    assert (result.requeued, result.dead_lettered) == (0, 1)
    info = qs.get_queue(tenant, "jobs")
    assert (info.depth, info.in_flight, info.dead_letters) == (0, 0, 1)
    (dead,) = qs.dead_letters(tenant, "jobs").items
    assert (dead.id, dead.reason, dead.failed_deliveries, dead.delivery_count) == (msg_id, "gave up", 5, 5)
    assert dead.documents[0].data == "poison"
    assert dead.dead_lettered_at >= dead.enqueued_at
    assert qs.get(tenant, "jobs", wait_ms=300) == []


def test_ack_timeout_is_a_failed_delivery(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "slow", P2P, max_redeliveries=1, ack_timeout_s=0.1)
    (msg_id,) = qs.send(tenant, "slow", [msg("m")])
    (d1,) = qs.get(tenant, "slow")
    taken = time.monotonic()
    (d2,) = qs.get(tenant, "slow", wait_ms=5000)
    assert time.monotonic() - taken >= 0.1 + 0.05 - 0.01, "ack time-out, then the first delay"
    assert (d2.id, d2.delivery_count, d2.redelivered) == (msg_id, 2, True)
    assert qs.ack(tenant, "slow", receipts=[d1.receipt]) == 0, "stale receipt"
    while qs.get_queue(tenant, "slow").dead_letters == 0:
        assert qs.get(tenant, "slow", wait_ms=1000) == []
    (dead,) = qs.dead_letters(tenant, "slow").items
    assert (dead.reason, dead.failed_deliveries) == ("ack timeout", 2)
    assert audit_tenant(backend, tenant) == []


def test_a_delivery_past_its_deadline_cannot_be_acked(qs, tenant) -> None:
    qs.put_queue(tenant, "slow", P2P, ack_timeout_s=0.05)
    qs.send(tenant, "slow", [msg("m")])
    (d,) = qs.get(tenant, "slow")
    deadline = time.monotonic() + 0.06
    while time.monotonic() < deadline:
        pass
    assert qs.ack(tenant, "slow", ids=[d.id]) == 0
    # A failed delivery, waiting out its delay (browsed as ready once the delay is over: a loaded
    # machine may take that long between the two calls), never acked.
    (waiting,) = qs.browse(tenant, "slow").items
    assert waiting.failed_deliveries == 1
    assert waiting.state in (MessageState.SCHEDULED, MessageState.READY)


def test_extend_moves_the_deadline(qs, tenant) -> None:
    qs.put_queue(tenant, "slow", P2P, ack_timeout_s=0.5)
    qs.send(tenant, "slow", [msg("m")])
    (d,) = qs.get(tenant, "slow")
    assert qs.extend(tenant, "slow", receipts=[d.receipt], seconds=30) == 1
    assert qs.get(tenant, "slow", wait_ms=1000) == [], "no time-out within the extension"
    assert qs.ack(tenant, "slow", receipts=[d.receipt]) == 1


def test_stale_receipts_change_nothing(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("m")])
    (first,) = qs.get(tenant, queue)
    qs.nack(tenant, queue, receipts=[first.receipt])
    (second,) = qs.get(tenant, queue, wait_ms=5000)
    assert qs.ack(tenant, queue, receipts=[first.receipt]) == 0
    assert qs.nack(tenant, queue, receipts=[first.receipt]).requeued == 0
    assert qs.extend(tenant, queue, receipts=[first.receipt], seconds=5) == 0
    assert qs.ack(tenant, queue, receipts=["1-000000000001~1", f"{second.id}~9"]) == 0, "unknown deliveries"
    for malformed in ("garbage", "x~1", f"{second.id}~0{second.delivery_count}", f"{second.id}~"):
        with pytest.raises(InvalidInput) as err:
            qs.ack(tenant, queue, receipts=[malformed])
        assert err.value.details["field"] == "receipts"
    assert qs.get_queue(tenant, queue).in_flight == 1
    assert qs.ack(tenant, queue, receipts=[second.receipt]) == 1


def test_blocking_get_wakes_on_a_send(qs, tenant, queue, backend) -> None:
    import threading

    got: list = []
    t = threading.Thread(target=lambda: got.extend(qs.get(tenant, queue, wait_ms=10_000)))
    t.start()
    qs.send(tenant, queue, [msg("wake")])
    t.join(timeout=10)
    assert texts(got) == ["wake"]


def test_blocking_get_returns_empty_after_its_wait(qs, tenant, queue) -> None:
    start = time.monotonic()
    assert qs.get(tenant, queue, wait_ms=200) == []
    assert time.monotonic() - start >= 0.19


def test_publish_subscribe_fans_out_to_subscribers_existing_at_send_time(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.send(tenant, "news", [msg("before anyone")])
    assert qs.put_subscriber(tenant, "news", "a") is True
    assert qs.put_subscriber(tenant, "news", "a") is False
    assert qs.get(tenant, "news", subscriber="b") == [], "the first get creates b"
    (msg_id,) = qs.send(tenant, "news", [msg("hello")])
    qs.put_subscriber(tenant, "news", "late")
    info = qs.get_queue(tenant, "news")
    assert sorted(info.subscribers) == ["a", "b", "late"]
    assert (info.subscribers["a"].depth, info.subscribers["b"].depth, info.subscribers["late"].depth) == (1, 1, 0)
    assert info.depth == 2
    (da,) = qs.get(tenant, "news", subscriber="a")
    (db,) = qs.get(tenant, "news", subscriber="b")
    assert da.id == db.id == msg_id and texts([da, db]) == ["hello", "hello"]
    assert qs.get(tenant, "news", subscriber="late") == []
    assert qs.ack(tenant, "news", ids=[msg_id], subscriber="a") == 1
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 1, "b still refers to the document"
    assert qs.nack(tenant, "news", ids=[msg_id], subscriber="b").requeued == 1
    (again,) = qs.get(tenant, "news", subscriber="b", wait_ms=5000)
    assert again.delivery_count == 2
    assert qs.get(tenant, "news", subscriber="a") == []
    qs.ack(tenant, "news", ids=[msg_id], subscriber="b")
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 0
    assert audit_tenant(backend, tenant) == []


def test_publish_subscribe_with_no_subscriber_stores_nothing(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    assert len(qs.send(tenant, "news", [msg("void")])) == 1
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 0


def test_deleting_a_subscriber_removes_its_messages_and_stops_fan_out(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.put_subscriber(tenant, "news", "b")
    qs.send(tenant, "news", [msg("1"), msg("2")])
    qs.delete_subscriber(tenant, "news", "a")
    qs.send(tenant, "news", [msg("3")])
    assert list(qs.get_queue(tenant, "news").subscribers) == ["b"]
    assert texts(qs.get(tenant, "news", subscriber="b", max_messages=10)) == ["1", "2", "3"]
    with pytest.raises(NotFound):
        qs.delete_subscriber(tenant, "news", "a")
    assert audit_tenant(backend, tenant) == []
    assert not backend.keys(f"aq:{{{tenant}}}:q:news:s:a:*")


def test_subscriber_rules(qs, tenant, queue) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    with pytest.raises(InvalidInput, match="subscriber is required"):
        qs.get(tenant, "news")
    with pytest.raises(InvalidInput, match="point-to-point queue has no subscribers"):
        qs.get(tenant, queue, subscriber="a")
    with pytest.raises(InvalidInput, match="point-to-point queue has no subscribers"):
        qs.put_subscriber(tenant, queue, "a")
    with pytest.raises(InvalidInput):
        qs.get(tenant, "news", subscriber="{evil}")


def test_browse_shows_states_without_consuming_and_pages_with_a_cursor(qs, tenant, queue) -> None:
    ids = qs.send(tenant, queue, [msg(f"m{i}") for i in range(7)])
    taken = qs.get(tenant, queue, max_messages=2)
    qs.nack(tenant, queue, ids=[taken[1].id])
    seen, cursor, pages = [], None, 0
    while True:
        page = qs.browse(tenant, queue, limit=3, after=cursor)
        seen += page.items
        pages += 1
        if page.next is None:
            break
        cursor = page.next
    assert pages == 3
    assert [m.id for m in seen] == ids
    states = [m.state for m in seen]
    assert states == [MessageState.IN_FLIGHT, MessageState.SCHEDULED] + [MessageState.READY] * 5
    assert qs.get_queue(tenant, queue).depth == 6, "browsing consumed nothing"


def test_delete_selected_and_all_messages(qs, tenant, queue, backend) -> None:
    ids = [i for n in range(2) for i in qs.send(tenant, queue, [msg(f"m{n}.{i}") for i in range(600)])]
    qs.get(tenant, queue, max_messages=3)
    assert qs.delete_messages(tenant, queue, ids=[ids[0], ids[5], "1-000000000000"]) == 2
    assert qs.get_queue(tenant, queue).depth + qs.get_queue(tenant, queue).in_flight == 1198
    assert qs.delete_messages(tenant, queue, all=True) == 1198, "in bounded chunks"
    info = qs.get_queue(tenant, queue)
    assert (info.depth, info.in_flight) == (0, 0)
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 0
    assert audit_tenant(backend, tenant) == []


def test_dead_letter_management(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=0)
    ids = qs.send(tenant, "jobs", [msg(f"m{i}") for i in range(5)])
    for d in qs.get(tenant, "jobs", max_messages=5):
        assert qs.nack(tenant, "jobs", receipts=[d.receipt], reason="bad").dead_lettered == 1
    page = qs.dead_letters(tenant, "jobs", limit=2)
    assert [m.id for m in page.items] == ids[:2] and page.next
    assert [m.id for m in qs.dead_letters(tenant, "jobs", limit=10, after=page.next).items] == ids[2:]
    assert qs.browse(tenant, "jobs").items == [], "dead letters are not queued messages"
    assert qs.delete_messages(tenant, "jobs", all=True) == 0

    assert qs.resend_dead_letters(tenant, "jobs", ids=[ids[0]]) == 1
    (d,) = qs.get(tenant, "jobs")
    assert (d.id, d.delivery_count, d.redelivered) == (ids[0], 2, True)
    assert qs.nack(tenant, "jobs", ids=[d.id]).dead_lettered == 1, "a fresh budget of max_redeliveries=0"
    assert qs.delete_dead_letters(tenant, "jobs", ids=[ids[1]]) == 1
    assert qs.resend_dead_letters(tenant, "jobs", all=True) == 4
    assert sorted(x.id for x in qs.get(tenant, "jobs", max_messages=10)) == sorted([ids[0]] + ids[2:])
    assert qs.get_queue(tenant, "jobs").dead_letters == 0
    qs.nack(tenant, "jobs", ids=ids)
    assert qs.delete_dead_letters(tenant, "jobs", all=True) == 4
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 0
    assert audit_tenant(backend, tenant) == []


def test_the_reasons_present_in_a_dead_letter_queue_come_with_their_counts(qs, tenant, monkeypatch) -> None:
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=0)
    assert qs.dead_letter_reasons(tenant, "jobs") == DeadLetterReasons(reasons=[], counted=0, complete=True)
    qs.send(tenant, "jobs", [msg(f"m{i}") for i in range(6)])
    got = qs.get(tenant, "jobs", max_messages=6)
    for chosen, reason in ((got[:3], "bad input"), (got[3:5], ""), (got[5:], "a timeout of its own")):
        qs.nack(tenant, "jobs", receipts=[d.receipt for d in chosen], reason=reason)
    every = [ReasonCount("bad input", 3), ReasonCount("nacked", 2), ReasonCount("a timeout of its own", 1)]
    assert qs.dead_letter_reasons(tenant, "jobs") == DeadLetterReasons(every, counted=6, complete=True)

    monkeypatch.setattr(management, "REASONS_SHOWN", 2)
    assert qs.dead_letter_reasons(tenant, "jobs") == DeadLetterReasons(every[:2], counted=6, complete=False)
    monkeypatch.setattr(management, "REASONS_READ", 2)
    newest = [ReasonCount("a timeout of its own", 1), ReasonCount("nacked", 1)]  # a tie goes by reason
    assert qs.dead_letter_reasons(tenant, "jobs") == DeadLetterReasons(newest, counted=2, complete=False)
    monkeypatch.undo()

    assert qs.resend_dead_letters(tenant, "jobs", reason="bad input") == 3
    assert qs.dead_letter_reasons(tenant, "jobs").reasons == every[1:]
    qs.put_queue(tenant, "news", PUBSUB)
    with pytest.raises(InvalidInput, match="subscriber is required"):
        qs.dead_letter_reasons(tenant, "news")
    with pytest.raises(NotFound):
        qs.dead_letter_reasons(tenant, "missing")


def test_resent_dead_letter_gets_the_whole_redelivery_budget_again(qs, tenant) -> None:
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=1)
    (msg_id,) = qs.send(tenant, "jobs", [msg("m")])
    for _ in range(2):
        (d,) = qs.get(tenant, "jobs", wait_ms=5000)
        qs.nack(tenant, "jobs", ids=[d.id])
    assert qs.get_queue(tenant, "jobs").dead_letters == 1
    qs.resend_dead_letters(tenant, "jobs", ids=[msg_id])
    (d,) = qs.get(tenant, "jobs")
    assert d.delivery_count == 3
    assert qs.nack(tenant, "jobs", ids=[d.id]).requeued == 1, "failure 1 of the new budget"
    (d,) = qs.get(tenant, "jobs", wait_ms=5000)
    assert qs.nack(tenant, "jobs", ids=[d.id]).dead_lettered == 1
    assert qs.dead_letters(tenant, "jobs").items[0].failed_deliveries == 2


def test_management_without_subscriber_applies_to_every_subscriber(qs, tenant) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.put_subscriber(tenant, "news", "b")
    qs.send(tenant, "news", [msg("1"), msg("2")])
    with pytest.raises(InvalidInput, match="subscriber is required"):
        qs.browse(tenant, "news")
    assert len(qs.browse(tenant, "news", subscriber="a").items) == 2
    assert qs.delete_messages(tenant, "news", all=True) == 4
    with pytest.raises(NotFound):
        qs.browse(tenant, "news", subscriber="nobody")


def test_delete_queue_removes_everything(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=0)
    qs.send(tenant, "news", [msg("n")])
    qs.send(tenant, "jobs", [msg(f"j{i}") for i in range(600)])
    d = qs.get(tenant, "jobs", max_messages=2)
    qs.nack(tenant, "jobs", ids=[d[0].id])
    qs.delete_queue(tenant, "news")
    qs.delete_queue(tenant, "jobs")
    assert qs.list_queues(tenant) == []
    leftover = sorted(k.decode() for k in backend.keys(f"aq:{{{tenant}}}:*"))
    # The tenant's counters stay, and the sends' records (of no queue), which expire by themselves.
    records = [k for k in leftover if ":req:" in k]
    assert all(0 < backend.pttl(r) <= 300_000 for r in records)
    assert [k for k in leftover if not k.endswith((":seq", ":usage")) and k not in records] == []
    assert qs.usage(tenant) == {"stored_bytes": 0, "messages": 0}
    with pytest.raises(NotFound):
        qs.send(tenant, "jobs", [msg("x")])
    with pytest.raises(NotFound):
        qs.delete_queue(tenant, "jobs")


def test_queue_components_create_update_list_and_conflict(qs, tenant) -> None:
    info, created = qs.put_queue(tenant, "a", P2P)
    assert created and (info.max_redeliveries, info.ack_timeout_s) == (6, 30)
    info, created = qs.put_queue(tenant, "a", P2P, max_redeliveries=2, ack_timeout_s=5)
    assert not created and (info.max_redeliveries, info.ack_timeout_s) == (2, 5)
    qs.put_queue(tenant, "b", PUBSUB)
    assert [q.name for q in qs.list_queues(tenant)] == ["a", "b"]
    qs.put_queue(tenant, "a", PUBSUB)  # empty: the model may change
    qs.send(tenant, "b", [msg("x")])
    qs.put_subscriber(tenant, "b", "s")
    with pytest.raises(Conflict):
        qs.put_queue(tenant, "b", P2P)
    with pytest.raises(InvalidInput, match="model"):
        qs.put_queue(tenant, "c", "fifo")
    with pytest.raises(InvalidInput, match="max_redeliveries"):
        qs.put_queue(tenant, "c", P2P, max_redeliveries=-1)
    with pytest.raises(NotFound):
        qs.get_queue(tenant, "missing")


def test_a_model_change_reroutes_a_cached_send(qs, tenant) -> None:
    qs.put_queue(tenant, "q", PUBSUB)
    qs.send(tenant, "q", [msg("to nobody")])
    other = QueueServer(qs.client, qs.settings)
    other.put_queue(tenant, "q", P2P)
    qs.send(tenant, "q", [msg("to the queue")])
    assert texts(qs.get(tenant, "q")) == ["to the queue"]


def test_unknown_queue_is_not_found_everywhere(qs, tenant) -> None:
    for call in (
        lambda: qs.send(tenant, "nope", [msg("x")]),
        lambda: qs.get(tenant, "nope"),
        lambda: qs.ack(tenant, "nope", ids=["1"]),
        lambda: qs.nack(tenant, "nope", ids=["1"]),
        lambda: qs.browse(tenant, "nope"),
        lambda: qs.dead_letters(tenant, "nope"),
        lambda: qs.delete_messages(tenant, "nope", all=True),
    ):
        with pytest.raises(NotFound, match="'nope' does not exist"):
            call()


def test_tenants_are_isolated(qs, backend) -> None:
    qs.put_queue("t_alice", "shared-name", P2P)
    qs.put_queue("t_bob", "shared-name", P2P)
    (alice_id,) = qs.send("t_alice", "shared-name", [msg("alice secret")])
    assert qs.get("t_bob", "shared-name") == []
    assert qs.ack("t_bob", "shared-name", ids=[alice_id]) == 0
    assert qs.delete_messages("t_bob", "shared-name", ids=[alice_id]) == 0
    assert qs.browse("t_bob", "shared-name").items == []
    assert texts(qs.get("t_alice", "shared-name")) == ["alice secret"]
    for t in ("t_alice", "t_bob"):
        qs.delete_queue(t, "shared-name")


def test_input_rules(qs, tenant, queue) -> None:
    with pytest.raises(InvalidInput, match="max"):
        qs.get(tenant, queue, max_messages=0)
    with pytest.raises(InvalidInput, match="wait_ms"):
        qs.get(tenant, queue, wait_ms=20_001)
    with pytest.raises(InvalidInput, match="either ids or receipts"):
        qs.ack(tenant, queue)
    with pytest.raises(InvalidInput, match="either ids or all"):
        qs.delete_messages(tenant, queue)
    with pytest.raises(TooLarge):
        qs.send(tenant, queue, [msg("x")] * 1001)
    with pytest.raises(InvalidInput, match="dedupe_id"):
        qs.send(tenant, queue, [msg("x", dedupe_id="")])
    with pytest.raises(InvalidInput, match="queue must start"):
        qs.send(tenant, "{other}", [msg("x")])
    with pytest.raises(InvalidInput, match="properties must be JSON") as err:
        qs.send(tenant, queue, [msg("ok"), OutgoingMessage(documents=(OutgoingDocument("x"),), properties={"k": {1, 2}})])
    assert err.value.details["field"] == "messages.1.properties"
    with pytest.raises(InvalidInput, match="properties must be JSON"):
        qs.send(tenant, queue, [OutgoingMessage(documents=(OutgoingDocument("x", {"k": object()}),))])
    assert qs.get_queue(tenant, queue).depth == 0


def test_retention_purge_removes_old_messages_queued_and_dead(backend, tenant) -> None:
    from atomq.platform import QueueSettings

    qs = QueueServer(backend, QueueSettings(redelivery_delays_s=(0.05,), document_retention_s=0.2))
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=0)
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.put_subscriber(tenant, "news", "b")
    qs.send(tenant, "jobs", [msg("old1"), msg("old2"), msg("old3")])
    news = qs.send(tenant, "news", [msg("old news")])
    (d,) = qs.get(tenant, "jobs", max_messages=1)
    qs.nack(tenant, "jobs", ids=[d.id])  # dead
    qs.get(tenant, "jobs", max_messages=1)  # in flight
    keeping = QueueServer(backend, QueueSettings(document_retention_s=3600))
    assert keeping.purge(tenant) == 0, "nothing is an hour old"
    while _age_ms(backend, news[0]) <= 200:  # until Redis's clock says the last of them is past retention
        time.sleep(0.01)
    new = qs.send(tenant, "jobs", [msg("new")])
    assert qs.purge(tenant) == 3 + 2
    info = qs.get_queue(tenant, "jobs")
    assert (info.depth, info.in_flight, info.dead_letters) == (1, 0, 0)
    assert [m.id for m in qs.browse(tenant, "jobs").items] == new
    assert qs.get_queue(tenant, "news").depth == 0
    assert backend.hlen(f"aq:{{{tenant}}}:doc") == 1
    assert audit_tenant(backend, tenant) == []


def _age_ms(client: redis.Redis, msg_id: str) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000 - int(msg_id.split("-")[0])


def test_sweep_fails_expired_deliveries_of_queues_nobody_reads(qs, tenant) -> None:
    qs.put_queue(tenant, "slow", P2P, ack_timeout_s=0.05)
    qs.send(tenant, "slow", [msg("m")])
    qs.get(tenant, "slow")
    moved = 0
    while qs.get_queue(tenant, "slow").in_flight:
        moved += qs.sweep(tenant)
    assert moved == 1
    assert qs.browse(tenant, "slow").items[0].failed_deliveries == 1


def test_the_maintenance_loop_purges_and_sweeps_every_tenant(backend, tenant) -> None:
    import threading

    from atomq.platform import QueueSettings
    from atomq.platform.maintenance import run_maintenance

    qs = QueueServer(backend, QueueSettings(redelivery_delays_s=(0.05,), document_retention_s=0.3))
    tenants = [f"{tenant}-{i}" for i in range(3)]
    for t in tenants:
        qs.put_queue(t, "q", P2P, ack_timeout_s=0.05)
        qs.send(t, "q", [msg("a"), msg("b")])
        qs.get(t, "q", max_messages=1)
    stop = threading.Event()
    loop = threading.Thread(target=run_maintenance, args=(qs, stop, 0.02))
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while any(qs.get_queue(t, "q").depth for t in tenants):
            assert time.monotonic() < deadline, "retention purge did not run"
            time.sleep(0.02)
    finally:
        stop.set()
        loop.join(timeout=5)
    for t in tenants:
        info = qs.get_queue(t, "q")
        assert (info.depth, info.in_flight, info.dead_letters) == (0, 0, 0)
        assert audit_tenant(backend, t) == []
        qs.delete_queue(t, "q")


# -- regressions found in review ---------------------------------------------------------------


def test_repeated_ids_in_one_management_call_count_once(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=0)
    a, b = qs.send(tenant, "jobs", [msg("a"), msg("b")])
    for d in qs.get(tenant, "jobs", max_messages=2):
        qs.nack(tenant, "jobs", ids=[d.id])
    assert qs.resend_dead_letters(tenant, "jobs", ids=[a, a, a]) == 1
    assert audit_tenant(backend, tenant) == []
    assert [d.id for d in qs.get(tenant, "jobs", max_messages=10)] == [a]
    assert qs.delete_dead_letters(tenant, "jobs", ids=[b, b]) == 1
    assert qs.ack(tenant, "jobs", ids=[a, a]) == 1
    assert audit_tenant(backend, tenant) == []


def test_a_stale_receipt_beside_the_current_one_does_not_cancel_it(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("m")])
    (first,) = qs.get(tenant, queue)
    qs.nack(tenant, queue, receipts=[first.receipt])
    (second,) = qs.get(tenant, queue, wait_ms=5000)
    assert qs.ack(tenant, queue, receipts=[first.receipt, second.receipt]) == 1


def test_a_route_cached_before_a_queue_was_recreated_is_not_used(qs, tenant, backend) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "old")
    qs.send(tenant, "news", [msg("cached the route")])
    other = QueueServer(qs.client, qs.settings)
    other.delete_queue(tenant, "news")
    other.put_queue(tenant, "news", PUBSUB)
    other.put_subscriber(tenant, "news", "new")  # the subscriber version is 1 again
    qs.send(tenant, "news", [msg("after")])
    assert texts(qs.get(tenant, "news", subscriber="new")) == ["after"]
    assert list(qs.get_queue(tenant, "news").subscribers) == ["new"]
    assert not backend.keys(f"aq:{{{tenant}}}:q:news:s:old:*")
    assert audit_tenant(backend, tenant) == []


def test_a_subscriber_recreated_during_its_removal_starts_empty_and_keeps_its_messages(
        qs, tenant, backend, monkeypatch) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.put_subscriber(tenant, "news", "b")
    qs.send(tenant, "news", [msg(f"old{i}") for i in range(3)])
    other = QueueServer(qs.client, qs.settings)
    drain = qs._shared.drain
    sent: list[str] = []

    def drain_while_the_listener_polls(*args, **kwargs):
        # A listener keeps polling "a" and a sender keeps sending while the removal drops.
        assert other.get(tenant, "news", subscriber="a") == []
        sent.extend(other.send(tenant, "news", [msg("new")]))
        return drain(*args, **kwargs)

    monkeypatch.setattr(qs._shared, "drain", drain_while_the_listener_polls)
    qs.delete_subscriber(tenant, "news", "a")
    assert [d.id for d in qs.get(tenant, "news", subscriber="a", max_messages=10)] == sent
    assert len(qs.get(tenant, "news", subscriber="b", max_messages=10)) == 4
    assert audit_tenant(backend, tenant) == []


def test_pub_sub_settle_needs_an_existing_subscriber(qs, tenant) -> None:
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    with pytest.raises(InvalidInput, match="subscriber is required"):
        qs.ack(tenant, "news", ids=["1"])
    with pytest.raises(NotFound, match="subscriber 'ghost'"):
        qs.nack(tenant, "news", ids=["1"], subscriber="ghost")


def test_a_queue_has_at_most_max_subscribers(backend, tenant) -> None:
    from atomq.platform import QueueSettings

    qs = QueueServer(backend, QueueSettings(max_subscribers=2))
    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.get(tenant, "news", subscriber="b")
    with pytest.raises(Conflict, match="at most 2 subscribers"):
        qs.put_subscriber(tenant, "news", "c")
    with pytest.raises(Conflict, match="at most 2 subscribers"):
        qs.get(tenant, "news", subscriber="c")
    assert qs.put_subscriber(tenant, "news", "a") is False, "an existing one is still fine"


def test_a_send_of_the_most_documents_is_stored_browsed_and_delivered(qs, tenant, queue) -> None:
    """100 messages of 100 documents: every variadic call in the scripts runs in slices."""
    batch = [OutgoingMessage(documents=tuple(OutgoingDocument(f"m{m}d{i}") for i in range(100))) for m in range(100)]
    ids = qs.send(tenant, queue, batch)
    page = qs.browse(tenant, queue, limit=1000).items
    assert [b.id for b in page] == ids and page[-1].documents[-1].data == "m99d99"
    got = qs.get(tenant, queue, max_messages=1000)
    assert len(got) == 100 and got[0].documents[1].data == "m0d1" and got[-1].documents[-1].id == f"{ids[-1]}.100"


def test_documents_past_the_limits_are_refused_whole(qs, tenant, queue) -> None:
    with pytest.raises(TooLarge) as err:
        qs.send(tenant, queue, [OutgoingMessage(documents=tuple(OutgoingDocument("d") for _ in range(101)))])
    assert err.value.details["field"] == "messages.0.documents"
    batch = [OutgoingMessage(documents=tuple(OutgoingDocument("d") for _ in range(100))) for _ in range(100)]
    batch.append(msg("one too many"))
    with pytest.raises(TooLarge) as err:
        qs.send(tenant, queue, batch)
    assert err.value.details == {"field": "messages", "limit": 10_000}
    assert qs.get_queue(tenant, queue).depth == 0


def test_a_blocking_get_ends_when_its_queue_is_deleted(qs, tenant, queue) -> None:
    import threading

    errors: list[Exception] = []

    def wait() -> None:
        try:
            qs.get(tenant, queue, wait_ms=20_000)
        except NotFound as exc:
            errors.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    QueueServer(qs.client, qs.settings).delete_queue(tenant, queue)
    t.join(timeout=10)
    assert not t.is_alive(), "the get went on waiting for a queue that no longer exists"
    assert len(errors) == 1


def test_usage_is_counted_exactly_and_a_quota_refuses_a_batch_whole(qs, tenant, backend) -> None:
    from atomq.errors import QuotaExceeded
    from atomq.platform.models import BARE_ENVELOPE
    from atomq.platform.queues.footprint import COPY_BYTES, DOC_BYTES, MARKER_BYTES
    from atomq.platform.store import keys as k
    from atomq.platform.watch.audit import recount_usage

    def cost(m, copies: int) -> int:
        """What the footprint says one message costs: its copies, then its documents."""
        envelope = m.envelope_json() or BARE_ENVELOPE
        return copies * (COPY_BYTES + len(f"{len(m.documents)}|{envelope}")) + sum(
            DOC_BYTES + 1 + len(d.data) for d in m.documents)

    qs.put_queue(tenant, "news", PUBSUB)
    qs.put_subscriber(tenant, "news", "a")
    qs.put_subscriber(tenant, "news", "b")
    once = msg("x" * 100, dedupe_id="once")
    qs.send(tenant, "news", [once])
    marker = k.TenantKeys(tenant).queue("news").dedupe("once")
    marker_bytes = MARKER_BYTES + len(marker) + len(backend.get(marker))
    assert qs.usage(tenant) == {"stored_bytes": cost(once, 2) + marker_bytes, "messages": 2}, \
        "one document, two copies, one marker"
    qs.send(tenant, "news", [msg("x" * 100, dedupe_id="once")])
    assert qs.usage(tenant)["messages"] == 2, "a repeated dedupe id stores nothing"
    used = qs.usage(tenant)["stored_bytes"]
    small, big = msg("small"), msg("y" * 500)
    room = cost(small, 2) + 10
    with pytest.raises(QuotaExceeded) as err:
        qs.send(tenant, "news", [small, big], quota_bytes=used + room)
    assert (err.value.limit, err.value.used) == (used + room, used)
    assert qs.get_queue(tenant, "news").subscribers["a"].depth == 1, "the refused batch stored nothing"
    qs.send(tenant, "news", [small], quota_bytes=used + room)
    for sub in ("a", "b"):
        for d in qs.get(tenant, "news", subscriber=sub, max_messages=10):
            qs.ack(tenant, "news", ids=[d.id], subscriber=sub)
    assert qs.usage(tenant) == {"stored_bytes": marker_bytes, "messages": 0}, "the marker counts until it expires"
    assert recount_usage(backend, tenant) == qs.usage(tenant)


def test_the_oldest_waiting_message_is_the_oldest_neither_in_flight_nor_dead(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, max_redeliveries=0)
    assert qs.oldest_waiting(tenant, "ex") is None, "an empty queue"
    dead = [i for part in range(3) for i in qs.send_batch(tenant, "ex", [msg(f"d{part}.{i}") for i in range(350)]).ids]
    taken = qs.get(tenant, "ex", max_messages=1_000) + qs.get(tenant, "ex", max_messages=1_000)
    assert qs.nack(tenant, "ex", ids=[m.id for m in taken], reason="bad").dead_lettered == len(dead)
    assert qs.oldest_waiting(tenant, "ex") is None, "dead letters do not wait"
    urgent = qs.send(tenant, "ex", [OutgoingMessage(documents=(OutgoingDocument("u"),), priority=9)])[0]
    ids = [qs.send(tenant, "ex", [msg(f"m{i}")])[0] for i in range(3)]
    sent_at = {i: int(i.split("-")[0]) / 1000 for i in [urgent, *ids]}
    assert qs.oldest_waiting(tenant, "ex") == sent_at[urgent], "older than 1,000 dead letters, of another priority"
    assert [m.id for m in qs.get(tenant, "ex", max_messages=2)] == [urgent, ids[0]]
    assert qs.oldest_waiting(tenant, "ex") == sent_at[ids[1]], "the first two are in flight"
    qs.get(tenant, "ex", max_messages=2)
    assert qs.oldest_waiting(tenant, "ex") is None, "all in flight or dead"
    assert qs.release(tenant, "ex", ids=[ids[2]], delay_s=60) == 1
    assert qs.oldest_waiting(tenant, "ex") == sent_at[ids[2]], "scheduled for redelivery: it waits"
