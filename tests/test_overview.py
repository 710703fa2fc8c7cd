"""The platform's samples for the owner's overview, and the nodes' records, on the real Valkey, the
cluster and fakeredis: exact figures per tenant, exact rates between samples, a bounded history."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
import requests
from rq import Queue, Worker

from atomq.client import AtomqClient
from atomq.errors import InvalidInput
from atomq.platform import QueueServer
from atomq.platform.listeners.deployed import ListenerSpec, ListenerStore
from atomq.platform.maintenance import run_maintenance
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.lease import Lease
from atomq.platform.watch.nodes import FORGET_S, SILENT_S, KeptWorkerState, NodeRecord, NodeRecords
from atomq.platform.watch.overview import HISTORY_LENGTH, OverviewStore, Sample, Sampler, run_sampler, tenant_traffic
from atomq.tenants import TenantStore
from atomq.workers.liveness import current_executions, spark_executions, spark_gone, spark_heartbeat
from atomq.workers.node_workers import NodeWorkers, WorkerPlan
from support.in_process_node import InProcessNode
from support.queues import msg
from support.waiting import wait_until

OWNER = f"aq_owner_{uuid.uuid4().hex}"


def only(store: TenantStore, ids: set[str]):  # type: ignore[no-untyped-def]
    """The tenants of this test: the session's store holds every other test's too."""
    return lambda: [t for t in store.list() if t.id in ids]


def test_a_sample_has_each_tenants_exact_figures_and_two_give_exact_rates(qs: QueueServer,
                                                                         backend: redis.Redis) -> None:
    tenants = TenantStore(backend, OWNER)
    loud = tenants.create(f"loud-{uuid.uuid4().hex[:8]}")[0]
    full = tenants.create(f"full-{uuid.uuid4().hex[:8]}", disk_quota_bytes=100_000)[0]
    listeners = ListenerStore(qs.storage)
    for t in (loud, full):
        qs.put_queue(t.id, "work", "point_to_point", max_redeliveries=0)
    qs.send_batch(loud.id, "work", [msg(f"m{i}") for i in range(10)])
    taken = qs.get(loud.id, "work", max_messages=4)
    qs.ack(loud.id, "work", ids=[m.id for m in taken[:2]])
    qs.nack(loud.id, "work", ids=[taken[2].id], reason="bad")
    qs.send_batch(full.id, "work", [msg("x" * 5000)])
    listeners.put(full.id, "mover", ListenerSpec(queue="work", process="forward",
                                                 settings={"to_queue": "elsewhere"}))
    listeners.control(full.id, "mover", "pause")
    sampler = Sampler(qs, only(tenants, {loud.id, full.id}), listeners)
    store = OverviewStore(qs.storage)
    backend.delete(k.OVERVIEW_HISTORY_KEY, k.OVERVIEW_LATEST_KEY, k.OVERVIEW_PREVIOUS_KEY)

    first = sampler.read()
    store.record(first)
    one = first.tenants[loud.id]
    assert (one.name, one.depth, one.in_flight, one.dead_letters, one.queues) == (loud.name, 6, 1, 1, 1)
    assert (one.totals["sent"], one.totals["delivered"], one.totals["acked"], one.totals["dead_lettered"]) == (
        10, 4, 2, 1)
    other = first.tenants[full.id]
    assert other.listeners["paused"] == 1 and other.stored_messages == 1 and other.disk_quota_bytes == 100_000
    assert 0.05 < other.quota_share < 0.1  # type: ignore[operator]

    qs.send_batch(loud.id, "work", [msg(f"n{i}") for i in range(30)])
    qs.get(loud.id, "work", max_messages=5)
    second = sampler.read()
    second.at = first.at + 10  # as a node spaces its samples: the history leaves out closer ones
    store.record(second)
    latest, previous = store.latest()
    assert latest is not None and previous is not None
    assert (latest.at, previous.at) == (second.at, first.at)
    assert latest.tenants[loud.id] == second.tenants[loud.id], "the sample read back whole"
    span = second.at - first.at
    (rates,) = store.history(since=0)
    assert (rates.per_s["sent"] * span, rates.per_s["delivered"] * span) == (pytest.approx(30), pytest.approx(5))
    assert rates.per_s["acked"] == 0 and sum(rates.refused_per_s.values()) == 0
    assert tenant_traffic(previous.tenants[loud.id], latest.tenants[loud.id], span) * span == pytest.approx(35)  # type: ignore[operator]
    assert tenant_traffic(None, latest.tenants[loud.id], span) is None, "a tenant new since the sample before"
    qs.delete_queue(loud.id, "work")
    third = sampler.read()
    third.at = second.at + 10
    store.record(third)
    assert store.history(since=second.at)[0].per_s["sent"] == 0, "a deleted queue's totals are no negative rate"
    too_soon = sampler.read()
    too_soon.at = third.at + 0.1
    store.record(too_soon)
    assert [r.at for r in store.history(since=0)] == [second.at, third.at], \
        "a sample 0.1 s after the one before (a lease changing hands) gives no rate"


def test_the_history_keeps_an_hour_of_samples(backend: redis.Redis, qs: QueueServer) -> None:
    store = OverviewStore(qs.storage)
    backend.delete(k.OVERVIEW_HISTORY_KEY)
    for i in range(HISTORY_LENGTH + 5):
        store.record(Sample(at=1000.0 + 10 * i, read_s=0.0, tenants={}))
    assert backend.llen(k.OVERVIEW_HISTORY_KEY) == HISTORY_LENGTH
    rates = store.history(since=0)
    assert len(rates) == HISTORY_LENGTH - 1 and rates[-1].at == 1000.0 + 10 * (HISTORY_LENGTH + 4)


def test_the_sampler_samples_only_while_its_process_holds_the_lease(backend: redis.Redis, qs: QueueServer) -> None:
    tenants = TenantStore(backend, OWNER)
    mine = tenants.create(f"sampled-{uuid.uuid4().hex[:8]}")[0]
    store = OverviewStore(qs.storage)
    backend.delete(k.OVERVIEW_LATEST_KEY)
    stop = threading.Event()
    seen_before_each_round: list[Sample | None] = []

    def holds() -> bool:
        """Not the holder in the first round; the holder from the second on, which is the last (asked
        again before its sample is stored)."""
        seen_before_each_round.append(store.latest()[0])
        if len(seen_before_each_round) == 2:
            stop.set()
        return len(seen_before_each_round) >= 2

    run_sampler(Sampler(qs, only(tenants, {mine.id}), ListenerStore(qs.storage)), store, holds, stop, every_s=0.01)
    assert seen_before_each_round == [None, None, None], "nothing sampled by a process without the lease"
    latest, _ = store.latest()
    assert latest is not None and list(latest.tenants) == [mine.id]


def test_a_nodes_record_is_listed_shown_silent_and_forgotten(backend: redis.Redis, qs: QueueServer) -> None:
    records = NodeRecords(qs.storage)
    node = f"n_{uuid.uuid4().hex[:12]}"
    started = time.time() - 100
    records.beat(NodeRecord(id=node, url="http://10.0.0.5:8080", version="0.1.0", pid=123, started_at=started,
                            workers=[KeptWorkerState("fork", 456, "running", time.time(), 0)]))
    (listed,) = [r for r in records.all() if r.id == node]
    assert listed.workers == [KeptWorkerState("fork", 456, "running", listed.workers[0].since, 0)]
    assert listed.silent_for(time.time()) is None
    assert listed.up_for(listed.seen_at + 1) == listed.seen_at + 1 - started, "heard from: up until now"
    later = listed.seen_at + SILENT_S + 60
    assert listed.silent_for(later) == SILENT_S + 60
    assert listed.up_for(later) == listed.seen_at - started, "silent: up until it was last heard, not since"

    # What a node that was killed (or a restored backup) leaves: a record nobody rewrites.
    stale = json.dumps({**json.loads(backend.hget(k.NODES_KEY, node)),  # type: ignore[arg-type]
                        "seen_at": time.time() - FORGET_S - 1})
    backend.hset(k.NODES_KEY, node, stale)
    assert node not in [r.id for r in records.all()], "no longer listed"
    assert backend.hget(k.NODES_KEY, node) is not None, "a listing writes nothing"
    assert records.forget_silent() >= 1
    assert backend.hget(k.NODES_KEY, node) is None, "the maintenance drops it from the store"

    records.beat(NodeRecord(id=node, url="u", version="v", pid=1, started_at=0.0))
    assert qs.storage.run("forget_nodes", [k.NODES_KEY], [node, stale]) == 0, "rewritten since the read: kept"
    assert node in [r.id for r in records.all()]
    records.forget(node)
    assert node not in [r.id for r in records.all()]


def test_the_maintenance_drops_the_records_of_nodes_gone_for_long(valkey: EmbeddedValkey) -> None:
    client = valkey.client()
    qs = QueueServer(client)
    gone, alive = (f"n_{uuid.uuid4().hex[:12]}" for _ in range(2))
    record = NodeRecord(id=gone, url="u", version="v", pid=1, started_at=0.0, seen_at=time.time() - FORGET_S - 1)
    client.hset(k.NODES_KEY, gone, json.dumps(dataclasses.asdict(record)))
    NodeRecords(qs.storage).beat(NodeRecord(id=alive, url="u", version="v", pid=2, started_at=0.0))
    stop = threading.Event()
    rounds = threading.Thread(target=run_maintenance, args=(qs, stop, 0.01))
    rounds.start()
    try:
        wait_until(lambda: client.hget(k.NODES_KEY, gone) is None, 10, "the first round to drop the record")
    finally:
        stop.set()
        rounds.join()
    assert client.hget(k.NODES_KEY, alive) is not None, "a node heard from keeps its record"
    NodeRecords(qs.storage).forget(alive)
    client.close()


def test_the_owner_reads_the_ranked_tenants_and_the_nodes_over_http(tmp_path: Path) -> None:
    with InProcessNode(tmp_path, OWNER) as node:
        owner = node.owner
        owner.create_tenant("quiet")
        dead = owner.create_tenant("dead", disk_quota_bytes=100_000)
        with AtomqClient(node.url, dead["api_key"]) as api:
            api.put_queue("work", max_redeliveries=0)
            api.send_texts("work", [f"m{i}" for i in range(5)])
            taken = api.get("work", max_messages=3)
            api.nack("work", receipts=[m["receipt"] for m in taken], reason="broken")
        s = node.services
        store = OverviewStore(s.queues.storage)
        sampler = Sampler(s.queues, s.tenants.list, s.listeners)
        empty = owner.overview()
        assert empty["sampled_at"] is None
        assert {t["name"]: t["sampled"] for t in empty["tenants"]} == {"quiet": False, "dead": False}
        first = sampler.read()
        store.record(first)
        with AtomqClient(node.url, dead["api_key"]) as api:
            api.send_texts("work", ["later"])
        second = sampler.read()
        second.at = first.at + 10
        store.record(second)

        top = owner.overview(sort="dead_letters", limit=1)
        assert top["tenant_count"] == 2 and top["interval_s"] > 0 and len(top["rates"]) == 1
        (ranked,) = top["tenants"]
        assert {k: ranked[k] for k in ("name", "sampled", "depth", "in_flight", "dead_letters", "disk_quota_bytes",
                                       "refused", "executions_running")} == {
            "name": "dead", "sampled": True, "depth": 3, "in_flight": 0, "dead_letters": 3,
            "disk_quota_bytes": 100_000, "refused": 0, "executions_running": 0}
        assert top["interval_s"] == pytest.approx(10) and ranked["traffic_per_s"] == pytest.approx(0.1)
        assert top["rates"][0]["span_s"] == pytest.approx(10) and top["rates"][0]["sent"] == pytest.approx(0.1)
        assert [t["name"] for t in owner.overview(sort="depth")["tenants"]] == ["dead", "quiet"]
        with pytest.raises(InvalidInput) as refused:
            owner.overview(sort="loudest")
        assert "sort" in refused.value.details["fields"]["query"]
        tenant = requests.get(f"{node.url}/v1/server/overview", timeout=10,
                              headers={"Authorization": f"Bearer {dead['api_key']}"})
        assert tenant.status_code == 403 and tenant.json()["error"]["code"] == "forbidden"

        assert owner.nodes() == []
        lease = Lease(s.queues.storage, k.MAINTENANCE_LEASE, f"{s.node_id}:1", ttl_s=600)
        assert lease.acquire()
        NodeRecords(s.queues.storage).beat(NodeRecord(id=s.node_id, url=node.url, version="0.1.0", pid=1,
                                                      started_at=time.time()))
        (listed,) = owner.nodes()
        assert (listed["id"], listed["maintenance_lease"], listed["silent"], listed["workers"]) == (
            s.node_id, True, False, [])


def test_records_and_samples_of_another_version_are_read_or_left_out(backend: redis.Redis, qs: QueueServer) -> None:
    """Nodes of two versions share a store during a rolling upgrade: a field one of them added is
    left out, and a record neither can read is skipped, never an error for the owner's views."""
    records = NodeRecords(qs.storage)
    newer, broken = f"n_{uuid.uuid4().hex[:12]}", f"n_{uuid.uuid4().hex[:12]}"
    backend.hset(k.NODES_KEY, newer, json.dumps({
        "id": newer, "url": "u", "version": "9.0", "pid": 1, "started_at": 1.0, "seen_at": time.time(),
        "zone": "eu-1", "workers": [{"engine": "fork", "pid": 2, "state": "running", "since": 1.0, "restarts": 0,
                                     "problem": "", "cpu": 0.5}]}))
    backend.hset(k.NODES_KEY, broken, b"not json")
    listed = {r.id: r for r in records.all()}
    assert listed[newer].version == "9.0" and listed[newer].workers[0].pid == 2 and broken not in listed
    backend.hdel(k.NODES_KEY, newer, broken)
    store = OverviewStore(qs.storage)
    backend.delete(k.OVERVIEW_HISTORY_KEY)
    backend.set(k.OVERVIEW_LATEST_KEY, json.dumps({"at": 5.0, "tenants": {"t_x": {"depth": 3, "new": 1}}}))
    backend.set(k.OVERVIEW_PREVIOUS_KEY, b"{garbage")
    latest, previous = store.latest()
    assert latest is not None and latest.tenants["t_x"].depth == 3 and latest.tenants["t_x"].name == "t_x"
    assert previous is None
    backend.lpush(k.OVERVIEW_HISTORY_KEY, json.dumps({"at": 1.0, "totals": {"sent": 1}, "refused": {}}), b"[]",
                  json.dumps({"at": 11.0, "totals": {"sent": 21}, "refused": {}, "more": True}))
    (rates,) = store.history(since=0)
    assert rates.per_s["sent"] == 2.0


