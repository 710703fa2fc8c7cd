"""Bounds on what one tenant makes the shared store hold, send back and do.

Replies stop at a byte limit and queues per tenant at a count; the stored
bytes a quota holds a tenant to count what the store keeps for it
(dead-letter reasons, de-duplication markers); a maintenance round visits
only the destinations with something due. Each test is a defect once seen.
Run on the real Valkey and on fakeredis.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from atomq.errors import Conflict, TooLarge
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.store import keys as k
from atomq.platform.watch.audit import audit_tenant
from support.in_process_app import InProcessApp, error_of
from support.queues import FAST, browse_all, dead_all, msg
from support.waiting import wait_until

P2P = "point_to_point"


def small_replies(qs: QueueServer, reply_bytes: int) -> QueueServer:
    return QueueServer(qs.client, dataclasses.replace(FAST, max_reply_bytes=reply_bytes))


def test_a_get_stops_adding_messages_at_the_reply_limit(qs, tenant, queue) -> None:
    small = small_replies(qs, 10_000)
    ids = small.send(tenant, queue, [msg("x" * 1000) for _ in range(30)])
    got = small.get(tenant, queue, max_messages=30)
    # Each message is 1,001 stored bytes (a type byte): nine fit in 10,000, a tenth would not.
    assert [d.id for d in got] == ids[:9]
    assert small.get_queue(tenant, queue).depth == 21 and small.get_queue(tenant, queue).in_flight == 9
    rest = []
    while len(rest) < 21:
        rest += small.get(tenant, queue, max_messages=30)
    assert [d.id for d in rest] == ids[9:], "the messages left out come next, in order"
    assert audit_tenant(qs.client, tenant) == []


def test_one_message_bigger_than_the_reply_limit_still_comes_alone(qs, tenant, queue) -> None:
    small = small_replies(qs, 10_000)
    big, after = small.send(tenant, queue, [msg("y" * 6000, "z" * 6000), msg("small")])
    first = small.get(tenant, queue, max_messages=10)
    assert [d.id for d in first] == [big] and len(first[0].documents) == 2
    assert [d.id for d in small.get(tenant, queue, max_messages=10)] == [after]


def test_browse_and_dead_letter_pages_end_at_the_reply_limit_without_gaps(qs, tenant, queue) -> None:
    small = small_replies(qs, 5_000)
    ids = small.send(tenant, queue, [msg("p" * 1000) for _ in range(12)])
    page = small.browse(tenant, queue, limit=100)
    assert [m.id for m in page.items] == ids[:4] and page.next == ids[3]
    assert [m.id for m in browse_all(small, tenant, queue, limit=100)] == ids
    assert [m.id for m in small.peek(tenant, queue, ids)] == ids, "peek reads every id, a reply at a time"
    got: list = []
    while len(got) < 12:
        got += small.get(tenant, queue, max_messages=12)
    small.nack(tenant, queue, receipts=[d.receipt for d in got], reason="bad")
    assert [m.id for m in dead_all(small, tenant, queue, limit=100)] == ids
    assert small.dead_letters(tenant, queue, limit=100).next == ids[3]


def test_queues_per_tenant_are_bounded(qs, tenant) -> None:
    capped = QueueServer(qs.client, dataclasses.replace(FAST, max_queues_per_tenant=3))
    for name in ("a", "b", "c"):
        capped.put_queue(tenant, name, P2P)
    with pytest.raises(Conflict) as err:
        capped.put_queue(tenant, "d", P2P)
    assert err.value.code == "too_many_queues" and err.value.details["limit"] == 3
    capped.put_queue(tenant, "c", P2P, max_redeliveries=2)  # an update is not a new queue
    capped.delete_queue(tenant, "a")
    capped.put_queue(tenant, "d", P2P)
    assert [q.name for q in capped.list_queues(tenant)] == ["b", "c", "d"]


def test_dead_letter_reasons_count_until_they_leave(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("m")])
    before = qs.usage(tenant)["stored_bytes"]
    (d,) = qs.get(tenant, queue)
    assert qs.nack(tenant, queue, receipts=[d.receipt], reason="r" * 4000).dead_lettered == 1
    assert qs.usage(tenant)["stored_bytes"] == before + 4000
    assert qs.resend_dead_letters(tenant, queue, all=True) == 1
    assert qs.usage(tenant)["stored_bytes"] == before
    (d,) = qs.get(tenant, queue)
    qs.nack(tenant, queue, receipts=[d.receipt], reason="again")
    assert qs.delete_dead_letters(tenant, queue, all=True) == 1
    assert qs.usage(tenant) == {"stored_bytes": 0, "messages": 0}
    assert audit_tenant(qs.client, tenant) == []


def test_de_duplication_markers_count_until_they_expire(qs, tenant, queue) -> None:
    short = QueueServer(qs.client, dataclasses.replace(FAST, dedupe_window_s=2))
    (d_id,) = short.send(tenant, queue, [msg("m", dedupe_id="k1")])
    short.get(tenant, queue)
    assert short.ack(tenant, queue, ids=[d_id]) == 1
    marked = short.usage(tenant)["stored_bytes"]
    assert marked > 0 and short.usage(tenant)["messages"] == 0, "the marker outlives its message"
    assert short.maintain(tenant)["marker_bytes"] == 0, "not before the marker expires"
    assert short.usage(tenant)["stored_bytes"] == marked
    freed: list[int] = []
    wait_until(lambda: freed.append(short.maintain(tenant)["marker_bytes"]) or sum(freed) > 0,
               8, "the maintenance to take the marker's bytes off")
    assert sum(freed) == marked
    assert short.usage(tenant) == {"stored_bytes": 0, "messages": 0}
    assert audit_tenant(qs.client, tenant) == []


def test_stored_bytes_is_within_a_quarter_of_what_the_store_measures(valkey, tenant) -> None:
    """The contract's bound, on a mixed load big enough to leave the compact encodings."""
    client = valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "mixed", P2P, max_redeliveries=0)
    qs.put_queue(tenant, "fan", "publish_subscribe")
    for sub in ("a", "b"):
        qs.put_subscriber(tenant, "fan", sub)
    sizes = [0, 10, 200, 3000]
    for round_ in range(6):
        batch = []
        for i in range(500):
            n = round_ * 500 + i
            docs = tuple(OutgoingDocument("x" * sizes[n % 4], {"n": n} if n % 3 == 0 else {})
                         for _ in range(1 + n % 3))
            batch.append(OutgoingMessage(documents=docs, properties={"p": n} if n % 2 else {},
                                         dedupe_id=f"id-{n}" if n % 5 == 0 else None))
        qs.send(tenant, "mixed", batch)
        qs.send(tenant, "fan", batch[:100])
    got = qs.get(tenant, "mixed", max_messages=1000)
    qs.nack(tenant, "mixed", receipts=[d.receipt for d in got[:400]], reason="failed: " + "e" * 40)
    measured = sum(client.memory_usage(key, samples=0) or 0
                   for key in client.scan_iter(match=f"aq:{{{tenant}}}:*", count=1000))
    counted = qs.usage(tenant)["stored_bytes"]
    assert 0.75 <= counted / measured <= 1.25, f"stored_bytes {counted} against {measured} measured"
    print(f"stored_bytes {counted}, measured {measured}: {counted / measured:.3f}")
    assert audit_tenant(client, tenant) == []


