"""Durability per queue: a send to a ``sync`` queue is answered once Valkey has synced it to its
append-only file (and to ``min_replicas`` replicas), through WAITAOF on the send's own connection;
past ``sync_timeout_ms`` it is 503 not_durable, and a retry with the same dedupe_id is safe."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from atomq.errors import NotDurable
from atomq.platform import QueueServer
from atomq.platform.store.connection import open_redis
from atomq.platform.store.embedded import EmbeddedValkey
from support.ports import free_port
from support.queues import FAST, browse_all, msg
from support.served_node import ServeFactory
from support.valkey_cluster import ValkeyCluster
from support.waiting import wait_until


def test_a_sync_send_waits_for_the_disk_and_a_time_out_is_safe_to_retry(valkey, tenant: str) -> None:
    qs = QueueServer(valkey.client(), FAST)
    info, _ = qs.put_queue(tenant, "ledger", "point_to_point", durability="sync")
    assert info.durability.value == "sync"
    (first,) = qs.send(tenant, "ledger", [msg("entry 1", dedupe_id="e1")])
    assert qs.get_queue(tenant, "ledger").totals["sent"] == 1

    # No replica holds it: the wait for one runs out (after the local sync, within Valkey's
    # second of appendfsync everysec), but the message is stored.
    qs.settings = dataclasses.replace(qs.settings, sync_min_replicas=1, sync_timeout_ms=1500)
    with pytest.raises(NotDurable) as late:
        qs.send(tenant, "ledger", [msg("entry 2", dedupe_id="e2")])
    assert late.value.http_status == 503 and late.value.code == "not_durable"
    (stored,) = late.value.details["ids"]
    assert late.value.details["synced_local"] == 1 and late.value.details["synced_replicas"] == 0
    assert "not synced to 1 replicas within 1500 ms" in late.value.message
    qs.settings = dataclasses.replace(qs.settings, sync_min_replicas=0)
    assert qs.send(tenant, "ledger", [msg("entry 2", dedupe_id="e2")]) == [stored], "the retry is the original"
    assert [m.documents[0].data for m in browse_all(qs, tenant, "ledger")] == ["entry 1", "entry 2"]
    assert first != stored


def test_pipelined_scripts_run_again_once_the_store_has_lost_them(valkey, tenant: str) -> None:
    """A pipeline sends EVALSHA without asking SCRIPT EXISTS first; after a restart or a failover
    the store may not hold a script, answers NOSCRIPT (it did not run) and the call runs again,
    loaded: a sync send (with WAITAOF), a get that acks first, and the maintenance's reads."""
    client = valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "ledger", "point_to_point", durability="sync")
    client.script_flush()
    ids = qs.send(tenant, "ledger", [msg("entry 1"), msg("entry 2")])
    first = qs.take(tenant, "ledger", max_messages=1)
    client.script_flush()
    second = qs.take(tenant, "ledger", ack_receipts=[d.receipt for d in first.deliveries])
    assert (second.acked, [d.id for d in first.deliveries + second.deliveries]) == (1, ids)
    client.script_flush()
    work = qs.due_work([tenant])[tenant]
    assert (work.due, work.old, work.removals) == ([], [], [])
    assert qs.ack(tenant, "ledger", ids=[ids[1]]) == 1
    assert qs.get_queue(tenant, "ledger").totals["acked"] == 2


def test_a_queue_made_sync_is_waited_for_by_a_sender_that_cached_it_async(valkey, tenant: str) -> None:
    """The route a sender caches names the durability, and the send script checks it."""
    sender, other = QueueServer(valkey.client(), FAST), QueueServer(valkey.client(), FAST)
    sender.put_queue(tenant, "q", "point_to_point")
    sender.send(tenant, "q", [msg("async")])
    other.put_queue(tenant, "q", "point_to_point", durability="sync")
    sender.settings = dataclasses.replace(sender.settings, sync_min_replicas=1, sync_timeout_ms=50)
    with pytest.raises(NotDurable):
        sender.send(tenant, "q", [msg("now sync")])


def test_a_publish_waits_when_any_queue_it_reaches_is_sync(valkey, tenant: str) -> None:
    qs = QueueServer(valkey.client(), dataclasses.replace(FAST, sync_min_replicas=1, sync_timeout_ms=50))
    qs.put_queue(tenant, "fast", "point_to_point", topics=["t/>"])
    qs.publish(tenant, "t/a", [msg("only async")])
    qs.put_queue(tenant, "safe", "point_to_point", topics=["t/>"], durability="sync")
    with pytest.raises(NotDurable):
        qs.publish(tenant, "t/a", [msg("reaches a sync queue")])


def test_a_store_without_an_append_only_file_cannot_take_a_sync_send(tmp_path: Path) -> None:
    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    client = server.client()
    try:
        client.config_set("appendonly", "no")
        qs = QueueServer(client, FAST)
        qs.put_queue("t_0123456789ab", "q", "point_to_point", durability="sync")
        with pytest.raises(NotDurable) as err:
            qs.send("t_0123456789ab", "q", [msg("x")])
        assert "appendonly" in err.value.message
    finally:
        client.close()
        server.stop()


def test_min_replicas_waits_for_a_real_replica(tmp_path: Path) -> None:
    primary = EmbeddedValkey(tmp_path / "primary", port=free_port())
    replica = EmbeddedValkey(tmp_path / "replica", port=free_port())
    primary.start()
    replica.start()
    p, r = primary.client(), replica.client()
    try:
        r.config_set("masterauth", primary.password)
        r.replicaof("127.0.0.1", primary.port)
        wait_until(lambda: p.info("replication")["connected_slaves"] == 1
                   and r.info("replication")["master_link_status"] == "up", 20, "the replica's link")
        qs = QueueServer(p, dataclasses.replace(FAST, sync_min_replicas=1, sync_timeout_ms=5000))
        qs.put_queue("t_0123456789ab", "q", "point_to_point", durability="sync")
        ids = qs.send("t_0123456789ab", "q", [msg("on two disks")])
        assert len(ids) == 1
        wait_until(lambda: r.exists(b"aq:{t_0123456789ab}:q:q:msg") == 1, 5, "the copy on the replica")
    finally:
        p.close()
        r.close()
        replica.stop()
        primary.stop()


def test_the_embedded_store_syncs_every_write_with_appendfsync_always(serve: ServeFactory) -> None:
    node = serve("--workers", "0", "--appendfsync", "always", http_workers=1)
    assert node.redis().config_get("appendfsync") == {"appendfsync": "always"}
    with node.tenant_client("always") as api:
        api.put_queue("ledger", durability="sync")
        assert len(api.send_texts("ledger", ["on disk before the answer"])) == 1


def test_on_a_cluster_a_sync_send_waits_on_its_tenants_node_for_its_replica(valkey_cluster: ValkeyCluster) -> None:
    """The script and WAITAOF go to the node of the tenant's slot on one connection (else the
    script would meet MOVED there); every master of the test cluster has a replica to wait for."""
    client = open_redis(valkey_cluster.url)
    qs = QueueServer(client, dataclasses.replace(FAST, sync_min_replicas=1, sync_timeout_ms=5000))
    try:
        for master in range(3):
            tenant = valkey_cluster.tenant_on(master)
            qs.put_queue(tenant, "ledger", "point_to_point", durability="sync")
            ids = qs.send(tenant, "ledger", [msg(f"entry {i}", dedupe_id=f"e{i}") for i in range(10)])
            assert len(ids) == 10 and qs.get_queue(tenant, "ledger").depth == 10, master
            qs.delete_queue(tenant, "ledger")
    finally:
        client.close()