def test_what_each_fork_worker_runs_is_read_from_rqs_registry(valkey) -> None:  # type: ignore[no-untyped-def]
    """A node's record names each fork worker's execution: rq's index of a worker's executions,
    which the node's master reads by the pids of the workers it keeps."""
    rq = valkey.client()
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    queue = Queue(lk.rq_queue_name(tenant), connection=rq)
    job = queue.enqueue_call("atomq.workers.execution.run", kwargs={"listener": "echo", "api_url": "x"},
                             job_id=f"e_{uuid.uuid4().hex}")
    worker = Worker([queue], connection=rq, name=f"w-{uuid.uuid4().hex[:8]}")
    worker.register_birth()
    try:
        assert worker.pid not in current_executions(rq), "idle"
        worker.prepare_execution(job)
        assert current_executions(rq)[worker.pid] == f"{tenant}/echo"
        workers = NodeWorkers(WorkerPlan(fork_workers=1, spark="never", spark_master="local[1]",
                                         rq_redis_url="redis://unused", error_dir=Path("/nonexistent"),
                                         node_id="n_test"), storage=lambda: None)  # type: ignore[arg-type,return-value]
        kept = workers.fork[0]
        kept.proc = subprocess.Popen(["sleep", "60"])  # a worker the node keeps, by its pid
        kept.started_at = workers.clock()
        try:
            (state,) = workers.describe({kept.proc.pid: f"{tenant}/echo", worker.pid: "someone else's"})
            assert (state.engine, state.pid, state.state, state.execution) == (
                "fork", kept.proc.pid, "running", f"{tenant}/echo")
        finally:
            kept.proc.kill()
            kept.proc.wait()
    finally:
        worker.register_death()
        job.delete()
        rq.close()


def test_what_the_spark_worker_runs_comes_with_its_heartbeat(valkey) -> None:  # type: ignore[no-untyped-def]
    """The Spark worker runs several executions side by side; its heartbeat says which, and a
    node's master finds its own worker by host and pid in the worker's name."""
    rq = valkey.client()
    pid = 4_000_000 + uuid.uuid4().int % 1_000_000  # above the kernel's largest pid: no process's
    mine, elsewhere = f"this-host:{pid}:abc123", f"other-host:{pid}:def456"
    try:
        spark_heartbeat(rq, mine, ["t_a/echo", "t_b/copy"])
        spark_heartbeat(rq, elsewhere, ["t_c/x"])
        assert spark_executions(rq, "this-host") == {pid: "t_a/echo, t_b/copy"}
        spark_heartbeat(rq, mine, [])
        assert pid not in spark_executions(rq, "this-host"), "idle"
        spark_heartbeat(rq, mine, ["t_a/echo"])
        spark_gone(rq, mine)
        assert pid not in spark_executions(rq, "this-host"), "a worker that stopped runs nothing"
    finally:
        spark_gone(rq, mine)
        spark_gone(rq, elsewhere)
        rq.close()