def test_a_maintenance_round_visits_only_destinations_with_something_due(qs, tenant) -> None:
    """A tenant's idle queues cost its round nothing: the due index names only the busy one."""
    for i in range(200):
        qs.put_queue(tenant, f"idle{i:03d}", P2P)
        qs.send(tenant, f"idle{i:03d}", [msg("waiting")])
    qs.put_queue(tenant, "busy", P2P, ack_timeout_s=0.05)
    qs.send(tenant, "busy", [msg("m")])
    (d,) = qs.get(tenant, "busy")
    wait_until(lambda: qs.due_work([tenant])[tenant].due == ["busy"], 5, "the delivery's deadline")
    work = qs.due_work([tenant])[tenant]
    assert work.old == [] and work.removals == []
    assert qs.maintain(tenant, work)["moved"] == 1
    assert qs.get_queue(tenant, "busy").scheduled == 1, "its ack time-out counted a failed delivery"
    wait_until(lambda: qs.maintain(tenant)["moved"] == 1, 5, "the redelivery to fall due")
    assert qs.due_work([tenant])[tenant].due == [] and qs.get_queue(tenant, "busy").depth == 1
    assert audit_tenant(qs.client, tenant) == []


def test_the_retention_purge_visits_only_destinations_holding_old_messages(qs, tenant) -> None:
    short = QueueServer(qs.client, dataclasses.replace(FAST, document_retention_s=0.2))
    short.put_queue(tenant, "old", P2P)
    short.put_queue(tenant, "empty", P2P)
    short.send(tenant, "old", [msg("a"), msg("b")])
    wait_until(lambda: short.due_work([tenant])[tenant].old == ["old"], 5, "the messages to pass the retention")
    assert short.maintain(tenant)["purged"] == 2
    assert short.due_work([tenant])[tenant].old == [] and short.get_queue(tenant, "old").depth == 0
    assert qs.client.zscore(k.TenantKeys(tenant).oldest, "old") is None, "an emptied queue leaves the index"
    assert audit_tenant(qs.client, tenant) == []


