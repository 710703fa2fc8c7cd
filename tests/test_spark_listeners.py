"""Listeners with engine "spark": executions as DataFrame pipelines on the suite's SparkSession.

The node's API runs in a thread on a real Valkey; the test drives the
supervisor's rounds and the Spark worker, which runs each execution in a
thread of its own in the tenant's FAIR pool.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from atomq.client import AtomqClient, wire
from atomq.errors import AtomqError, QuotaExceeded, RateLimited
from atomq.platform.store import keys as k
from atomq.spark_workers.processes import INPUT_SCHEMA, SPARK, batch_frame, echo_service, echo_service_rows
from atomq.spark_workers.writes import PartitionResult, raise_first_error
from atomq.workers.context import InputDocument, InputMessage
from support.in_process_node import Tenant
from support.listener_processes import registered, spark_forward_with_extra_columns, spark_stall_first_delivery
from support.queues import msg
from support.spark_harness import Harness, spark_harness
from support.spark_harness import drive as spark_harness_drive

OWNER = "owner-key-for-spark-listener-tests"


@pytest.fixture(scope="module")
def harness(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    with spark_harness(spark, tmp_path_factory.mktemp("spark-listeners"), OWNER, "spark-test", 60, 2) as made:
        yield made


@pytest.fixture
def tenant(harness: Harness) -> Iterator[Tenant]:
    created = harness.owner.create_tenant(f"spark-listeners-{secrets.token_hex(4)}", rate_limit_per_minute=1000,
                                           spark_weight=2)
    with AtomqClient(harness.url, created["api_key"]) as api:
        yield Tenant(created["id"], api)


def drive(h: Harness, tenant: Tenant, done: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """Spark executions, and fork executions for comparison, until ``done``."""
    spark_harness_drive(h, tenant.id, done, what, timeout, forks=True)


def texts(api: AtomqClient, queue: str) -> list[str]:
    return [m["documents"][0]["data"] for m in api.browse(queue)]


def test_forward_on_spark_runs_one_execution_for_250_documents_in_3_send_requests(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i}", kind="test") for i in range(250)])
    api.request("PUT", "/v1/listeners/fwd", {"queue": "in", "process": "forward", "engine": "spark",
                                             "batch_size": 250, "settings": {"to": "out"}})
    drive(harness, tenant, lambda: api.request("GET", "/v1/listeners/fwd")["executions"] == 1, "the execution")
    assert sorted(texts(api, "out")) == sorted(f"doc {i}" for i in range(250))
    assert {json.dumps(m["properties"]) for m in api.browse("out")} == {'{"kind": "test"}'}
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"]) == (0, 0)
    window = harness.services.queues.client.hget(k.tenant_rate_window(tenant.id, harness.services.node_id), "count")
    assert int(window) == 3
    pool = harness.worker.spark.sparkContext._jsc.sc().taskScheduler().rootPool().getSchedulableByName(tenant.id)
    assert pool is not None and pool.weight() == 2  # the tenant's FAIR pool, with its spark_weight


def test_a_spark_process_may_return_columns_atomq_does_not_read(
        harness: Harness, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the output columns an execution reads (queue or topic, message_id, the data and the
    properties) are brought back from Spark: others, of any type, are left there."""
    monkeypatch.setenv(SPARK.env, registered(extra=spark_forward_with_extra_columns))
    SPARK.clear()
    try:
        api = tenant.api
        api.put_queue("in")
        api.put_queue("out")
        harness.services.queues.send(tenant.id, "in", [msg(f"doc {i}") for i in range(20)])
        api.request("PUT", "/v1/listeners/extra", {"queue": "in", "process": "extra", "engine": "spark",
                                                   "batch_size": 20, "settings": {"to": "out"}})
        drive(harness, tenant, lambda: api.request("GET", "/v1/listeners/extra")["executions"] == 1,
              "the execution")
        assert api.request("GET", "/v1/listeners/extra")["failures"] == 0
        assert sorted(texts(api, "out")) == sorted(f"doc {i}" for i in range(20))
    finally:
        SPARK.clear()


