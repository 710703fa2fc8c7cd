"""Leases: work done once across nodes moves when its holder stops or dies."""

from __future__ import annotations

import threading
import uuid

from atomq.platform.maintenance import run_maintenance
from atomq.platform.store.lease import Lease
from atomq.platform.store.storage import Storage
from support.waiting import wait_until


def test_one_holder_at_a_time_and_the_lease_moves_when_it_runs_out(backend) -> None:
    name = f"test-{uuid.uuid4().hex[:8]}"
    storage = Storage(backend)
    a = Lease(storage, name, "node-a", ttl_s=1.0)
    b = Lease(storage, name, "node-b", ttl_s=30)
    assert a.acquire() and a.acquire(), "taken, then renewed"
    assert not b.acquire()
    assert not b.release(), "only the holder gives it up"
    # node-a dies: it renews no more, and its lease runs out.
    wait_until(b.acquire, 5, "the lease to pass to node-b once node-a's ran out")
    assert not a.acquire()
    assert b.release() and a.acquire(), "a clean stop hands it over at once"


def test_only_the_lease_holder_runs_maintenance_and_gives_it_up_on_stop(qs, tenant) -> None:
    name = f"maint-{uuid.uuid4().hex[:8]}"
    mine = Lease(qs.storage, name, "this-node", ttl_s=30)
    theirs = Lease(qs.storage, name, "other-node", ttl_s=30)
    assert theirs.acquire()
    rounds = []
    qs.due_work = lambda tenants, limit=100: rounds.append(tenants) or {}  # type: ignore[method-assign]
    qs.put_queue(tenant, "q", "point_to_point")
    stop = threading.Event()
    loop = threading.Thread(target=run_maintenance, args=(qs, stop, 0.01, mine))
    loop.start()
    try:
        assert not mine.acquire() and not rounds, "the other node holds the lease"
        theirs.release()
        wait_until(lambda: bool(rounds), 5, "maintenance to run once the lease was free")
    finally:
        stop.set()
        loop.join(timeout=5)
    assert theirs.acquire(), "the stopped loop gave the lease up"
    qs.delete_queue(tenant, "q")


def test_maintenance_applies_the_shared_settings_before_each_round(valkey, tenant) -> None:
    """A worker that serves no request still purges by the retention the owner set."""
    from atomq.api.services import LongPollLimiter, Services
    from atomq.platform import QueueServer
    from atomq.tenants import TenantStore

    client = valkey.client()
    services = Services(queues=QueueServer(client), tenants=TenantStore(client, "aq_owner_test"),
                        longpolls=LongPollLimiter(1))
    services.settings.update(document_retention_s=12_345)
    try:
        stop = threading.Event()
        rounds = []
        services.queues.due_work = (  # type: ignore[method-assign]
            lambda tenants, limit=100: rounds.append(services.queues.settings.document_retention_s) or {})
        services.queues.put_queue(tenant, "q", "point_to_point")
        loop = threading.Thread(target=run_maintenance,
                                args=(services.queues, stop, 0.01, None, services.current_settings))
        loop.start()
        wait_until(lambda: bool(rounds), 5, "a maintenance round")
        stop.set()
        loop.join(timeout=5)
        assert set(rounds) == {12_345}
    finally:
        services.settings.update(document_retention_s=604800)
        QueueServer(client).delete_queue(tenant, "q")
        client.close()