def test_a_tenants_big_purge_spreads_over_rounds_and_holds_up_no_one(qs, tenant) -> None:
    """Past its chunk budget a tenant's purge stops for the round; the other tenant's due
    redelivery is swept in the same round, and the rest of the purge comes in the next."""
    from atomq.platform.maintenance import CHUNKS_PER_TENANT_ROUND, maintain_all

    small = QueueServer(qs.client, dataclasses.replace(FAST, chunk_size=5, document_retention_s=0.2))
    small.put_queue(tenant, "old", P2P)
    count = 5 * CHUNKS_PER_TENANT_ROUND + 50
    for start in range(0, count, 100):
        small.send(tenant, "old", [msg(f"m{i}") for i in range(start, min(count, start + 100))])
    other = f"{tenant}x"
    small.put_queue(other, "q", P2P, ack_timeout_s=0.05)
    small.send(other, "q", [msg("due")])
    small.get(other, "q")
    wait_until(lambda: small.due_work([tenant, other])[tenant].old == ["old"]
               and small.due_work([other])[other].due == ["q"], 5, "the purge and the time-out to fall due")
    maintain_all(small)
    left = small.get_queue(tenant, "old").depth
    assert 0 < left <= count - 5 * CHUNKS_PER_TENANT_ROUND, "one round purged its budget and no more"
    assert small.get_queue(other, "q").in_flight == 0, "the other tenant's time-out was not held up"
    maintain_all(small)
    assert small.get_queue(tenant, "old").depth == 0, "the next round finished the purge"
    for t in (tenant, other):
        assert audit_tenant(qs.client, t) == []


def few_copies(qs: QueueServer, copies: int) -> QueueServer:
    return QueueServer(qs.client, dataclasses.replace(FAST, max_copies_per_request=copies))


def assert_too_many_copies(call, copies: int, most: int) -> None:
    with pytest.raises(TooLarge) as refused:
        call()
    assert refused.value.code == "too_many_copies" and refused.value.details == {"copies": copies, "max": most}


