"""The ``atomq`` PySpark data source: read, consume and write a tenant's queues from Spark.

Register it once per session (``register(spark)``), then::

    spark.read.format("atomq").option("url", URL).option("key", KEY).option("queue", "orders").load()
    spark.readStream.format("atomq").option(...).option("consumer", "billing").load()
    df.write.format("atomq").option(...).option("queue", "out").mode("append").save()

Everything goes through the main node's HTTP API with the tenant's key
(``key``; the owner key with ``tenant`` acts for that tenant), so the node's
tenancy, rate limits and quotas hold. Options: ``url`` (default
http://127.0.0.1:61717), ``key``, ``tenant``, ``queue``, ``subscriber``;
for reads ``deadLetters`` (browse the dead letter queue); for streams
``consumer`` (required: the query's name, under which its batches are
recorded; one running query per name and queue: a query started under
a name fences off the one before it, which then fails),
``maxMessagesPerTrigger`` (default 1000, at most 1000) and ``partitions``
(default 2); for writes ``maxDocumentsPerRequest`` (default 100).

A batch read browses: it consumes nothing. A streaming read consumes: each
micro-batch is planned on the driver by taking deliveries from the main
node and recording them under the consumer's name and the batch number
(``atomq.platform.streams``); partitions read that record, so a retried
task or a restart from the checkpoint reads the same rows; the driver
extends the deliveries until Spark commits the batch, and the commit acks
them. A query that fails or stops leaves its uncommitted batches to come
back by the ack time-out (at-least-once).

Rows written become messages of one document each: the document is the
``text`` or ``data`` column (string) or the ``payload`` column (binary);
``properties`` (a JSON object string or a map), ``dedupe_id`` and ``queue``
(per row, instead of the option) are optional columns. A write that fails
part-way may have stored some rows: give ``dedupe_id`` to make a retry
store each row once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from atomq.client import DEFAULT_MAX_SEND_DOCUMENTS, DEFAULT_URL, AtomqClient, BatchingSender, Extender, wire
from atomq.errors import InvalidInput

SCHEMA = StructType([
    StructField("message_id", StringType(), False),
    StructField("delivery_count", IntegerType(), False),
    StructField("redelivered", BooleanType(), False),
    StructField("enqueued_at", TimestampType(), False),
    StructField("state", StringType(), True),
    StructField("failed_deliveries", IntegerType(), True),
    StructField("reason", StringType(), True),
    StructField("properties", StringType(), False),
    StructField("document_index", IntegerType(), False),
    StructField("document_id", StringType(), False),
    StructField("payload", BinaryType(), False),
    StructField("text", StringType(), True),
    StructField("document_properties", StringType(), False),
])
"""One row per message and document. ``properties`` are JSON; ``text`` is the
payload as UTF-8 when it is text; ``state``, ``failed_deliveries`` and
``reason`` come with browsing (dead letters have a reason)."""

MAX_PLAN = 1000
IDLE_WAIT_MS = 500


def register(spark: SparkSession) -> None:
    """Makes ``format("atomq")`` known to the session."""
    spark.dataSource.register(AtomqDataSource)


class _Options:
    """The options every part needs, read once (``options`` is case-insensitive)."""

    def __init__(self, options: Any) -> None:
        self.url = options.get("url") or DEFAULT_URL
        self.key = options.get("key") or ""
        self.tenant = options.get("tenant") or None
        self.queue = options.get("queue") or ""
        self.subscriber = options.get("subscriber") or None
        self.dead_letters = str(options.get("deadLetters", "false")).lower() == "true"
        self.consumer = options.get("consumer") or ""
        self.max_per_trigger = _int_option(options, "maxMessagesPerTrigger", 1000, 1, MAX_PLAN)
        self.partitions = _int_option(options, "partitions", 2, 1, 64)
        self.max_documents = _int_option(options, "maxDocumentsPerRequest", DEFAULT_MAX_SEND_DOCUMENTS, 1, 1000)
        if not self.key:
            raise InvalidInput("the atomq data source needs option key (a tenant's API key)", field="key")

    def client(self) -> AtomqClient:
        return AtomqClient(self.url, self.key, tenant=self.tenant)

    def need_queue(self) -> str:
        if not self.queue:
            raise InvalidInput("the atomq data source needs option queue", field="queue")
        return self.queue


def _int_option(options: Any, name: str, default: int, low: int, high: int) -> int:
    raw = options.get(name)
    try:
        value = default if raw is None else int(raw)
    except ValueError:
        raise InvalidInput(f"option {name} must be an integer", field=name) from None
    if not low <= value <= high:
        raise InvalidInput(f"option {name} must be from {low} to {high}", field=name)
    return value


def _rows(message: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    enqueued = datetime.fromtimestamp(message["enqueued_at"], tz=timezone.utc)
    properties = json.dumps(wire.properties_of(message))
    for index, doc in enumerate(message["documents"]):
        payload = wire.document_bytes(doc)
        yield (message["id"], message["delivery_count"], message["delivery_count"] > 1, enqueued,
               message.get("state"), message.get("failed_deliveries"), message.get("reason"), properties,
               index, doc["id"], payload, wire.utf8_text(payload), json.dumps(wire.properties_of(doc)))


class AtomqDataSource(DataSource):
    """``format("atomq")``: see the module's description."""

    @classmethod
    def name(cls) -> str:
        return "atomq"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BrowseReader(_Options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ConsumeReader(_Options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return QueueWriter(_Options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return QueueStreamWriter(_Options(self.options), schema)


class BrowseReader(DataSourceReader):
    """A batch read: every queued (or dead) message, page by page, consuming nothing."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        options.need_queue()

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        o = self.options
        with o.client() as client:
            pages = client.dead_letters if o.dead_letters else client.browse
            for message in pages(o.queue, subscriber=o.subscriber, limit=1000):
                yield from _rows(message)


class ConsumeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read that consumes the queue: one planned batch per micro-batch."""

    def __init__(self, options: _Options) -> None:
        self.options = options
        options.need_queue()
        if not options.consumer:
            raise InvalidInput("a streaming read needs option consumer: the name of this query, under which "
                               "its batches are recorded (one running query per name)", field="consumer")
        self._client: AtomqClient | None = None
        self._extender: Extender | None = None
        self._available_now: int | None = None
        self._counted: set[int] = set()
        self._committed = 0
        self._mine: set[int] = set()
        """Batches this reader planned or replays, not yet committed: the ones it extends."""
        self._opened: int | None = None

    def _api(self) -> AtomqClient:
        if self._client is None:
            self._client = self.options.client()
        return self._client

    def _base(self) -> str:
        return f"/v1/queues/{self.options.queue}/streams/{self.options.consumer}"

    def _with_subscriber(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.options.subscriber:
            body["subscriber"] = self.options.subscriber
        return body

    def _generation(self) -> int:
        """This query's generation of the consumer, opened on the driver's first call: a query
        started later under the same name fences this one off."""
        if self._opened is None:
            self._opened = self._api().request("POST", f"{self._base()}/open",
                                               self._with_subscriber({}))["generation"]
        return self._opened

    def _plan(self, batch: int, max_messages: int) -> dict[str, Any]:
        # An idle query waits on the node a moment rather than asking again every few ms.
        body = {"max": max_messages, "partitions": self.options.partitions, "wait_ms": IDLE_WAIT_MS,
                "generation": self._generation()}
        return self._api().request("POST", f"{self._base()}/batches/{batch}",  # type: ignore[no-any-return]
                                   self._with_subscriber(body), timeout=30 + IDLE_WAIT_MS / 1000)

    def initialOffset(self) -> dict[str, int]:
        """Every query numbers its batches from 1: Spark asks again when it restarts a query
        whose first batch did not complete, and must get the same answer."""
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.max_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: read what waits now, not what arrives meanwhile."""
        queue = self._api().queue(self.options.queue)
        if self.options.subscriber:
            counts = {s["name"]: s for s in queue.get("subscribers", [])}.get(self.options.subscriber, {})
            self._available_now = int(counts.get("depth", 0))
        else:
            self._available_now = int(queue["depth"])

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        # Spark asks for the next batch once the previous one has completed: everything up to
        # ``start`` is committed, including a run's last batch, which Spark's own commit() call
        # would reach only when another batch is planned.
        self._commit(start["batch"])
        self._start_extender()
        # ReadAllAvailable still reads one plan, of at most maxMessagesPerTrigger (1000 at most).
        wanted = self.options.max_per_trigger
        if isinstance(limit, ReadMaxRows):
            wanted = min(wanted, max(1, limit.max_rows))
        if self._available_now is not None:
            if self._available_now <= 0:
                return start
            wanted = min(wanted, self._available_now)
        batch = start["batch"] + 1
        planned = self._plan(batch, wanted)
        if not planned["count"]:
            return start
        self._mine.add(batch)
        if self._available_now is not None and batch not in self._counted:
            # Spark may ask again for the same start: the plan is the same, counted once.
            self._counted.add(batch)
            self._available_now -= planned["count"]
        return {"batch": batch}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        self._start_extender()  # a restarted query replays first: its batch needs extending too
        parts: list[InputPartition] = []
        for batch in range(start["batch"] + 1, end["batch"] + 1):
            self._mine.add(batch)
            # The plan recorded for that number: a replay reads the same rows.
            query = {"subscriber": self.options.subscriber} if self.options.subscriber else {}
            planned = self._api().request("GET", f"{self._base()}/batches/{batch}", **query)
            parts += [InputPartition((batch, i)) for i in range(planned["partitions"])]
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        batch, index = partition.value
        o = self.options
        with o.client() as client:
            query = {"subscriber": o.subscriber} if o.subscriber else {}
            page = client.request("GET", f"/v1/queues/{o.queue}/streams/{o.consumer}/batches/{batch}"
                                         f"/partitions/{index}", **query)
        for message in page["messages"]:
            yield from _rows(message)

    def commit(self, end: dict[str, int]) -> None:
        self._commit(end["batch"])

    def _commit(self, through: int) -> None:
        """Acks this query's batches up to ``through``, once."""
        if through > self._committed:
            self._api().request("POST", f"{self._base()}/commit",
                                self._with_subscriber({"through": through, "generation": self._generation()}))
            self._committed = through
            self._mine = {b for b in self._mine if b > through}

    def _start_extender(self) -> None:
        if self._extender is None:
            self._generation()  # opened here, before the extender's thread can need it
            ack_timeout = float(self._api().queue(self.options.queue)["ack_timeout_s"])
            o = self.options
            self._extender = Extender(o.url, o.key, f"{self._base()}/extend", ack_timeout, self._extend_body,
                                      tenant=o.tenant)
            self._extender.start()

    def _extend_body(self) -> dict[str, Any] | None:
        """The batches this reader planned or replays, not yet committed (None: none)."""
        batches = sorted(self._mine)
        return self._with_subscriber({"batches": batches, "generation": self._opened}) if batches else None

    def stop(self) -> None:
        if self._extender is not None:
            self._extender.stop()
        if self._client is not None:
            self._client.close()


class SendCommitMessage(WriterCommitMessage):
    def __init__(self, messages: int, requests: int) -> None:
        self.messages, self.requests = messages, requests


class QueueWriter(DataSourceWriter):
    """Rows become messages, sent through the main node in requests of at most 100 documents."""

    def __init__(self, options: _Options, schema: StructType) -> None:
        self.options = options
        names = set(schema.fieldNames())
        # In this order, per row: a row read from atomq has text only when its payload is UTF-8.
        self.data_columns = [c for c in ("text", "data", "payload") if c in names]
        if not self.data_columns:
            raise InvalidInput("a DataFrame written to atomq needs a text, data or payload column", field="columns")
        self.has = {c: c in names for c in ("properties", "dedupe_id", "queue")}
        if not self.has["queue"]:
            options.need_queue()

    def write(self, iterator: Iterator[Any]) -> SendCommitMessage:
        o = self.options
        messages = 0
        with o.client() as client:
            sender = BatchingSender(client, o.max_documents)
            for row in iterator:
                sender.add((row["queue"] if self.has["queue"] else None) or o.queue, self._message(row))
                messages += 1
            sender.flush()
        return SendCommitMessage(messages, sender.requests)

    def _message(self, row: Any) -> dict[str, Any]:
        value = next((row[c] for c in self.data_columns if row[c] is not None), None)
        if value is None:
            raise InvalidInput(f"a row has no document: {', '.join(self.data_columns)} all null",
                               field=self.data_columns[0])
        document = wire.document(value if isinstance(value, str) else bytes(value))
        properties = row["properties"] if self.has["properties"] else None
        if isinstance(properties, str):
            properties = json.loads(properties)
        elif properties is not None:
            properties = dict(properties)
        dedupe_id = row["dedupe_id"] if self.has["dedupe_id"] else None
        return wire.message([document], properties, None if dedupe_id is None else str(dedupe_id))


class QueueStreamWriter(DataSourceStreamWriter):
    """Each micro-batch's rows become messages, as :class:`QueueWriter` sends them."""

    def __init__(self, options: _Options, schema: StructType) -> None:
        self._writer = QueueWriter(options, schema)

    def write(self, iterator: Iterator[Any]) -> SendCommitMessage:
        return self._writer.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The rows were stored as they were sent: nothing more to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows already sent stay (a retry with dedupe ids stores each once)."""
