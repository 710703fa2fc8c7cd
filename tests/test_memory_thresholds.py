"""Memory thresholds: the states green, yellow, orange and red refuse sends by priority, while
gets, acks, nacks, extends, browses and deletes keep working, also on a real Valkey at its
maxmemory, so consumers can bring memory back down."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from redis.cluster import key_slot

from atomq.errors import InvalidInput, StorageFull
from atomq.platform import QueueServer
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.watch.memory_state import MemoryThresholds, refuses
from atomq.platform.watch.memory_use import MemoryUse
from support.queues import FAST, browse_all, msg
from support.served_node import AtomqServe, Http, ServeFactory
from support.valkey_cluster import ValkeyCluster
from support.waiting import wait_until


def test_thresholds_name_the_state_and_each_state_refuses_more() -> None:
    t = MemoryThresholds()
    assert [t.state(MemoryUse(used, 100)) for used in (0, 69, 70, 84, 85, 94, 95, 100, 120)] == [
        "green", "green", "yellow", "yellow", "orange", "orange", "red", "red", "red"]
    assert t.state(MemoryUse(10**12, 0)) == "green", "a store without a limit"
    assert [p for p in range(10) if refuses("yellow", p)] == [0, 1, 2, 3]
    assert [p for p in range(10) if refuses("orange", p)] == [0, 1, 2, 3, 4, 5, 6]
    assert [p for p in range(10) if refuses("red", p)] == list(range(10))
    assert not any(refuses("green", p) for p in range(10))
    for bad in ((0, 0.5, 0.9), (0.5, 0.5, 0.9), (0.7, 0.85, 1.01), (0.9, 0.8, 0.95), (float("nan"), 0.8, 0.9)):
        with pytest.raises(InvalidInput) as err:
            MemoryThresholds(*bad)
        assert err.value.details["field"] == "memory_thresholds"


@pytest.fixture
def tight_valkey(tmp_path: Path) -> Any:
    """A real Valkey whose maxmemory leaves room for a few megabytes of messages, beside the some
    2 MB atomq's scripts take once loaded."""
    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    client = server.client()
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 6 * 1024 * 1024)
    yield server
    client.close()
    server.stop()


def test_at_maxmemory_consumers_still_get_ack_nack_extend_browse_and_delete(tight_valkey: EmbeddedValkey) -> None:
    """Valkey refuses a script whose first write may grow memory once it is at maxmemory; the
    scripts consumers use are flagged to run there (scripts.ALWAYS_RUN)."""
    qs = QueueServer(tight_valkey.client(), FAST)
    tenant = "t_0123456789ab"
    qs.put_queue(tenant, "q", "point_to_point", max_redeliveries=0)
    sent = 0
    with pytest.raises(StorageFull):
        while True:
            qs.send(tenant, "q", [msg("x" * 4096) for _ in range(20)])
            sent += 20
    assert sent > 100
    taken = qs.get(tenant, "q", max_messages=50)
    assert len(taken) == 50, "a get takes at maxmemory"
    assert qs.extend(tenant, "q", [d.id for d in taken[:5]], seconds=60) == 5
    assert qs.nack(tenant, "q", [taken[0].id], reason="bad").dead_lettered == 1
    assert qs.release(tenant, "q", [taken[1].id]) == 1
    assert len(qs.browse(tenant, "q", limit=10).items) == 10
    assert qs.maintain(tenant) is not None
    assert qs.ack(tenant, "q", [d.id for d in taken[2:]]) == 48
    assert qs.delete_dead_letters(tenant, "q", all=True) == 1
    assert qs.delete_messages(tenant, "q", ids=[m.id for m in browse_all(qs, tenant, "q")[:100]]) == 100
    qs.send(tenant, "q", [msg("fits again")])


def memory_share(node: AtomqServe) -> float:
    info = node.redis().info("memory")
    return int(info["used_memory"]) / int(info["maxmemory"])


