"""``GET /metrics`` after known traffic: exact counts, bounded labels, one exporting node."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from atomq.api import create_app
from atomq.api.auth import METRICS_PUBLIC
from atomq.api.metrics import METRICS_MAX_QUEUES, METRICS_WAIT_S, QUEUE_COUNTERS, REFUSAL_COUNTERS, TenantFigures
from atomq.client import AtomqClient
from atomq.errors import QuotaExceeded, RateLimited, StorageError
from atomq.platform.store import keys as k
from atomq.platform.store.lease import Lease
from atomq.platform.watch import metrics_builds
from atomq.platform.watch.counters import QUEUE_COUNTS, REFUSALS
from atomq.workers import processes
from support.in_process_executions import run_executions
from support.in_process_node import InProcessNode
from support.listener_processes import always_fail, registered
from support.waiting import wait_until

OWNER = "owner-key-for-metrics-tests"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    with InProcessNode(tmp_path_factory.mktemp("metrics"), OWNER) as node, pytest.MonkeyPatch.context() as patch:
        # A scrape here waits for the figures read after its traffic, however slow the machine: also
        # after a read that a loaded machine made costly (the one test of that rule sets it back).
        node.app.config[METRICS_WAIT_S] = 60
        patch.setattr(metrics_builds, "CHEAP_BUILD_S", math.inf)
        yield node


def scrape(node: InProcessNode, key: str = OWNER) -> Samples:
    response = requests.get(f"{node.url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def value(samples: Samples, metric: str, **labels: str) -> float:
    return samples[(metric, frozenset(labels.items()))]


def export_here(node: InProcessNode) -> Lease:
    """This node takes the maintenance lease, as its maintenance loop would."""
    lease = Lease(node.services.queues.storage, k.MAINTENANCE_LEASE, f"{node.services.node_id}:1", ttl_s=600)
    assert lease.acquire()
    return lease


def reads_wait_for(release: threading.Event, monkeypatch: pytest.MonkeyPatch, node: InProcessNode) -> None:
    """From now on a read of the tenants' figures outlasts a scrape's wait (0.3 s) until ``release``."""
    read = TenantFigures.read
    monkeypatch.setattr(TenantFigures, "read", lambda self: release.wait(30) and read(self))
    monkeypatch.setitem(node.app.config, METRICS_WAIT_S, 0.3)


def test_only_the_lease_holder_exports_the_shared_figures(node: InProcessNode) -> None:
    lease = Lease(node.services.queues.storage, k.MAINTENANCE_LEASE, "n_elsewhere:1", ttl_s=600)
    assert lease.acquire()
    try:
        samples = scrape(node)
        assert value(samples, "atomq_metrics_exporter", node=node.services.node_id) == 0
        assert not [name for name, _ in samples if name.startswith("atomq_queue_")]
    finally:
        lease.release()
    export_here(node).release()


def test_counts_after_known_traffic_are_exact(node: InProcessNode) -> None:
    owner = node.owner
    busy = owner.create_tenant("busy")
    limited = owner.create_tenant("limited", rate_limit_per_minute=1, disk_quota_bytes=1000)
    lease = export_here(node)
    try:
        with AtomqClient(node.url, busy["api_key"]) as api, AtomqClient(node.url, limited["api_key"]) as small:
            api.put_queue("orders", max_redeliveries=1)
            ids = api.send_texts("orders", ["a", "b", "c"]) + api.send_texts("orders", ["d", "e"])
            assert len(api.get("orders", max_messages=10)) == 5
            api.ack("orders", ids=ids[:2])
            assert api.nack("orders", ids=ids[2:])["requeued"] == 3
            again = api.get("orders", max_messages=10, wait_ms=5000)  # redelivered after the first delay, 1 s
            assert sorted(m["id"] for m in again) == sorted(ids[2:])
            assert api.nack("orders", ids=[ids[2]], reason="bad")["dead_lettered"] == 1
            api.ack("orders", ids=ids[3:])
            api.send_texts("orders", ["waiting"])

            small.put_queue("q")
            small.send_texts("q", ["x" * 100])
            with pytest.raises(RateLimited):
                small.send_texts("q", ["y"])
            owner.update_tenant(limited["id"], rate_limit_per_minute=0)
            node.services._attachments.clear()  # as the node would re-read them within a few seconds
            with pytest.raises(QuotaExceeded):
                small.send_texts("q", ["z" * 300])

        samples = scrape(node)
        busy_orders = {"tenant": busy["id"], "queue": "orders"}
        assert value(samples, "atomq_metrics_exporter", node=node.services.node_id) == 1
        assert value(samples, "atomq_tenant_info", tenant=busy["id"], name="busy") == 1
        expected = {"atomq_messages_sent_total": 6, "atomq_messages_delivered_total": 8,
                    "atomq_messages_redelivered_total": 3, "atomq_messages_acked_total": 4,
                    "atomq_messages_nacked_total": 4, "atomq_messages_dead_lettered_total": 1,
                    "atomq_ack_timeouts_total": 0, "atomq_queue_depth": 1, "atomq_queue_in_flight": 0,
                    "atomq_queue_scheduled": 0, "atomq_queue_dead_letters": 1}
        assert {name: value(samples, name, **busy_orders) for name in expected} == expected
        assert value(samples, "atomq_tenant_stored_messages", tenant=busy["id"]) == 2
        assert value(samples, "atomq_sends_rate_limited_total", tenant=limited["id"]) == 1
        assert value(samples, "atomq_sends_quota_rejected_total", tenant=limited["id"]) == 1
        assert value(samples, "atomq_sends_rate_limited_total", tenant=busy["id"]) == 0
        assert value(samples, "atomq_tenant_disk_quota_bytes", tenant=limited["id"]) == 1000
        assert value(samples, "atomq_messages_sent_total", tenant=limited["id"], queue="q") == 1

        # Three send requests of the busy tenant, each timed once by this node's only process.
        send_route = {"tenant": busy["id"], "method": "POST", "route": "/v1/queues/{name}/messages"}
        assert value(samples, "atomq_request_duration_seconds_count", **send_route) == 3
        assert value(samples, "atomq_request_duration_seconds_bucket", le="+Inf", **send_route) == 3
        assert value(samples, "atomq_request_duration_seconds_sum", **send_route) > 0
        for name in ("atomq_server_up", "atomq_message_store_bytes", "atomq_memory_bytes"):
            assert (name, frozenset()) in samples
        assert value(samples, "atomq_memory_state", state="green") == 1
        assert not [labels for name, labels in samples if dict(labels).get("queue") == "other"]
    finally:
        lease.release()


def test_listener_executions_and_failures_are_exact(node: InProcessNode, monkeypatch) -> None:
    monkeypatch.setenv(processes.FORK.env, registered(fail=always_fail))
    processes.FORK.clear()
    tenant = node.owner.create_tenant("listening")
    lease = export_here(node)
    try:
        with AtomqClient(node.url, tenant["api_key"]) as api:
            for name in ("in", "out", "bad"):
                api.put_queue(name, max_redeliveries=0)
            api.put_listener("fwd", "in", "forward", batch_size=10, settings={"to": "out"})
            api.put_listener("failing", "bad", "fail", batch_size=10)
            api.send_texts("in", [f"m{i}" for i in range(25)])
            api.send_texts("bad", ["x", "y"])
            run_executions(node, tenant["id"], lambda: api.queue("out")["depth"] == 25
                           and api.queue("bad")["dead_letters"] == 2)
            states = {li["name"]: li["state"] for li in api.listeners()}
        samples = scrape(node)
        # 25 messages waiting when the listener starts: batches of 10, 10 and 5. Two poison
        # messages: one execution, failed, and with no redelivery allowed both are dead letters.
        expected = {"fwd": (3, 0), "failing": (1, 1)}
        for name, (executions, failures) in expected.items():
            labels = {"tenant": tenant["id"], "listener": name}
            assert value(samples, "atomq_listener_executions_total", **labels) == executions
            assert value(samples, "atomq_listener_failures_total", **labels) == failures
            assert value(samples, "atomq_listener_running", **labels) == (states[name] == "running")
        assert states["fwd"] == "running"
        assert value(samples, "atomq_messages_sent_total", tenant=tenant["id"], queue="out") == 25
        assert value(samples, "atomq_messages_dead_lettered_total", tenant=tenant["id"], queue="bad") == 2
    finally:
        lease.release()
        processes.FORK.clear()


def test_move_tasks_and_groups_are_exact(node: InProcessNode) -> None:
    tenant = node.owner.create_tenant("moving")
    lease = export_here(node)
    try:
        with AtomqClient(node.url, tenant["api_key"]) as api:
            api.put_queue("dlq")
            api.put_queue("retry")
            api.put_queue("work", max_redeliveries=0, dead_letter_queue="dlq")
            api.send_texts("work", [f"w{i}" for i in range(5)])
            assert api.nack("work", ids=[m["id"] for m in api.get("work", max_messages=5)])["dead_lettered"] == 5
            task = api.start_move("dlq", destination="retry", max_per_second=2)
            node.services.queues.maintain(tenant["id"])  # one step: 2 of the 5 move
            api.put_queue("g", ordering="group")
            api.send("g", [{"documents": [{"data": text}], "group": group}
                           for text, group in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("b2", "b"))])
            assert len(api.get("g", max_messages=10)) == 2, "one head of each group"

            def of(queue: str) -> dict[str, str]:
                return {"tenant": tenant["id"], "queue": queue}

            samples = scrape(node)
            assert value(samples, "atomq_move_tasks_running", **of("dlq")) == 1
            assert value(samples, "atomq_move_tasks_running", **of("retry")) == 0
            assert value(samples, "atomq_messages_moved_total", **of("dlq")) == 2
            assert value(samples, "atomq_messages_moved_total", **of("retry")) == 0
            assert (value(samples, "atomq_queue_depth", **of("dlq")), value(samples, "atomq_queue_depth",
                                                                             **of("retry"))) == (3, 2)
            assert value(samples, "atomq_queue_groups", **of("g")) == 2
            assert value(samples, "atomq_queue_held_by_group", **of("g")) == 3
            assert value(samples, "atomq_queue_groups", **of("dlq")) == 0

            api.cancel_move("dlq", task["id"])
            samples = scrape(node)
            assert value(samples, "atomq_move_tasks_running", **of("dlq")) == 0
            assert value(samples, "atomq_messages_moved_total", **of("dlq")) == 2, "a counter keeps what moved"
    finally:
        lease.release()


def test_every_count_the_scripts_keep_has_its_metric() -> None:
    assert set(QUEUE_COUNTERS) == set(QUEUE_COUNTS) and set(REFUSAL_COUNTERS) == set(REFUSALS)


def test_queues_past_the_cap_are_added_up_under_other(node: InProcessNode, monkeypatch) -> None:
    tenant = node.owner.create_tenant("many")
    monkeypatch.setitem(node.app.config, METRICS_MAX_QUEUES, 2)
    lease = export_here(node)
    try:
        with AtomqClient(node.url, tenant["api_key"]) as api:
            for i, name in enumerate(["a", "b", "c", "d"]):
                api.put_queue(name)
                api.send_texts(name, ["m"] * (i + 1))
        samples = scrape(node)
        depth = {dict(labels)["queue"]: v for name, labels in samples
                 if name == "atomq_queue_depth" and dict(labels)["tenant"] == tenant["id"]
                 for v in [samples[(name, labels)]]}
        assert depth == {"a": 1, "b": 2, "other": 3 + 4}
    finally:
        lease.release()


def test_metrics_need_the_owner_key_unless_public(node: InProcessNode, monkeypatch) -> None:
    tenant = node.owner.create_tenant("nosy")
    assert requests.get(f"{node.url}/metrics", timeout=10).status_code == 401
    refused = requests.get(f"{node.url}/metrics", headers={"Authorization": f"Bearer {tenant['api_key']}"},
                           timeout=10)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    monkeypatch.setitem(node.app.config, METRICS_PUBLIC, True)
    assert requests.get(f"{node.url}/metrics", timeout=10).status_code == 200


def test_a_slow_read_of_the_tenants_answers_with_the_last_figures_and_their_age(node: InProcessNode,
                                                                                 monkeypatch) -> None:
    """With thousands of tenants the read outlasts a scrape's time-out: the scrape answers in time
    with the last figures read, says how old they are, and the next scrape has the new ones."""
    tenant = node.owner.create_tenant("slowly-read")
    lease = export_here(node)
    release = threading.Event()
    try:
        with AtomqClient(node.url, tenant["api_key"]) as api:
            api.put_queue("q")
            api.send_texts("q", ["a"])
            first = scrape(node)
            assert value(first, "atomq_messages_sent_total", tenant=tenant["id"], queue="q") == 1
            assert value(first, "atomq_metrics_tenant_figures_age_seconds") >= 0
            api.send_texts("q", ["b"])
            reads_wait_for(release, monkeypatch, node)
            started = time.monotonic()
            held = scrape(node)
            assert time.monotonic() - started < 5
            assert value(held, "atomq_messages_sent_total", tenant=tenant["id"], queue="q") == 1
            assert value(held, "atomq_metrics_tenant_figures_age_seconds") >= 0.3
            assert value(held, "atomq_server_up") == 1  # the server's figures are read at every scrape
            release.set()
            wait_until(lambda: value(scrape(node), "atomq_messages_sent_total", tenant=tenant["id"], queue="q") == 2,
                       30, "a scrape after the slow read with its figures")
    finally:
        release.set()
        lease.release()


def test_a_read_of_the_tenants_that_fails_fails_the_scrape_that_waits_for_it(node: InProcessNode,
                                                                             monkeypatch) -> None:
    lease = export_here(node)
    node.client.delete(k.METRICS_TENANT_FIGURES_KEY)  # whatever an earlier test's build left
    try:
        def down(self: TenantFigures) -> list:
            raise StorageError("the store is down")

        monkeypatch.setattr(TenantFigures, "read", down)
        response = requests.get(f"{node.url}/metrics", headers={"Authorization": f"Bearer {OWNER}"}, timeout=30)
        assert response.status_code == 503 and response.json()["error"]["code"] == "storage_unavailable"
    finally:
        lease.release()


def test_every_process_serves_the_newest_build_so_counters_never_go_back(node: InProcessNode, monkeypatch) -> None:
    """A node answers from several processes: a scrape reaching one must not see older figures
    than the scrape before it saw from another."""
    tenant = node.owner.create_tenant("two-processes")
    other_process = create_app(node.services, {METRICS_MAX_QUEUES: 100}).test_client()
    lease = export_here(node)
    release = threading.Event()
    try:
        with AtomqClient(node.url, tenant["api_key"]) as api:
            api.put_queue("q")
            api.send_texts("q", ["a"])
            assert value(scrape(node), "atomq_messages_sent_total", tenant=tenant["id"], queue="q") == 1
            api.send_texts("q", ["b"])
            answer = other_process.get("/metrics", headers={"Authorization": f"Bearer {OWNER}"})
            seen = {(s.name, frozenset(s.labels.items())): s.value
                    for f in text_string_to_metric_families(answer.text) for s in f.samples}
            assert value(seen, "atomq_messages_sent_total", tenant=tenant["id"], queue="q") == 2
            api.send_texts("q", ["c"])
            reads_wait_for(release, monkeypatch, node)
            assert value(scrape(node), "atomq_messages_sent_total", tenant=tenant["id"], queue="q") == 2, \
                "the other process's build, newer than this one's last"
    finally:
        release.set()
        lease.release()


def test_after_a_costly_read_the_next_waits_five_times_as_long(node: InProcessNode,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Scraped every 15 s, a platform whose read takes 17 s would keep a core reading every tenant:
    a read of more than a second is served until five times its time has passed."""
    monkeypatch.setattr(metrics_builds, "CHEAP_BUILD_S", 1.0)
    lease = export_here(node)
    marker = b"# HELP atomq_marker_total a build stored by hand\n# TYPE atomq_marker_total counter\n" \
             b"atomq_marker_total 1.0\n"
    try:
        # A scrape waits for a build begun after it: none is left under way to store over the marker.
        scrape(node)
        node.client.hset(k.METRICS_TENANT_FIGURES_KEY, mapping={
            "text": marker, "started_at": repr(time.time() - 5), "took_s": "2.0"})
        assert value(scrape(node), "atomq_marker_total") == 1, "5 s after a read of 2 s: served as it is"
        node.client.hset(k.METRICS_TENANT_FIGURES_KEY, "started_at", repr(time.time() - 11))
        fresh = scrape(node)
        assert ("atomq_marker_total", frozenset()) not in fresh, "11 s after: read again"
        assert float(node.client.hget(k.METRICS_TENANT_FIGURES_KEY, "took_s")) < 2.0
    finally:
        lease.release()
