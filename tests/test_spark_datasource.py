"""The ``atomq`` PySpark data source against a real node (in-process API, real Valkey) and local Spark."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from atomq.client import AtomqClient
from atomq.platform.store import keys as k
from support.in_process_node import InProcessNode
from support.waiting import wait_until

OWNER = "owner-key-for-spark-tests"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    with InProcessNode(tmp_path_factory.mktemp("spark"), OWNER) as node:
        yield node


@dataclass
class Tenant:
    id: str
    key: str
    api: AtomqClient

    def options(self, node: InProcessNode, **more: str) -> dict[str, str]:
        return {"url": node.url, "key": self.key, **more}


@pytest.fixture
def tenant(node: InProcessNode) -> Iterator[Tenant]:
    created = node.owner.create_tenant(f"spark-{secrets.token_hex(4)}", rate_limit_per_minute=1000)  # so the node counts requests
    with AtomqClient(node.url, created["api_key"]) as api:
        yield Tenant(created["id"], created["api_key"], api)


def test_a_batch_read_browses_messages_and_documents_without_consuming_them(
        spark: Any, node: InProcessNode, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("orders")
    api.send("orders", [
        {"documents": [{"data": "first", "properties": {"n": 1}}, {"data_base64": "//4="}], "properties": {"k": "v"}},
        {"documents": [{"data": "second"}]},
    ])
    df = spark.read.format("atomq").options(**tenant.options(node, queue="orders")).load()
    rows = sorted(df.collect(), key=lambda r: (r.message_id, r.document_index))
    assert [(r.text, r.document_index, r.state) for r in rows] == [
        ("first", 0, "ready"), (None, 1, "ready"), ("second", 0, "ready")]
    assert rows[1].payload == b"\xff\xfe"
    assert json.loads(rows[0].properties) == {"k": "v"} and json.loads(rows[0].document_properties) == {"n": 1}
    assert rows[0].message_id == rows[1].message_id != rows[2].message_id
    assert api.queue("orders")["depth"] == 2  # nothing consumed


def test_a_batch_read_of_dead_letters_carries_the_reason(spark: Any, node: InProcessNode, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("jobs", max_redeliveries=0)
    api.send_texts("jobs", ["poison"])
    (got,) = api.get("jobs")
    api.nack("jobs", receipts=[got["receipt"]], reason="bad input")
    df = spark.read.format("atomq").options(**tenant.options(node, queue="jobs", deadLetters="true")).load()
    (row,) = df.collect()
    assert (row.text, row.reason, row.failed_deliveries) == ("poison", "bad input", 1)


def test_a_batch_write_sends_rows_in_requests_of_100_documents(spark: Any, node: InProcessNode, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("out")
    df = spark.createDataFrame([(f"row {i}", json.dumps({"i": i}), f"d{i}") for i in range(250)],
                               "text string, properties string, dedupe_id string").coalesce(1)
    df.write.format("atomq").options(**tenant.options(node, queue="out")).mode("append").save()
    assert api.queue("out")["depth"] == 250
    window = node.client.hget(k.tenant_rate_window(tenant.id, node.services.node_id), "count")
    assert int(window) == 3  # 250 rows of one partition: requests of 100, 100 and 50 documents
    df.write.format("atomq").options(**tenant.options(node, queue="out")).mode("append").save()
    assert api.queue("out")["depth"] == 250  # written again: every row recognised by its dedupe id
    texts = sorted(m["documents"][0]["data"] for m in api.browse("out"))
    assert texts == sorted(f"row {i}" for i in range(250))


def test_a_write_publishes_to_a_topic_and_a_topic_column_routes_each_row(
        spark: Any, node: InProcessNode, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("eu", topics=["orders/eu/>"])
    api.put_queue("all", topics=["orders/>"])
    api.put_queue("direct")
    df = spark.createDataFrame([("a", "d-a"), ("b", "d-b")], "text string, dedupe_id string")
    df.write.format("atomq").options(**tenant.options(node, topic="orders/eu/new")).mode("append").save()
    routed = spark.createDataFrame([("c", "orders/us/new", None), ("d", None, "direct")],
                                   "text string, topic string, queue string")
    routed.write.format("atomq").options(**tenant.options(node)).mode("append").save()

    def texts(queue: str) -> list[tuple[str, str | None]]:
        return sorted((m["documents"][0]["data"], m["topic"]) for m in api.browse(queue))

    assert texts("eu") == [("a", "orders/eu/new"), ("b", "orders/eu/new")]
    assert texts("all") == [("a", "orders/eu/new"), ("b", "orders/eu/new"), ("c", "orders/us/new")]
    assert texts("direct") == [("d", None)]
    no_target = spark.createDataFrame([("e",)], "text string")
    with pytest.raises(Exception, match="option queue"):
        no_target.write.format("atomq").options(**tenant.options(node)).mode("append").save()


def test_rows_of_topics_of_their_own_are_published_in_requests_of_100_documents(
        spark: Any, node: InProcessNode, tenant: Tenant) -> None:
    """A topic a row (``orders/eu/<id>``) costs no request a row: every published row of a
    partition goes in the same requests, whatever its topic."""
    api = tenant.api
    api.put_queue("eu", topics=["orders/eu/>"])
    api.put_queue("us", topics=["orders/us/>"])
    rows = [(f"row {i}", f"orders/{'eu' if i % 5 else 'us'}/{i}") for i in range(250)]
    spark.createDataFrame(rows, "text string, topic string").coalesce(1) \
        .write.format("atomq").options(**tenant.options(node)).mode("append").save()
    window = node.client.hget(k.tenant_rate_window(tenant.id, node.services.node_id), "count")
    assert int(window) == 3  # 250 rows of one partition: requests of 100, 100 and 50 documents
    assert sorted((m["documents"][0]["data"], m["topic"]) for q in ("eu", "us") for m in api.browse(q)) == sorted(rows)
    assert (api.queue("eu")["depth"], api.queue("us")["depth"]) == (200, 50)


def test_spark_types_properties_as_maps_and_documents_as_an_array_of_structs_and_back(
        spark: Any, node: InProcessNode, tenant: Tenant) -> None:
    """``propertiesAs=map`` and ``documentsAs=array``: a row per message, in Spark's own types; such
    a DataFrame written back gives the same messages (a property that is not a string reads as its
    JSON text, and is written back as that text)."""
    api = tenant.api
    api.put_queue("typed")
    api.put_queue("copy")
    api.send("typed", [{"documents": [{"data": "one", "properties": {"lang": "en"}}, {"data_base64": "//4="}],
                        "properties": {"region": "eu", "n": 1}}])
    df = spark.read.format("atomq").options(**tenant.options(node, queue="typed", propertiesAs="map",
                                                              documentsAs="array")).load()
    assert df.schema["properties"].dataType.simpleString() == "map<string,string>"
    assert df.schema["documents"].dataType.simpleString() == (
        "array<struct<id:string,payload:binary,text:string,properties:map<string,string>>>")
    (row,) = df.collect()
    assert row.properties == {"region": "eu", "n": "1"}
    assert [(d.text, bytes(d.payload), d.properties) for d in row.documents] == [
        ("one", b"one", {"lang": "en"}), (None, b"\xff\xfe", {})]
    df.select("properties", "documents").write.format("atomq").options(**tenant.options(node, queue="copy")) \
        .mode("append").save()
    (copied,) = api.browse("copy")
    assert copied["properties"] == {"region": "eu", "n": "1"}
    assert [(d.get("data"), d.get("data_base64"), d.get("properties") or {}) for d in copied["documents"]] == [
        ("one", None, {"lang": "en"}), (None, "//4=", {})]
    with pytest.raises(Exception, match="option documentsAs must be rows or array"):
        spark.read.format("atomq").options(**tenant.options(node, queue="typed", documentsAs="list")).load()


def _consume(spark: Any, node: InProcessNode, tenant: Tenant, queue: str, checkpoint: Path, sink: list[Any],
             fail_on: str | None = None, **options: str) -> None:
    """One availableNow run of a streaming read into ``sink`` (via foreachBatch)."""
    def handle(batch_df: Any, batch_id: int) -> None:
        rows = batch_df.collect()
        if fail_on is not None and any(r.text == fail_on for r in rows):
            raise RuntimeError(f"failing batch {batch_id}")
        sink.extend(rows)

    options.setdefault("consumer", checkpoint.name)
    stream = spark.readStream.format("atomq").options(**tenant.options(node, queue=queue, **options)).load()
    query = stream.writeStream.foreachBatch(handle).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
    finally:
        query.stop()


def test_a_streaming_read_consumes_the_queue_and_acks_after_commit(
        spark: Any, node: InProcessNode, tenant: Tenant, tmp_path: Path) -> None:
    api = tenant.api
    api.put_queue("events")
    api.send_texts("events", [f"e{i}" for i in range(120)])
    sink: list[Any] = []
    _consume(spark, node, tenant, "events", tmp_path / "cp", sink, maxMessagesPerTrigger="50")
    assert sorted(r.text for r in sink) == sorted(f"e{i}" for i in range(120))
    assert all(r.delivery_count == 1 for r in sink)
    queue = api.queue("events")
    assert (queue["depth"], queue["in_flight"]) == (0, 0)  # the run's last batch is acked too
    api.send_texts("events", ["late"])
    again: list[Any] = []
    _consume(spark, node, tenant, "events", tmp_path / "cp", again, maxMessagesPerTrigger="50")
    assert [r.text for r in again] == ["late"]  # the restarted query reads only what is new
    queue = api.queue("events")
    assert (queue["depth"], queue["in_flight"]) == (0, 0)


def test_a_failed_micro_batch_leaves_its_messages_to_come_back(
        spark: Any, node: InProcessNode, tenant: Tenant, tmp_path: Path) -> None:
    api = tenant.api
    api.put_queue("fragile", ack_timeout_s=1)
    api.send_texts("fragile", ["ok", "boom"])
    sink: list[Any] = []
    with pytest.raises(Exception):
        _consume(spark, node, tenant, "fragile", tmp_path / "cp", sink, fail_on="boom")
    assert sink == []

    def back() -> bool:
        node.services.queues.maintain(tenant.id)  # the node's maintenance loop, in this test's hands
        return bool(api.queue("fragile")["depth"] == 2)

    wait_until(back, 30, "the failed batch's messages to come back")
    sink2: list[Any] = []
    _consume(spark, node, tenant, "fragile", tmp_path / "cp2", sink2)
    assert sorted(r.text for r in sink2) == ["boom", "ok"]
    assert {r.delivery_count for r in sink2} == {2}


def test_a_query_started_under_the_same_consumer_name_fences_off_the_running_one(
        spark: Any, node: InProcessNode, tenant: Tenant, tmp_path: Path) -> None:
    api = tenant.api
    api.put_queue("shared")
    api.send_texts("shared", ["a", "b", "c"])
    seen: list[Any] = []

    def handle(batch_df: Any, batch_id: int) -> None:
        seen.extend(batch_df.collect())
        # Another query starts under the same name while this batch is being processed.
        api.request("POST", "/v1/queues/shared/streams/twin/open", {})

    stream = spark.readStream.format("atomq").options(**tenant.options(node, queue="shared", consumer="twin")).load()
    query = stream.writeStream.foreachBatch(handle).option("checkpointLocation", str(tmp_path / "cp")) \
        .trigger(availableNow=True).start()
    with pytest.raises(Exception, match="opened by another query"):
        query.awaitTermination(60)
    assert sorted(r.text for r in seen) == ["a", "b", "c"]
    queue = api.queue("shared")
    assert (queue["depth"], queue["in_flight"]) == (0, 3), "the fenced query acked nothing"


def test_a_streaming_write_copies_a_consumed_queue_once(spark: Any, node: InProcessNode, tenant: Tenant,
                                                         tmp_path: Path) -> None:
    api = tenant.api
    api.put_queue("source")
    api.put_queue("copy")
    api.send_texts("source", [f"c{i}" for i in range(150)])
    stream = spark.readStream.format("atomq").options(**tenant.options(node, queue="source", consumer="copier")).load()
    query = (stream.selectExpr("text", "concat('copy-', message_id) AS dedupe_id")
             .writeStream.format("atomq").options(**tenant.options(node, queue="copy"))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(m["documents"][0]["data"] for m in api.browse("copy")) == sorted(f"c{i}" for i in range(150))
    source = api.queue("source")
    assert (source["depth"], source["in_flight"]) == (0, 0)


def test_a_restarted_query_replays_its_uncommitted_batch_with_the_same_rows(
        spark: Any, node: InProcessNode, tenant: Tenant, tmp_path: Path) -> None:
    """The batch failed in the sink; the query restarted from its checkpoint reads the very
    same deliveries again (same ids, same delivery count), then commits them."""
    api = tenant.api
    api.put_queue("replayed")
    api.send_texts("replayed", ["r1", "r2", "r3"])
    failed: list[Any] = []
    with pytest.raises(Exception):
        _consume(spark, node, tenant, "replayed", tmp_path / "cp", failed, fail_on="r2")
    assert api.queue("replayed")["in_flight"] == 3  # taken by the failed batch, not acked
    replayed: list[Any] = []
    _consume(spark, node, tenant, "replayed", tmp_path / "cp", replayed)
    assert sorted((r.text, r.delivery_count) for r in replayed) == [("r1", 1), ("r2", 1), ("r3", 1)]
    queue = api.queue("replayed")
    assert (queue["depth"], queue["in_flight"]) == (0, 0)