def test_each_state_refuses_sends_below_its_priority_and_red_refuses_creation(serve: ServeFactory) -> None:
    node = serve("--workers", "0", http_workers=1)
    owner = node.owner()
    with node.tenant_client("memory") as api:
        api.put_queue("q", max_redeliveries=0)
        api.put_queue("topics", topics=["t/>"])
        api.put_queue("fanout", "publish_subscribe")
        api.request("PUT", "/v1/queues/fanout/subscribers/old")
        api.send_texts("q", ["waiting"] * 3)
        share = memory_share(node)

        def at(state: str) -> None:
            # Thresholds around the store's share now: the state is the one asked for.
            cuts = {"yellow": (share / 4, 0.98, 0.99), "orange": (share / 4, share / 2, 0.99),
                    "red": (share / 8, share / 4, share / 2), "green": (0.70, 0.85, 0.95)}[state]
            owner("PATCH", "/v1/server", {"memory_thresholds": dict(zip(("yellow", "orange", "red"), cuts))}, 200)
            assert owner("GET", "/v1/server", status=200)["memory_state"] == state

        def send(*priorities: int, path: str = "/v1/queues/q/messages") -> Any:
            body = {"messages": [{"documents": [{"data": "x"}], "priority": p} for p in priorities]}
            return requests.post(api.url + path, json=body, timeout=10, headers=api.headers)

        try:
            at("yellow")
            refused = send(3)
            assert (refused.status_code, refused.json()["error"]["code"]) == (503, "memory_low")
            assert refused.headers["Retry-After"] and refused.headers["X-Atomq-Memory-State"] == "yellow"
            assert refused.json()["error"]["details"] == {"memory_state": "yellow", "priority": 4}
            assert send(9, 3).status_code == 503, "a send is refused whole"
            taken = send(4)
            assert taken.status_code == 201 and taken.headers["X-Atomq-Memory-State"] == "yellow"
            assert send(4, path="/v1/topics/t/x/messages").status_code == 201
            assert send(2, path="/v1/topics/t/x/messages").status_code == 503

            at("orange")
            assert send(6).status_code == 503 and send(7).status_code == 201

            at("red")
            assert send(9).status_code == 503
            assert send(9, path="/v1/topics/t/x/messages").status_code == 503
            new = requests.put(api.url + "/v1/queues/new", json={"model": "point_to_point"}, timeout=10,
                               headers=api.headers)
            assert (new.status_code, new.json()["error"]["code"]) == (503, "memory_low")
            assert api.put_queue("q", ack_timeout_s=20)["ack_timeout_s"] == 20, "an update is no creation"
            sub = requests.put(api.url + "/v1/queues/fanout/subscribers/new", timeout=10, headers=api.headers)
            assert (sub.status_code, sub.json()["error"]["code"]) == (503, "memory_low")
            api.request("PUT", "/v1/queues/fanout/subscribers/old")
            assert api.get("fanout", subscriber="first-get") == [], "a new subscriber's first get works"
            got = api.get("q", max_messages=10)
            assert len(got) == 5, "the three waiting, and the two sends taken in yellow and orange"
            api.request("POST", "/v1/queues/q/extend", {"ids": [got[0]["id"]], "seconds": 30})
            api.request("POST", "/v1/queues/q/nack", {"ids": [got[1]["id"]], "reason": "bad"})
            assert api.ack("q", receipts=[m["receipt"] for m in got[2:]]) == 3
            assert len(list(api.browse("q"))) == 1
            assert api.request("DELETE", "/v1/queues/q/messages", {"all": True})["deleted"] == 1
            assert api.request("DELETE", "/v1/queues/q/dead-letters", {"all": True})["deleted"] == 1
            assert node.ready().status_code == 200, "a node in red is still ready: consumers need it"
            metrics = owner.request("GET", "/metrics").text
            assert 'atomq_memory_state{state="red"} 1.0' in metrics
            assert 'atomq_memory_state_changes_total{state="red"} 1.0' in metrics
            assert "atomq_sends_memory_low_total" in metrics
        finally:
            at("green")
        assert send(0).status_code == 201
    states = [c["state"] for c in owner("GET", "/v1/server", status=200)["memory_history"]]
    assert states[:4] == ["green", "red", "orange", "yellow"], "newest first"
    log = node.log_path.read_text()
    assert log.count("memory state red") == 1 and log.count("memory state orange") == 1