def test_echo_service_on_spark_gives_the_fork_engines_results(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    inputs = [json.dumps({"msgId": f"m{i}", "n": i}) for i in range(20)] + \
        [json.dumps({"n": 1}), "{broken", "[1, 2]", "plain text"]
    outputs = {}
    for engine in ("fork", "spark"):
        for name in ("tests", "echo", "errors"):
            api.put_queue(f"{engine}-{name}")
        api.send_texts(f"{engine}-tests", inputs)
        api.request("PUT", f"/v1/listeners/echo-{engine}", {
            "queue": f"{engine}-tests", "process": "echo-service", "engine": engine, "batch_size": 50,
            "settings": {"echo_queue": f"{engine}-echo", "errors_queue": f"{engine}-errors"}})

    def both_done() -> bool:
        return all(api.request("GET", f"/v1/listeners/echo-{e}")["executions"] == 1 for e in ("fork", "spark"))

    drive(harness, tenant, both_done, "both engines' executions")
    for engine in ("fork", "spark"):
        bodies = []
        for queue in ("echo", "errors"):
            for m in api.browse(f"{engine}-{queue}"):
                body = json.loads(m["documents"][0]["data"])
                body.pop("message_id")  # the input's id, different per engine's copy
                bodies.append((queue, json.dumps(body, sort_keys=True), json.dumps(m["properties"], sort_keys=True)))
        outputs[engine] = sorted(bodies)
        assert api.queue(f"{engine}-tests")["in_flight"] == 0
    assert outputs["spark"] == outputs["fork"]
    assert sum(1 for q, _, _ in outputs["spark"] if q == "echo") == 20
    assert sum(1 for q, _, _ in outputs["spark"] if q == "errors") == 4


def test_a_spark_execution_past_its_time_limit_is_cancelled_and_fails(
        harness: Harness, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARK.env, registered(stall=spark_stall_first_delivery))
    SPARK.clear()
    monkeypatch.setattr(harness.supervisor, "config", replace(harness.supervisor.config, execution_timeout_s=8))
    api = tenant.api
    api.put_queue("slow-in")
    api.put_queue("slow-out")
    api.send_texts("slow-in", ["a", "b"])
    api.request("PUT", "/v1/listeners/slow", {"queue": "slow-in", "process": "stall", "engine": "spark",
                                              "settings": {"to": "slow-out", "sleep_s": 600}})
    try:
        drive(harness, tenant, lambda: api.request("GET", "/v1/listeners/slow")["executions"] == 2,
              "the cancelled execution and its successful retry")
    finally:
        SPARK.clear()
    listener = api.request("GET", "/v1/listeners/slow")
    assert listener["failures"] == 1 and "time limit of 8 s" in listener["last_error"]
    assert sorted(texts(api, "slow-out")) == ["a", "b"]
    queue_in = api.queue("slow-in")
    assert (queue_in["depth"], queue_in["in_flight"], queue_in["dead_letters"]) == (0, 0, 0)


def test_echo_service_publishes_and_keeps_its_checkpoint_alike_on_both_engines(
        harness: Harness, tenant: Tenant) -> None:
    """Topics in and out and a checkpoint in a last-value queue (seed 002, version 3): redelivered
    messages at or before the checkpoint are recognised and not processed again, on either engine."""
    api = tenant.api
    inputs = [json.dumps({"msgId": f"m-{i}"}) for i in range(3)] + ["not json"]
    outputs = {}
    for engine in ("fork", "spark"):
        api.put_queue(f"{engine}-input", max_redeliveries=5)
        api.put_queue(f"{engine}-checkpoints", last_value=True, topics=[f"{engine}/checkpoint"])
        api.put_queue(f"{engine}-out", topics=[f"{engine}/echo/>", f"{engine}/errors/>"])
        ids = api.send_texts(f"{engine}-input", inputs)
        taken = api.get(f"{engine}-input", max_messages=10)
        assert api.nack(f"{engine}-input", receipts=[m["receipt"] for m in taken])["requeued"] == 4
        # As an execution that processed the first two and died before finishing leaves it:
        mark = wire.message([wire.document(json.dumps({"last_message_id": ids[1], "message_ids": ids[:2]}))])
        assert api.publish(f"{engine}/checkpoint", [mark])["queues"] == [f"{engine}-checkpoints"]
        api.request("PUT", f"/v1/listeners/echo-{engine}", {
            "queue": f"{engine}-input", "process": "echo-service", "engine": engine, "settings": {
                "echo_topic": f"{engine}/echo", "errors_topic": f"{engine}/errors",
                "checkpoint_queue": f"{engine}-checkpoints", "checkpoint_topic": f"{engine}/checkpoint"}})

    def settled() -> bool:
        return all(api.queue(f"{e}-input")["depth"] + api.queue(f"{e}-input")["in_flight"] == 0
                   for e in ("fork", "spark"))

    drive(harness, tenant, settled, "both engines' executions")
    for engine in ("fork", "spark"):
        outputs[engine] = sorted(m["topic"].split("/", 1)[1] for m in api.browse(f"{engine}-out"))
        (mark,) = api.browse(f"{engine}-checkpoints")
        assert json.loads(mark["documents"][0]["data"])["last_message_id"] == ids_of(api, engine)[-1]
    assert outputs["spark"] == outputs["fork"] == ["echo/m-2", "errors/not-JSON"]


def ids_of(api: AtomqClient, engine: str) -> list[str]:
    """The ids of the engine's inputs, from the messages its outputs name."""
    return sorted(json.loads(m["documents"][0]["data"])["message_id"] for m in api.browse(f"{engine}-out"))


def test_the_batch_reaches_a_spark_process_as_a_frame_of_the_input_schema_row_per_document(spark: Any) -> None:
    """Handed to Spark as an Arrow table: the same schema and values a process would read from rows."""
    batch = [
        InputMessage("1-000000000001", 2, {"k": "v"},
                     (InputDocument(b"first", {"p": "1"}), InputDocument(b"\xff\xfe not text"))),
        InputMessage("1-000000000002", 1, {}, (InputDocument("héllo".encode()),)),
    ]
    frame = batch_frame(spark, batch)
    assert frame.schema == INPUT_SCHEMA
    rows = sorted(frame.collect(), key=lambda r: (r["message_id"], r["document_index"]))
    assert [r.asDict() for r in rows] == [
        {"message_id": "1-000000000001", "delivery_count": 2, "redelivered": True, "properties": '{"k": "v"}',
         "document_index": 0, "document_id": "1-000000000001.1", "payload": bytearray(b"first"), "text": "first",
         "document_properties": '{"p": "1"}'},
        {"message_id": "1-000000000001", "delivery_count": 2, "redelivered": True, "properties": '{"k": "v"}',
         "document_index": 1, "document_id": "1-000000000001.2", "payload": bytearray(b"\xff\xfe not text"),
         "text": None, "document_properties": "{}"},
        {"message_id": "1-000000000002", "delivery_count": 1, "redelivered": False, "properties": "{}",
         "document_index": 0, "document_id": "1-000000000002.1", "payload": bytearray("héllo".encode()),
         "text": "héllo", "document_properties": "{}"},
    ]


def test_a_batch_of_2500_is_two_partitions_whose_executors_send_their_outputs_in_order(
        harness: Harness, tenant: Tenant) -> None:
    """``forward`` gives its outputs' positions, so the executors write them: a partition a core
    (two of 1,250 rows), each sending its rows in order in requests of 100 (13 each), a message of
    several documents one output each."""
    api = tenant.api
    api.put_queue("in", access="exclusive")
    api.put_queue("out")
    several = wire.message([wire.document(f"part {i}") for i in range(3)])
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i:04d}") for i in range(997)])
    api.request("POST", "/v1/queues/in/messages", {"messages": [several]})
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i:04d}") for i in range(997, 1997)])
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i:04d}") for i in range(1997, 2497)])
    api.request("PUT", "/v1/listeners/wide", {"queue": "in", "process": "forward", "engine": "spark",
                                              "batch_size": 2498, "settings": {"to": "out"}})
    drive(harness, tenant, lambda: api.request("GET", "/v1/listeners/wide")["executions"] == 1, "the execution")
    stored = texts(api, "out")
    expected = [f"doc {i:04d}" for i in range(997)] + [f"part {i}" for i in range(3)] + \
        [f"doc {i:04d}" for i in range(997, 2497)]
    assert sorted(stored) == sorted(expected)
    parts = [expected[:1250], expected[1250:]]
    for part in parts:  # each partition's outputs in their order; the partitions side by side
        assert [t for t in stored if t in set(part)] == part
    window = harness.services.queues.client.hget(k.tenant_rate_window(tenant.id, harness.services.node_id), "count")
    assert int(window) == 26 + 1  # the outputs' requests, and the test's send of the message of three
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"]) == (0, 0)