def test_a_request_stores_at_most_its_copies_counted_before_any_write(qs, tenant) -> None:
    """Copies are messages x queues reached x subscribers: a publish to a topic many queues attract,
    or a send to a queue of many subscribers, multiplies one request's work on the shared store."""
    small = few_copies(qs, 6)
    small.put_queue(tenant, "jobs", P2P)
    small.put_queue(tenant, "news", "publish_subscribe")
    for s in ("a", "b", "c"):
        small.put_subscriber(tenant, "news", s)
    for q in ("eu", "us", "all"):
        small.put_queue(tenant, q, P2P, topics=[f"orders/{q}/>", "orders/all"])
    assert_too_many_copies(lambda: small.send(tenant, "jobs", [msg(str(i)) for i in range(7)]), 7, 6)
    assert len(small.send(tenant, "jobs", [msg(str(i)) for i in range(6)])) == 6
    assert_too_many_copies(lambda: small.send(tenant, "news", [msg("1"), msg("2"), msg("3")]), 9, 6)
    assert len(small.send(tenant, "news", [msg("1"), msg("2")])) == 2
    assert_too_many_copies(lambda: small.publish(tenant, "orders/all", [msg("1"), msg("2"), msg("3")]), 9, 6)
    # Each message to its own topic: 1 + 1 + 3 + 3 copies in three groups, refused before the first.
    topics = ["orders/eu/1", "orders/us/2", "orders/all", "orders/all"]
    assert_too_many_copies(lambda: small.publish_many(tenant, topics, [msg(t) for t in topics]), 8, 6)
    assert [small.get_queue(tenant, q).depth for q in ("eu", "us", "all")] == [0, 0, 0]
    assert small.publish_many(tenant, topics[:3], [msg(t) for t in topics[:3]]).ids.count(None) == 0


def test_the_copies_a_request_may_store_are_a_server_setting_and_a_counted_413(valkey) -> None:
    with InProcessApp(valkey.client()) as app:
        assert app.owner("GET", "/v1/server").get_json()["max_copies_per_request"] == 100_000
        for bad in (0, 10_000_001, "many"):
            refused = app.owner("PATCH", "/v1/server", {"max_copies_per_request": bad})
            assert "max_copies_per_request" in error_of(refused, 400)["details"]["fields"]["json"]
        assert app.owner("PATCH", "/v1/server", {"max_copies_per_request": 2}).status_code == 200
        try:
            refused = app.call("POST", "/v1/queues/orders/messages",
                               {"messages": [{"documents": [{"data": str(i)}]} for i in range(3)]})
            error = error_of(refused, 413)
            assert error["code"] == "too_many_copies" and error["details"] == {"copies": 3, "max": 2}
            assert app.services.queues.get_queue(app.tenant, "orders").depth == 0
            assert app.services.queues.counters.refusals(app.tenant)["too_many_copies"] == 1
        finally:
            app.owner("PATCH", "/v1/server", {"max_copies_per_request": 100_000})


def test_the_servers_message_limit_holds_under_racing_sends(valkey) -> None:
    """Each tenant's usage is in its own slot and a node sums them every few seconds: judged by that
    sum alone, 120 sends racing for room for 50 were all taken. Each now reserves its copies first.
    (80 threads: as many as a node's two HTTP workers serve at once, within the client's pool.)"""
    with InProcessApp(valkey.client()) as app:
        room = 30
        held = app.services.queues.total_usage()["messages"]
        assert app.owner("PATCH", "/v1/server", {"max_messages": held + room}).status_code == 200
        statuses: list[int] = []
        start = threading.Barrier(80)

        def send_one() -> None:
            http = app.app.test_client()
            start.wait()
            answer = http.post("/v1/queues/orders/messages", json={"messages": [{"documents": [{"data": "x"}]}]},
                               headers={"Authorization": f"Bearer {app.key}"})
            statuses.append(answer.status_code)

        try:
            threads = [threading.Thread(target=send_one) for _ in range(80)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            accepted = statuses.count(201)
            assert set(statuses) <= {201, 507} and len(statuses) == 80
            assert 0 < accepted <= room, accepted
            assert app.services.queues.get_queue(app.tenant, "orders").depth == accepted
            assert app.services.queues.total_usage()["messages"] <= held + room
        finally:
            app.owner("PATCH", "/v1/server", {"max_messages": 0})
