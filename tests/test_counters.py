"""The queues' counters: exact totals kept by the scripts, and the 10-second rate buckets.

Runs on the real Valkey and on fakeredis (the ``qs`` fixture's fast
redelivery schedule: 0.05, 0.1, 0.15 s).
"""

from __future__ import annotations

import dataclasses

import pytest

from atomq.errors import QueueFull, QuotaExceeded, RateLimited, TooLarge
from atomq.platform import QueueServer
from atomq.platform.guards.rate_limit import RateLimiter
from atomq.platform.watch.counters import MAX_RATE_BUCKETS, RATE_BUCKET_S
from support.queues import FAST, msg


def totals(qs: QueueServer, tenant: str, queue: str) -> dict[str, int]:
    return qs.counters.queue_totals(tenant, [queue])[queue]


def test_every_step_of_a_message_counts_once(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point", max_redeliveries=1, ack_timeout_s=30)
    ids = qs.send(tenant, "orders", [msg("a", dedupe_id="d1"), msg("b"), msg("c")])
    qs.send(tenant, "orders", [msg("a again", dedupe_id="d1")])  # a repeat stores nothing and counts nothing
    delivered = qs.get(tenant, "orders", max_messages=10)
    assert len(delivered) == 3
    qs.ack(tenant, "orders", ids=[ids[0]])
    qs.ack(tenant, "orders", ids=[ids[0]])  # no longer in flight: acks nothing, counts nothing
    assert qs.nack(tenant, "orders", ids=ids[1:]).requeued == 2
    again = qs.get(tenant, "orders", max_messages=10, wait_ms=5000)
    assert sorted(d.id for d in again) == sorted(ids[1:])
    assert qs.nack(tenant, "orders", ids=[ids[1]], reason="bad").dead_lettered == 1
    qs.ack(tenant, "orders", receipts=[d.receipt for d in again if d.id == ids[2]])
    assert totals(qs, tenant, "orders") == {
        "sent": 3, "delivered": 5, "redelivered": 2, "acked": 2, "nacked": 3, "dead_lettered": 1,
        "ack_timeouts": 0, "expired": 0, "superseded": 0, "dropped": 0, "moved": 0}


def test_an_ack_timeout_counts_as_a_timeout_and_a_redelivery(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "jobs", "point_to_point", max_redeliveries=0, ack_timeout_s=0.05)
    qs.send(tenant, "jobs", [msg("x")])
    assert len(qs.get(tenant, "jobs")) == 1
    # With no redelivery left, the time-out dead-letters it; a blocking get runs the sweep when the deadline passes.
    assert qs.get(tenant, "jobs", wait_ms=300) == []
    assert qs.get_queue(tenant, "jobs").dead_letters == 1
    counts = totals(qs, tenant, "jobs")
    assert (counts["ack_timeouts"], counts["dead_lettered"], counts["nacked"]) == (1, 1, 0)


def test_publish_subscribe_counts_one_send_and_each_subscribers_deliveries(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "news", "publish_subscribe")
    qs.put_subscriber(tenant, "news", "a")
    qs.put_subscriber(tenant, "news", "b")
    qs.send(tenant, "news", [msg("1"), msg("2")])
    for sub in ("a", "b"):
        got = qs.get(tenant, "news", max_messages=10, subscriber=sub)
        qs.ack(tenant, "news", ids=[d.id for d in got], subscriber=sub)
    counts = totals(qs, tenant, "news")
    assert (counts["sent"], counts["delivered"], counts["acked"]) == (2, 4, 4)
    assert qs.get_queue(tenant, "news").scheduled == 0


def test_counters_go_with_the_queue(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "tmp", "point_to_point")
    qs.send(tenant, "tmp", [msg("x")])
    qs.delete_queue(tenant, "tmp")
    assert qs.counters.queue_totals(tenant, ["tmp"]) == {}
    qs.put_queue(tenant, "tmp", "point_to_point")
    assert totals(qs, tenant, "tmp")["sent"] == 0


def test_rate_buckets_hold_this_buckets_sends_and_acks(qs: QueueServer, tenant: str, backend) -> None:
    qs.put_queue(tenant, "orders", "point_to_point")
    before = int(backend.time()[0]) // RATE_BUCKET_S
    qs.send(tenant, "orders", [msg(str(i)) for i in range(7)])
    got = qs.get(tenant, "orders", max_messages=3)
    qs.ack(tenant, "orders", ids=[d.id for d in got])
    buckets = qs.counters.rates(tenant, "orders", buckets=MAX_RATE_BUCKETS)
    after = buckets[-1].start // RATE_BUCKET_S
    assert len(buckets) == MAX_RATE_BUCKETS
    assert [b.start for b in buckets] == [(after - MAX_RATE_BUCKETS + 1 + i) * RATE_BUCKET_S
                                          for i in range(MAX_RATE_BUCKETS)]
    # The steps may straddle a bucket boundary: what matters is that each lands in the bucket of its time.
    recent = [b for b in buckets if b.start // RATE_BUCKET_S >= before]
    assert sum(b.sent for b in recent) == 7 and sum(b.acked for b in recent) == 3
    assert sum(b.sent for b in buckets) == 7
    with pytest.raises(ValueError):
        qs.counters.rates(tenant, "orders", buckets=MAX_RATE_BUCKETS + 1)


def test_refused_sends_count_per_tenant(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point")
    limiter = RateLimiter(qs.storage, "n_test")

    def send(quota_bytes: int = 0) -> None:
        with qs.counters.counting_refusals(tenant), limiter.send(tenant, 1, 0, 60):
            qs.send(tenant, "orders", [msg("x" * 100)], quota_bytes=quota_bytes)

    send()
    with pytest.raises(RateLimited):
        send()
    limiter = RateLimiter(qs.storage, "n_other")  # a fresh window: the quota refuses next
    for _ in range(2):  # a send the quota refuses takes no room in the window: the second gets to the quota too
        with pytest.raises(QuotaExceeded):
            send(quota_bytes=50)
    qs.put_queue(tenant, "orders", "point_to_point", max_messages=1)
    limiter = RateLimiter(qs.storage, "n_third")
    with pytest.raises(QueueFull):
        send()
    with pytest.raises(TooLarge), qs.counters.counting_refusals(tenant):
        QueueServer(qs.client, dataclasses.replace(FAST, max_copies_per_request=1)).send(
            tenant, "orders", [msg("a"), msg("b")])
    assert qs.counters.refusals(tenant) == {"rate_limited": 1, "quota_rejected": 2, "queue_full": 1,
                                            "server_full": 0, "memory_low": 0,
                                            "not_durable": 0, "too_many_copies": 1}
    assert totals(qs, tenant, "orders")["sent"] == 1