def test_a_partitions_refusal_is_raised_on_the_driver_as_the_node_answered_it() -> None:
    """A rate limit an executor met keeps its retry_after, so the execution defers its batch as the
    driver's own send would have; an error class that cannot be made again still says what failed."""
    sent = PartitionResult(100, 0, None)
    with pytest.raises(RateLimited) as limited:
        raise_first_error([sent, PartitionResult(0, 0, ("RateLimited", "slow down", {"retry_after": 7}))])
    assert limited.value.retry_after == 7 and limited.value.message == "slow down"
    with pytest.raises(QuotaExceeded):
        raise_first_error([PartitionResult(0, 0, ("QuotaExceeded", "full", {"limit": 1, "used": 1}))])
    with pytest.raises(AtomqError) as odd:
        raise_first_error([PartitionResult(0, 0, ("RateLimited", "no details", {}))])
    assert type(odd.value) is AtomqError and odd.value.message == "no details"
    raise_first_error([sent])


@pytest.mark.parametrize("settings", [{"echo_queue": "e", "errors_queue": "x"},
                                      {"echo_topic": "boomi/echo", "errors_topic": "boomi/errors/echo-service"}])
def test_the_echo_services_row_function_gives_its_dataframes_rows(spark: Any, settings: dict[str, Any]) -> None:
    """The executors run ``echo_service.rows`` on the rows they send; the DataFrame pipeline is the
    process's definition, and the two give the same output rows."""
    payloads = [b'{"msgId": "a/b c", "n": 1}', b'{"n": 2}', b"\xff not JSON", b"[1]"]
    batch = [InputMessage(f"1-00000000000{i}", 1, {}, (InputDocument(p),)) for i, p in enumerate(payloads)]
    batch.append(InputMessage("1-000000000009", 1, {}, tuple(InputDocument(p) for p in payloads[:2])))
    frame = batch_frame(spark, batch)
    columns = ("queue", "topic", "message_id", "position", "text", "properties")
    wanted = sorted(tuple(r.asDict().get(c) for c in columns) for r in echo_service(frame, settings).collect())
    made = echo_service_rows(settings)
    got = sorted(tuple(o.get(c) for c in columns) for r in frame.collect() for o in made(r.asDict()))
    assert got == wanted and len(got) == 6
