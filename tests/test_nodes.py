"""Several nodes on one store: what one node does holds on the others, and a node whose owner key
or rq Redis differs from the others' refuses to start."""

from __future__ import annotations

import secrets
import signal
from pathlib import Path

from atomq import __version__
from atomq.platform.store.connection import open_redis
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.storage import Storage
from atomq.platform.watch.nodes import NodeRecords
from support.ports import free_port
from support.served_node import Http, ServeFactory
from support.valkey_cluster import ValkeyCluster
from support.waiting import wait_until


def exporter_flag(node_metrics: str) -> float:
    (line,) = [line for line in node_metrics.splitlines() if line.startswith("atomq_metrics_exporter{")]
    return float(line.rsplit(" ", 1)[1])


def test_two_nodes_on_one_cluster_share_keys_revocations_settings_and_messages(
        serve: ServeFactory, valkey_cluster: ValkeyCluster, valkey: EmbeddedValkey) -> None:
    store = ("--redis-url", valkey_cluster.url, "--rq-redis-url", str(valkey.tcp_url), "--workers", "0")
    # The session's cluster may have recorded another test's owner key: this one takes over.
    first = serve(*store, "--replace-owner-key", http_workers=1)
    second = serve(*store, http_workers=1)
    assert "without --advertise-url" in first.log_path.read_text(), "a node on a cluster says how it is reached"
    owner_first, owner_second = first.owner(), second.owner()
    created = owner_first("POST", "/v1/tenants", {"name": "shared"}, 201)
    try:
        with Http(second.url, created["api_key"]) as on_second, Http(first.url, created["api_key"]) as on_first:
            on_second("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
            on_first("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "across"}]}]}, 201)
            (m,) = on_second("POST", "/v1/queues/q/get", {"max": 5}, 200)["messages"]
            assert m["documents"][0]["data"] == "across"
            on_first("POST", "/v1/queues/q/ack", {"receipts": [m["receipt"]]}, 200)

        extra = owner_first("POST", f"/v1/tenants/{created['id']}/keys", status=201)
        with Http(first.url, extra["api_key"]) as extra_on_first:
            extra_on_first("GET", "/v1/queues", status=200)
            owner_second("DELETE", f"/v1/tenants/{created['id']}/keys/{extra['key_id']}", status=204)
            extra_on_first("GET", "/v1/queues", status=401)  # at once, on the node that did not revoke it

        owner_first("PATCH", "/v1/server", {"dedupe_window_s": 123}, 200)
        wait_until(lambda: owner_second("GET", "/v1/server", status=200)["dedupe_window_s"] == 123, 3,
                   "the setting on the other node")
        wait_until(lambda: exporter_flag(owner_first.request("GET", "/metrics").text)
                   + exporter_flag(owner_second.request("GET", "/metrics").text) == 1, 10,
                   "one node exporting the store's metrics")
        records = NodeRecords(Storage(open_redis(valkey_cluster.url)))
        wait_until(lambda: {first.url, second.url} <= {r.url for r in records.all()}, 15,
                   "both nodes' records, each rewritten every few seconds by the node's master")
        mine = [r for r in records.all() if r.url in (first.url, second.url)]
        assert len({r.id for r in mine}) == 2 and all(r.version == __version__ and r.workers == [] for r in mine)
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0
        assert second.url not in {r.url for r in records.all()}, "a node that stops takes its record away"
    finally:
        owner_first("PATCH", "/v1/server", {"dedupe_window_s": 300}, 200)
        owner_first("DELETE", f"/v1/tenants/{created['id']}", status=204)


def test_a_node_with_another_owner_key_or_rq_redis_refuses_to_start(serve: ServeFactory, tmp_path: Path) -> None:
    stores = [EmbeddedValkey(tmp_path / name, port=free_port()) for name in ("store", "other-rq")]
    for s in stores:
        s.start()
    try:
        store, other_rq = (str(s.tcp_url) for s in stores)
        running = serve("--redis-url", store, "--workers", "0", http_workers=1)
        other_key = {"ATOMQ_OWNER_KEY": secrets.token_urlsafe(32)}

        refused = serve("--redis-url", store, "--workers", "0", env=other_key, healthy=False)
        assert refused.wait(30) not in (None, 0)
        assert "have another owner key" in refused.log_path.read_text()
        refused = serve("--redis-url", store, "--rq-redis-url", other_rq, "--workers", "0", healthy=False)
        assert refused.wait(30) not in (None, 0)
        assert "use another rq Redis" in refused.log_path.read_text()

        running.owner()("GET", "/v1/tenants", status=200)
        replacing = serve("--redis-url", store, "--workers", "0", "--replace-owner-key", env=other_key,
                          http_workers=1)
        with Http(replacing.url, other_key["ATOMQ_OWNER_KEY"]) as owner:
            owner("GET", "/v1/tenants", status=200)
    finally:
        for s in stores:
            s.stop()
