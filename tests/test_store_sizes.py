"""The temporary and job scheduler stores of GET /v1/server, measured on a real Valkey."""

from __future__ import annotations

from rq import Queue

from atomq.platform import QueueServer
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.watch import store_sizes
from atomq.workers.worker import job_queue_bytes
from support.queues import FAST, msg


def _noop() -> None:
    """A job function for the rq queue below (never run)."""


def test_in_flight_deliveries_dedupe_markers_redeliveries_and_jobs_are_measured(
        valkey: EmbeddedValkey, tenant: str) -> None:
    client = valkey.client()
    qs = QueueServer(client, FAST)
    rq = valkey.client()
    qs.put_queue(tenant, "q", "point_to_point")
    base = store_sizes.measure(qs)

    qs.send(tenant, "q", [msg(f"m{i}", dedupe_id=f"d{i}") for i in range(50)])
    got = qs.get(tenant, "q", max_messages=50)
    busy = store_sizes.measure(qs)
    assert busy["temporary_bytes"] > base["temporary_bytes"]  # 50 in flight, 50 dedupe markers

    qs.nack(tenant, "q", receipts=[d.receipt for d in got])
    scheduled = store_sizes.measure(qs)
    assert scheduled["job_scheduler_bytes"] > base["job_scheduler_bytes"]  # 50 redeliveries scheduled
    assert scheduled["temporary_bytes"] < busy["temporary_bytes"]  # none in flight any more

    rq.sadd(lk.RQ_TENANTS_KEY, tenant)
    queue = Queue(lk.rq_queue_name(tenant), connection=rq)
    try:
        before_jobs = job_queue_bytes(rq)
        for _ in range(10):
            queue.enqueue_call(_noop, result_ttl=0)
        with_jobs = store_sizes.measure(qs, lambda: job_queue_bytes(rq))
        assert job_queue_bytes(rq) > before_jobs
        assert with_jobs["job_scheduler_bytes"] == scheduled["job_scheduler_bytes"] + job_queue_bytes(rq)
    finally:
        queue.delete(delete_jobs=True)
        rq.srem(lk.RQ_TENANTS_KEY, tenant)

    store_sizes.record(qs, with_jobs)
    assert store_sizes.recorded(qs) == with_jobs
    qs.delete_queue(tenant, "q")
    client.close()
    rq.close()