def test_a_tenant_fills_the_store_to_red_and_consumers_drain_it_to_green(serve: ServeFactory) -> None:
    """The fill test: batches of priority 2, 5 and 8 in turn fill the store state by state; the
    node never answers 500, every refusal is the contract's, each state takes only the priorities
    it should, and nothing answered 201 is lost."""
    node = serve("--workers", "0", http_workers=1)
    store = node.redis()
    store.config_set("maxmemory", int(store.info("memory")["used_memory"]) + 24 * 1024 * 1024)
    owner = node.owner()
    statuses: Counter[tuple[int, str]] = Counter()
    taken: dict[str, set[int]] = {}
    accepted: set[str] = set()
    with node.tenant_client("filler") as api:
        api.put_queue("q")
        refused_in_red = sends = 0
        while refused_in_red < 5:
            sends += 1
            assert sends < 20_000, "the store never reached red"
            priority = (2, 5, 8)[sends % 3]
            body = {"messages": [{"documents": [{"data": "y" * 2048}], "priority": priority}] * 20}
            answer = requests.post(api.url + "/v1/queues/q/messages", json=body, timeout=10,
                                   headers=api.headers)
            code = answer.json()["error"]["code"] if answer.status_code >= 400 else ""
            statuses[(answer.status_code, code)] += 1
            state = answer.headers["X-Atomq-Memory-State"]
            if answer.status_code == 201:
                accepted.update(answer.json()["ids"])
                taken.setdefault(state, set()).add(priority)
            elif state == "red":
                refused_in_red += 1
        assert set(statuses) <= {(201, ""), (503, "memory_low")}, statuses
        assert taken["green"] == {2, 5, 8}
        assert taken.get("yellow", {5}) <= {5, 8} and taken.get("orange", {8}) <= {8} and "red" not in taken, taken
        acked: set[str] = set()
        while True:
            got = api.get("q", max_messages=500)
            if not got:
                break
            api.ack("q", receipts=[m["receipt"] for m in got])
            acked.update(m["id"] for m in got)
        assert acked == accepted, "every message answered 201 was delivered"
        wait_until(lambda: owner("GET", "/v1/server", status=200)["memory_state"] == "green", 10,
                   "the drained store back to green")
        assert api.send_texts("q", ["after"]) and len(api.get("q")) == 1


def test_on_a_cluster_each_tenant_is_judged_by_its_own_primary(serve: ServeFactory, valkey_cluster: ValkeyCluster,
                                                               valkey: EmbeddedValkey) -> None:
    """A tenant's keys live on one primary: a full primary refuses its tenants' sends while the
    others' go on; the server's state is its fullest primary's."""
    # The session's cluster may have recorded another test's owner key: this one takes over.
    node = serve("--redis-url", valkey_cluster.url, "--rq-redis-url", str(valkey.tcp_url), "--workers", "0",
                 "--replace-owner-key", http_workers=1)
    owner = node.owner()
    masters = valkey_cluster.masters()

    def master_of(tenant_id: str) -> int:
        slot = key_slot(tenant_id.encode())
        return next(port for port, first, last in masters if first <= slot <= last)

    tenants: dict[int, tuple[str, str]] = {}
    while len(tenants) < 2:
        created = owner("POST", "/v1/tenants", {"name": f"shard-{len(tenants)}-{uuid.uuid4().hex[:6]}"}, 201)
        tenants.setdefault(master_of(created["id"]), (created["id"], created["api_key"]))
    (full_port, (full_id, full_key)), (_, (other_id, other_key)) = list(tenants.items())[:2]
    body = {"messages": [{"documents": [{"data": "x"}]}]}
    with redis.Redis(port=full_port) as full_node, Http(node.url, full_key) as full, \
            Http(node.url, other_key) as other:
        full("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        other("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        full_node.config_set("maxmemory", int(full_node.info("memory")["used_memory"]) + 64 * 1024)
        try:
            # Refused by the state of its primary once the node reads it (Valkey's own refusal, the
            # same 503, may come first).
            wait_until(lambda: "memory state is red" in full.request("POST", "/v1/queues/q/messages", body).text,
                       5, "the full primary's tenant refused by its state")
            assert other("POST", "/v1/queues/q/messages", body, 201)["ids"], "another primary's tenant sends on"
            wait_until(lambda: owner("GET", "/v1/server", status=200)["memory_state"] == "red", 5,
                       "the server's state: its fullest primary's")
            # Each tenant's answers name the state of its own primary, the one its sends are judged by.
            sent = other.request("POST", "/v1/queues/q/messages", body)
            assert sent.status_code == 201 and sent.headers["X-Atomq-Memory-State"] == "green"
            refused = full.request("POST", "/v1/queues/q/messages", body)
            assert refused.status_code == 503 and refused.headers["X-Atomq-Memory-State"] == "red"
            assert len(full("POST", "/v1/queues/q/get", {"max": 5}, 200)["messages"]) >= 1, "its consumers go on"
        finally:
            full_node.config_set("maxmemory", 0)
        wait_until(lambda: full.request("POST", "/v1/queues/q/messages", body).status_code == 201, 5,
                   "the primary's tenant sending again")
    for tenant_id in (full_id, other_id):
        owner("DELETE", f"/v1/tenants/{tenant_id}", status=204)
