"""Processes that run on Spark: functions from the batch's DataFrame to the outputs' DataFrame.

The runtime owner registers them as entry points in ``atomq.spark_processes``
(or ``ATOMQ_SPARK_PROCESSES=name=module:function``); tenants choose among
them, so no tenant code runs on the shared pool. atomq registers ``forward``
and ``echo-service``, which give the same outputs as on the fork engine.

A process takes the batch as a DataFrame of :data:`INPUT_SCHEMA` (a row per
message and document) and the listener's settings, and returns a DataFrame
with the columns ``queue`` or ``topic`` (where each output goes), ``message_id`` (the
input message it came from: its outputs' dedupe ids derive from it),
``payload`` (binary) or ``text``, and optionally ``properties`` and
``document_properties`` (JSON), and ``position``: the output's place among its message's outputs,
which lets the executors write the outputs in parallel (``atomq.spark_workers.writes``; the
built-in processes give their outputs one a document, ``position`` its index). A process may also
carry ``rows``: given the settings, a function of one input row (a plain dict of the input
columns, ``payload`` as bytes) to its output rows (dicts with ``position``). When the executors
write the outputs, such a process gets no DataFrame: the batch goes to them as plain rows
(``SparkContext.parallelize``, consecutive slices), where the function runs and its outputs are
sent, sparing the frame and the rows' passes between the JVM and Python (``echo-service`` does);
the DataFrame form stays its definition, and what the driver runs when it sends the outputs. A process marked ``checkpointed`` gets the
batch without the redelivered messages its checkpoint shows were processed,
and its checkpoint is published after its outputs (``atomq.workers.checkpoint``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from atomq.client import wire
from atomq.errors import EngineUnavailable, InvalidInput
from atomq.spark_workers.writes import ExecutorSink, PartitionResult, raise_first_error, send_partition
from atomq.workers import checkpoint
from atomq.workers.builtin import echo_route, echo_topic, validate_echo, validate_forward
from atomq.workers.context import ExecutionContext, InputDocument, InputMessage
from atomq.workers.processes import Registry

ENTRY_POINT_GROUP = "atomq.spark_processes"
PROCESSES_ENV = "ATOMQ_SPARK_PROCESSES"

SparkProcess = Callable[[DataFrame, dict[str, Any]], DataFrame]
RowOutputs = Callable[[dict[str, Any]], Iterable[dict[str, Any]]]

INPUT_SCHEMA = StructType([
    StructField("message_id", StringType(), False),
    StructField("delivery_count", IntegerType(), False),
    StructField("redelivered", BooleanType(), False),
    StructField("properties", StringType(), False),
    StructField("document_index", IntegerType(), False),
    StructField("document_id", StringType(), False),
    StructField("payload", BinaryType(), False),
    StructField("text", StringType(), True),
    StructField("document_properties", StringType(), False),
])


_ARROW_INPUT = to_arrow_schema(INPUT_SCHEMA)

SPARK = Registry(ENTRY_POINT_GROUP, PROCESSES_ENV, "spark")


def load(name: str) -> SparkProcess:
    """The Spark process registered as ``name``."""
    return SPARK.load(name)  # type: ignore[no-any-return]


def forward(df: DataFrame, settings: dict[str, Any]) -> DataFrame:
    """Every input document goes on as a message of its own to ``settings["to"]``."""
    return df.select(F.lit(settings["to"]).alias("queue"), "message_id", F.col("document_index").alias("position"),
                     "payload", "properties", "document_properties")


forward.validate_settings = validate_forward  # type: ignore[attr-defined]

_ROUTE = StructType([StructField("route", StringType()), StructField("body", StringType()),
                     StructField("props", StringType()), StructField("topic", StringType())])


def _echo_route_row(message_id, payload, echo, errors):  # type: ignore[no-untyped-def]
    # No type hints: PySpark would read them as a pandas UDF's. The topic (when the service
    # publishes) comes from the same call: a second UDF on this one's output would send every
    # row to Python and back once more (about 30 ms an execution of 1,000).
    route, body, properties = echo_route(message_id, bytes(payload))
    topic = None if echo is None else echo_topic({"echo_topic": echo, "errors_topic": errors}, route, properties)
    return route, body, json.dumps(properties), topic


_echo_route = F.udf(_echo_route_row, returnType=_ROUTE, useArrow=False)  # no pandas needed


def echo_service(df: DataFrame, settings: dict[str, Any]) -> DataFrame:
    """The validation and echo service (``atomq.workers.builtin.echo_service``) as a DataFrame pipeline
    (the fork engine's rules): to its queues, or published under its topics; its checkpoint is kept
    around it by ``run_on_spark`` (``checkpointed``)."""
    publishes = "echo_topic" in settings
    topics = [F.lit(settings["echo_topic"]), F.lit(settings["errors_topic"])] if publishes else [
        F.lit(None).cast(StringType())] * 2
    routed = df.select("message_id", F.col("document_index").alias("position"),
                       _echo_route("message_id", "payload", *topics).alias("r"))
    if publishes:
        target = F.col("r.topic").alias("topic")
    else:
        target = F.when(F.col("r.route") == "echo", F.lit(settings["echo_queue"])).otherwise(
            F.lit(settings["errors_queue"])).alias("queue")
    return routed.select(target, "message_id", "position", F.col("r.body").alias("text"),
                         F.col("r.props").alias("properties"))


def echo_service_rows(settings: dict[str, Any]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """The echo-service as a function of one input row to its output rows, the same as
    :func:`echo_service`'s: run by the executors that send them, it spares the rows a pass
    through the UDF's Python worker and back to the JVM (about half the job, BENCHMARKS.md)."""
    echo, errors = settings.get("echo_topic"), settings.get("errors_topic")

    def outputs(row: dict[str, Any]) -> list[dict[str, Any]]:
        route, body, props, topic = _echo_route_row(  # type: ignore[no-untyped-call]
            row["message_id"], row["payload"], echo, errors)
        target = {"topic": topic} if echo is not None else {"queue": settings[f"{route}_queue"]}
        return [{**target, "message_id": row["message_id"], "position": row["document_index"], "text": body,
                 "properties": props}]

    return outputs


echo_service.validate_settings = validate_echo  # type: ignore[attr-defined]
echo_service.checkpointed = True  # type: ignore[attr-defined]
echo_service.rows = echo_service_rows  # type: ignore[attr-defined]


PARTITION_ROWS = 1000
"""Fewest rows a partition of outputs the executors write holds: a batch this small is written by
one task, in as few requests as the driver would send, a larger one by up to one task a core."""


INPUT_COLUMNS = tuple(INPUT_SCHEMA.names)


def batch_rows(messages: list[InputMessage]) -> list[tuple[Any, ...]]:
    """The execution's batch as plain tuples of :data:`INPUT_COLUMNS`, a row a document (the payload
    as ``bytes``, the text None where it is not UTF-8)."""
    rows = []
    for m in messages:
        properties = json.dumps(m.properties)
        for i, doc in enumerate(m.documents):
            rows.append((m.id, m.delivery_count, m.redelivered, properties, i, f"{m.id}.{i + 1}", doc.data,
                         wire.utf8_text(doc.data), json.dumps(doc.properties)))
    return rows


def batch_frame(spark: SparkSession, messages: list[InputMessage]) -> DataFrame:
    """The execution's batch (the messages to process of it) as a DataFrame of :data:`INPUT_SCHEMA`.

    Handed to Spark as one Arrow table, its columns made from the rows: from Python rows Spark
    would pickle each row and check it against the schema, which (with collecting Row objects)
    cost about a fifth of a Spark execution of 1,000 documents (BENCHMARKS.md).
    """
    rows = batch_rows(messages)
    columns = list(zip(*rows)) if rows else [()] * len(_ARROW_INPUT)
    table = pa.Table.from_arrays(
        [pa.array(values, type=column.type) for values, column in zip(columns, _ARROW_INPUT)], schema=_ARROW_INPUT)
    return spark.createDataFrame(table)


def spark_alive(spark: SparkSession) -> bool:
    """Whether the session's SparkContext still runs (the JVM may have died or been stopped)."""
    try:
        jsc = spark.sparkContext._jsc
        return jsc is not None and not jsc.sc().isStopped()
    except Py4JError:
        return False


def run_on_spark(spark: SparkSession, process_name: str, ctx: ExecutionContext,
                 sink: ExecutorSink | None = None) -> None:
    """Runs a Spark process on the execution's batch and sends its outputs: written by the
    executors when they carry ``position`` and ``sink`` says where to (``writes``), else collected
    and handed to ``ctx.send`` (which buffers them into requests of 100 and gives each its dedupe id).

    When Spark itself is gone the batch is not the messages' fault: EngineUnavailable
    gives it back without counting a failed delivery.
    """
    if not spark_alive(spark):
        raise EngineUnavailable("the Spark worker's SparkContext is stopped")
    process = load(process_name)
    checkpointed = getattr(process, "checkpointed", False)
    todo = checkpoint.unprocessed(ctx) if checkpointed else list(ctx.messages)
    if not todo:
        return
    results: list[PartitionResult] | None = None
    try:
        if sink is not None and hasattr(process, "rows"):
            results = _rows_by_executors(spark, ctx, sink, batch_rows(todo), process.rows(ctx.settings))
        else:
            outputs = process(batch_frame(spark, todo), ctx.settings)
            names = set(outputs.columns)
            data_column = "text" if "text" in names else "payload"
            read = outputs.select(*[c for c in ("queue", "topic", "message_id", "position", data_column,
                                                "properties", "document_properties") if c in names])
            if sink is not None and "position" in names:
                results = _written_by_executors(spark, ctx, sink, read)
            else:
                # Only the columns read here go through Arrow (a process may add others Arrow cannot
                # hold), and come back as dicts, with no Row object a row as collect() makes.
                rows = read.toArrow().to_pylist()
    except Py4JError as exc:
        raise EngineUnavailable(f"Spark failed: {type(exc).__name__}") from None
    except Exception:
        if not spark_alive(spark):
            raise EngineUnavailable("the Spark worker's SparkContext stopped during the execution") from None
        raise
    if results is not None:
        _after_executors(ctx, results)
    else:
        _send_from_driver(ctx, rows, names, data_column)
    if checkpointed:
        checkpoint.record(ctx, todo)


def _tasks(spark: SparkSession, ctx: ExecutionContext) -> int:
    """Partitions of outputs to write: one a core, each of at least :data:`PARTITION_ROWS` rows."""
    rows_in = sum(len(m.documents) for m in ctx.messages)  # a row a document of those it processes
    return max(1, min(spark.sparkContext.defaultParallelism, -(-rows_in // PARTITION_ROWS)))


def _partition_sender(ctx: ExecutionContext, sink: ExecutorSink) -> Callable[[Iterable[dict[str, Any]]],
                                                                              Iterator[PartitionResult]]:
    ids = frozenset(m.id for m in ctx.messages)
    listener = ctx.listener

    def send(rows: Iterable[dict[str, Any]]) -> Iterator[PartitionResult]:
        return send_partition(sink, listener, ids, rows)

    return send


def _written_by_executors(spark: SparkSession, ctx: ExecutionContext, sink: ExecutorSink,
                          frame: DataFrame) -> list[PartitionResult]:
    """One job: each partition of the process's outputs (of consecutive rows: coalesced, not
    repartitioned) sends its rows."""
    send = _partition_sender(ctx, sink)
    return frame.coalesce(_tasks(spark, ctx)).rdd.mapPartitions(lambda part: send(r.asDict() for r in part)).collect()


def _rows_by_executors(spark: SparkSession, ctx: ExecutionContext, sink: ExecutorSink, batch: list[tuple[Any, ...]],
                       rows: RowOutputs) -> list[PartitionResult]:
    """One job with no DataFrame: the batch's rows go to the executors as they are (consecutive
    slices, one a partition), where ``rows`` makes each input row's outputs and they are sent. The
    Arrow table, the frame and the pass from the JVM's rows back to Python are spared."""
    send = _partition_sender(ctx, sink)
    columns = INPUT_COLUMNS
    tasks = _tasks(spark, ctx)
    # One element a partition, each a slice of the batch: parallelize cuts its input in pickled
    # chunks of up to 1,024 rows, and would give the partitions uneven parts (1,024 and 1,476 of 2,500).
    size = -(-len(batch) // tasks)
    slices = [batch[i:i + size] for i in range(0, len(batch), size)] or [[]]

    def outputs(part: Iterable[list[tuple[Any, ...]]]) -> Iterator[PartitionResult]:
        return send(o for chunk in part for t in chunk for o in rows(dict(zip(columns, t))))

    return spark.sparkContext.parallelize(slices, len(slices)).mapPartitions(outputs).collect()


def _after_executors(ctx: ExecutionContext, results: list[PartitionResult]) -> None:
    raise_first_error(results)
    nowhere = sum(r.stored_nowhere for r in results)
    if nowhere:
        ctx.log.warning("%d outputs were stored nowhere (no queue attracts their topic)", nowhere)


def _send_from_driver(ctx: ExecutionContext, rows: list[dict[str, Any]], names: set[str], data_column: str) -> None:
    by_id = {m.id: m for m in ctx.messages}
    for row in rows:
        source = by_id.get(row["message_id"])
        if source is None:
            raise InvalidInput("a Spark process's output must carry the message_id of its input",
                               field="message_id")
        data = row[data_column]
        doc_props = row["document_properties"] if "document_properties" in names else None
        document = InputDocument(data.encode("utf-8") if isinstance(data, str) else bytes(data),
                                 json.loads(doc_props) if doc_props else {})
        props = row["properties"] if "properties" in names else None
        properties = json.loads(props) if props else None
        if "topic" in names and row["topic"] is not None:
            ctx.publish(row["topic"], [document], properties, source=source)
        else:
            ctx.send(row["queue"], [document], properties, source=source)
