"""A streaming read: micro-batches planned and recorded on the node, acked when Spark commits them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from atomq.client import AtomqClient, Extender
from atomq.errors import InvalidInput
from atomq.spark_workers.datasource.options import Options
from atomq.spark_workers.datasource.rows import message_rows

IDLE_WAIT_MS = 500


class ConsumeReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read that consumes the queue: one planned batch per micro-batch."""

    def __init__(self, options: Options) -> None:
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

    def _consumer_path(self) -> str:
        """The API path of this query's consumer of the queue, under which its batches are recorded."""
        return f"/v1/queues/{self.options.queue}/streams/{self.options.consumer}"

    def _with_subscriber(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.options.subscriber:
            body["subscriber"] = self.options.subscriber
        return body

    def _generation(self) -> int:
        """This query's generation of the consumer, opened on the driver's first call: a query
        started later under the same name fences this one off."""
        if self._opened is None:
            self._opened = self._api().request("POST", f"{self._consumer_path()}/open",
                                               self._with_subscriber({}))["generation"]
        return self._opened

    def _plan(self, batch: int, max_messages: int) -> dict[str, Any]:
        # An idle query waits on the node a moment rather than asking again every few ms.
        body = {"max": max_messages, "partitions": self.options.partitions, "wait_ms": IDLE_WAIT_MS,
                "generation": self._generation()}
        return self._api().request("POST", f"{self._consumer_path()}/batches/{batch}",  # type: ignore[no-any-return]
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
            planned = self._api().request("GET", f"{self._consumer_path()}/batches/{batch}", **query)
            parts += [InputPartition((batch, i)) for i in range(planned["partitions"])]
        return parts

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        batch, index = partition.value
        o = self.options
        with o.client() as client:
            query = {"subscriber": o.subscriber} if o.subscriber else {}
            page = client.request("GET", f"{self._consumer_path()}/batches/{batch}/partitions/{index}", **query)
        for message in page["messages"]:
            yield from message_rows(message, o.properties_as, o.documents_as)

    def commit(self, end: dict[str, int]) -> None:
        self._commit(end["batch"])

    def _commit(self, through: int) -> None:
        """Acks this query's batches up to ``through``, once."""
        if through > self._committed:
            self._api().request("POST", f"{self._consumer_path()}/commit",
                                self._with_subscriber({"through": through, "generation": self._generation()}))
            self._committed = through
            self._mine = {b for b in self._mine if b > through}

    def _start_extender(self) -> None:
        if self._extender is None:
            self._generation()  # opened here, before the extender's thread can need it
            ack_timeout = float(self._api().queue(self.options.queue)["ack_timeout_s"])
            o = self.options
            self._extender = Extender(o.url, o.key, f"{self._consumer_path()}/extend", ack_timeout, self._extend_body,
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
