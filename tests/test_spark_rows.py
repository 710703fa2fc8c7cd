"""Spark processes with a row form, and the executors' sends one request ahead, on real local Spark.

A process with ``rows`` gets its batch as plain Python rows, parallelized straight to the
executors with no DataFrame built on the driver; each partition sends its outputs through a
``PipelinedSender`` (request k+1 made while request k is in flight). The node's API runs in a
thread on a real Valkey; the test drives the supervisor's rounds and the Spark worker.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from atomq.client import AtomqClient, wire
from atomq.platform.store import keys as k
from atomq.spark_workers import processes
from atomq.spark_workers.processes import SPARK
from support.in_process_node import Tenant
from support.listener_processes import registered, spark_rows_report
from support.queues import msg
from support.spark_harness import Harness, drive, spark_harness

OWNER = "owner-key-for-spark-rows-tests"


@pytest.fixture(scope="module")
def harness(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with spark_harness(spark, tmp_path_factory.mktemp("spark-rows"), OWNER, "spark-rows", 120, 1) as made:
        yield made


@pytest.fixture
def tenant(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> Iterator[Tenant]:
    """A tenant, with the row-form process registered as ``report`` and the batch's DataFrame
    made impossible: an execution that built one fails."""
    monkeypatch.setenv(SPARK.env, registered(report=spark_rows_report))
    SPARK.clear()

    def no_frame(*args: Any) -> Any:
        raise AssertionError("a process with a row form got a DataFrame")

    monkeypatch.setattr(processes, "batch_frame", no_frame)
    created = harness.owner.create_tenant(f"spark-rows-{secrets.token_hex(4)}", rate_limit_per_minute=1000)
    try:
        with AtomqClient(harness.url, created["api_key"]) as api:
            yield Tenant(created["id"], api)
    finally:
        SPARK.clear()


def outputs(api: AtomqClient, queue: str) -> list[dict[str, Any]]:
    """The input rows the outputs in ``queue`` report, in the queue's order."""
    return [json.loads(m["documents"][0]["data"]) for m in api.browse(queue)]


def listener(api: AtomqClient, name: str) -> Any:
    return api.request("GET", f"/v1/listeners/{name}")


def requests_counted(harness: Harness, tenant: Tenant) -> int:
    """Requests the node counted against the tenant's rate limit so far."""
    count = harness.services.queues.client.hget(k.tenant_rate_window(tenant.id, harness.services.node_id), "count")
    return int(count or 0)


def test_a_row_process_gets_each_document_as_a_plain_row_with_no_frame_built(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in", access="exclusive")
    api.put_queue("out")
    sent = api.request("POST", "/v1/queues/in/messages", {"messages": [
        wire.message([wire.document("first 1", {"p": "1"}), wire.document(b"\xff\xfe 2")], {"k": "v"}),
        wire.message([wire.document("héllo 3")])]})["ids"]
    api.request("PUT", "/v1/listeners/report", {"queue": "in", "process": "report", "engine": "spark",
                                                "settings": {"to": ["out"]}})
    drive(harness, tenant.id, lambda: listener(api, "report")["executions"] == 1, "the execution", timeout=180)
    assert listener(api, "report")["failures"] == 0
    first, second = sent
    assert outputs(api, "out") == [
        {"message_id": first, "delivery_count": 1, "redelivered": False, "properties": '{"k": "v"}',
         "document_index": 0, "document_id": f"{first}.1", "text": "first 1", "document_properties": '{"p": "1"}',
         "payload": "first 1", "payload_type": "bytes"},
        {"message_id": first, "delivery_count": 1, "redelivered": False, "properties": '{"k": "v"}',
         "document_index": 1, "document_id": f"{first}.2", "text": None, "document_properties": "{}",
         "payload": "\ufffd\ufffd 2", "payload_type": "bytes"},
        {"message_id": second, "delivery_count": 1, "redelivered": False, "properties": "{}",
         "document_index": 0, "document_id": f"{second}.1", "text": "héllo 3", "document_properties": "{}",
         "payload": "héllo 3", "payload_type": "bytes"},
    ]
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"]) == (0, 0)


def test_pipelined_sends_keep_each_destinations_order_and_lose_or_double_nothing(
        harness: Harness, tenant: Tenant) -> None:
    """2,500 documents to two queues by parity: two partitions of 1,250 (local[2]), each sending 625
    to each queue in 7 requests, one ahead of the next. Each queue holds exactly its documents,
    once; within each partition a queue's documents are in the batch's order."""
    api = tenant.api
    api.put_queue("in", access="exclusive")
    for queue in ("even", "odd"):
        api.put_queue(queue)
    docs = [f"doc {i:04d}" for i in range(2500)]
    for first in range(0, len(docs), 500):
        harness.services.queues.send(tenant.id, "in", [msg(d) for d in docs[first:first + 500]])
    before = requests_counted(harness, tenant)
    api.request("PUT", "/v1/listeners/report", {"queue": "in", "process": "report", "engine": "spark",
                                                "batch_size": 2500, "settings": {"to": ["even", "odd"]}})
    drive(harness, tenant.id, lambda: listener(api, "report")["executions"] == 1, "the execution", timeout=180)
    assert listener(api, "report")["failures"] == 0
    for parity, queue in enumerate(("even", "odd")):
        stored = [o["payload"] for o in outputs(api, queue)]
        assert sorted(stored) == docs[parity::2]  # all of them, each once
        for part in (docs[:1250], docs[1250:]):
            assert [d for d in stored if d in set(part)] == part[parity::2]
    assert requests_counted(harness, tenant) - before == 4 * 7
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"]) == (0, 0)


def test_a_refused_request_fails_the_execution_and_what_went_before_is_stored_once(
        harness: Harness, tenant: Tenant) -> None:
    """One partition: 300 outputs to ``out`` (three requests), then 100 to a queue that does not
    exist, then 200 more to ``out``. The fourth request is refused: the partition stops there, with
    the request made after it never sent, and the execution fails with the node's error. The batch
    comes back and fails the same way; the first 300 are stored once, in order, for both tries."""
    api = tenant.api
    api.put_queue("in", access="exclusive", max_redeliveries=10)
    api.put_queue("out")
    docs = [f"doc {i:04d}" for i in range(300)] + [f"missing {i:04d}" for i in range(300, 400)] + \
        [f"doc {i:04d}" for i in range(400, 600)]
    harness.services.queues.send(tenant.id, "in", [msg(d) for d in docs])
    api.request("PUT", "/v1/listeners/report", {"queue": "in", "process": "report", "engine": "spark",
                                                "batch_size": 600,
                                                "settings": {"to": ["out"], "missing": "nowhere"}})
    drive(harness, tenant.id, lambda: listener(api, "report")["failures"] >= 2, "two failed executions", timeout=180)
    state = listener(api, "report")
    assert "nowhere" in state["last_error"], state["last_error"]
    assert [o["payload"] for o in outputs(api, "out")] == docs[:300]
    assert [o["delivery_count"] for o in outputs(api, "out")] == [1] * 300
    queue_in = api.queue("in")
    assert queue_in["depth"] + queue_in["in_flight"] == 600 and queue_in["dead_letters"] == 0
