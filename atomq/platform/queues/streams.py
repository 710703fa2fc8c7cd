"""Streaming consumers: micro-batches that read the same rows when replayed, acked when committed.

A streaming consumer (a Spark query reading a queue) plans each micro-batch
by number: the plan takes deliveries, like a get, and records their ids and
receipts under the consumer and the batch number. Reading a partition of a
planned batch reads those messages again by id, so a retried task or a
query restarted from its checkpoint sees the same rows; planning a batch
number that is already planned returns that plan. The consumer extends its
planned batches while it works, and a commit acks every batch up to the one
committed. Nothing is acked before its commit: a consumer that fails or
stops leaves its batches to come back by the ack time-out.

Batch numbers start at 1 in every query (Spark asks a restarted query for
its initial offset again, so it cannot depend on what happened since). A
plan found under a number is used only while all its deliveries are still
in flight: a live query's replay, or the plan of a query that died before
committing it, whose messages the next query under that name processes.
Otherwise it is given back and the number planned afresh.

One running query per consumer name: a query opens the consumer when it
starts and gets the next generation; plans, extends and commits carry it,
and those of an older generation are refused (Conflict). Two queries
started under one name cannot ack each other's batches: the later one
takes the name over and the earlier one stops at its next call, as a
restarted query takes over from the one that died.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from atomq import defaults
from atomq.errors import Conflict, InvalidInput, NotFound
from atomq.integer_range import check_integer_range
from atomq.platform.models import BrowsedMessage, MessageState
from atomq.platform.queue_server import QueueServer
from atomq.platform.queues.names import check_consumer_name, check_queue_name, check_subscriber_name, check_tenant_id
from atomq.platform.store import keys as k

RECORD_TTL_S = 24 * 3600
"""How long a consumer's planned batches are kept without a plan or an extend:
past it the consumer is gone and its messages have long come back."""
GENERATION = "gen"
"""The field of the consumer's record that holds the generation of the query last opened."""


@dataclass(frozen=True)
class PlannedBatch:
    """A planned micro-batch: its messages split into ``partitions`` consecutive slices."""

    queue: str
    subscriber: str | None
    ids: tuple[str, ...]
    receipts: tuple[str, ...]
    partitions: int

    def slice(self, partition: int) -> tuple[str, ...]:
        size = math.ceil(len(self.ids) / self.partitions) if self.ids else 0
        return self.ids[partition * size:(partition + 1) * size]

    def to_json(self) -> str:
        return json.dumps({"queue": self.queue, "subscriber": self.subscriber, "ids": self.ids,
                           "receipts": self.receipts, "partitions": self.partitions}, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> PlannedBatch:
        d = json.loads(raw)
        return cls(queue=d["queue"], subscriber=d["subscriber"], ids=tuple(d["ids"]),
                   receipts=tuple(d["receipts"]), partitions=int(d["partitions"]))


class StreamConsumers:
    """The planned batches of every streaming consumer, on one queue server."""

    def __init__(self, queues: QueueServer) -> None:
        self.queues = queues
        self.storage = queues.storage

    def _key(self, tenant: str, queue: str, consumer: str, subscriber: str | None) -> str:
        if subscriber is not None:
            check_subscriber_name(subscriber)
        return k.stream_consumer(check_tenant_id(tenant), check_queue_name(queue, field="queue"), subscriber,
                                 check_consumer_name(consumer))

    def open(self, tenant: str, queue: str, consumer: str, subscriber: str | None = None) -> int:
        """Starts a query under the consumer's name: its generation, which fences off earlier ones."""
        key = self._key(tenant, queue, consumer, subscriber)
        pipe = self.storage.client.pipeline(transaction=True)
        pipe.hincrby(key, GENERATION, 1)
        pipe.expire(key, RECORD_TTL_S)
        generation, _ = self.storage.call(pipe.execute)
        return int(generation)

    def _fence(self, key: str, consumer: str, generation: int | None) -> None:
        """Refuses a call of a query whose consumer name a later query opened (None: an unfenced caller).

        Checked just before the call's writes: a query opened in between
        still shares the name for that one call, as a lease's holders may.
        """
        if generation is None:
            return
        current = int(self.storage.call(self.storage.client.hget, key, GENERATION) or 0)
        if current != generation:
            raise Conflict(f"consumer {consumer!r} was opened by another query since this one started "
                           f"(generation {current}, this one {generation}): this query must stop",
                           consumer=consumer, generation=current)

    def plan(self, tenant: str, queue: str, consumer: str, batch: int, max_messages: int = defaults.STREAM_PLAN_MESSAGES,
             partitions: int = 1, subscriber: str | None = None, wait_ms: int = 0,
             stop: threading.Event | None = None, generation: int | None = None) -> PlannedBatch | None:
        """Batch ``batch`` of the consumer: as planned before while that plan's deliveries
        are in flight, else planned now; None when there is nothing to read."""
        key = self._key(tenant, queue, consumer, subscriber)
        self._fence(key, consumer, generation)
        check_integer_range(batch, "batch", 0, defaults.MAX_STREAM_COUNTER)
        check_integer_range(max_messages, "max", 1, defaults.MAX_STREAM_BATCH)
        check_integer_range(partitions, "partitions", 1, defaults.MAX_STREAM_PARTITIONS)
        client = self.storage.client
        existing = self.storage.call(client.hget, key, f"b{batch}")
        if existing is not None:
            planned = self._own(PlannedBatch.from_json(existing), queue, subscriber)
            if self._still_in_flight(tenant, planned):
                return planned
            self._give_back(tenant, key, batch, planned, consumer)
        # On an exclusive queue the stream's consumer is the queue's consumer, under the same name.
        got = self.queues.get(tenant, queue, max_messages, wait_ms, subscriber, stop=stop, consumer=consumer)
        if not got:
            return None
        planned = PlannedBatch(queue=queue, subscriber=subscriber, ids=tuple(m.id for m in got),
                               receipts=tuple(m.receipt for m in got), partitions=min(partitions, len(got)))
        if not self.storage.call(client.hsetnx, key, f"b{batch}", planned.to_json()):
            # Planned at the same moment by another call: keep that plan, give ours back.
            self.queues.release(tenant, queue, receipts=list(planned.receipts), subscriber=subscriber, delay_s=0,
                                consumer=consumer)
            return self.plan(tenant, queue, consumer, batch, max_messages, partitions, subscriber,
                             generation=generation)
        self.storage.call(client.expire, key, RECORD_TTL_S)
        return planned

    def _still_in_flight(self, tenant: str, planned: PlannedBatch) -> bool:
        """Whether every delivery of the plan is still the current one (not timed out)."""
        current = {f"{m.id}~{m.delivery_count}" for m in
                   self.queues.peek(tenant, planned.queue, list(planned.ids), planned.subscriber)
                   if m.state is MessageState.IN_FLIGHT}
        return current.issuperset(planned.receipts)

    def _give_back(self, tenant: str, key: str, batch: int, planned: PlannedBatch, consumer: str) -> None:
        self.queues.release(tenant, planned.queue, receipts=list(planned.receipts), subscriber=planned.subscriber,
                            delay_s=0, consumer=consumer)
        self.storage.call(self.storage.client.hdel, key, f"b{batch}")

    @staticmethod
    def _own(planned: PlannedBatch, queue: str, subscriber: str | None) -> PlannedBatch:
        if (planned.queue, planned.subscriber) != (queue, subscriber):
            raise InvalidInput("this consumer's batch was planned on another queue or subscriber", field="consumer")
        return planned

    def _planned(self, tenant: str, queue: str, consumer: str, subscriber: str | None) -> dict[int, PlannedBatch]:
        raw = self.storage.call(self.storage.client.hgetall, self._key(tenant, queue, consumer, subscriber))
        return {int(name[1:]): PlannedBatch.from_json(value) for name, value in raw.items() if name.startswith(b"b")}

    def planned(self, tenant: str, queue: str, consumer: str, batch: int,
                subscriber: str | None = None) -> PlannedBatch | None:
        """Batch ``batch`` as it was planned; None when it was not (or was committed)."""
        raw = self.storage.call(self.storage.client.hget, self._key(tenant, queue, consumer, subscriber),
                                f"b{batch}")
        return None if raw is None else PlannedBatch.from_json(raw)

    def read(self, tenant: str, queue: str, consumer: str, batch: int, partition: int,
             subscriber: str | None = None) -> list[BrowsedMessage]:
        """The messages of one partition of a planned batch (those not settled since)."""
        raw = self.storage.call(self.storage.client.hget, self._key(tenant, queue, consumer, subscriber),
                                f"b{batch}")
        if raw is None:
            raise NotFound(f"batch {batch} of consumer {consumer!r} is not planned (or was committed)",
                           consumer=consumer, batch=batch)
        planned = self._own(PlannedBatch.from_json(raw), queue, subscriber)
        check_integer_range(partition, "partition", 0, planned.partitions - 1)
        return self.queues.peek(tenant, planned.queue, list(planned.slice(partition)), planned.subscriber)

    def commit(self, tenant: str, queue: str, consumer: str, through: int, subscriber: str | None = None,
               generation: int | None = None) -> int:
        """Acks every planned batch up to ``through`` and forgets it; the messages acked."""
        key = self._key(tenant, queue, consumer, subscriber)
        check_integer_range(through, "through", 0, defaults.MAX_STREAM_COUNTER)
        self._fence(key, consumer, generation)
        acked = 0
        for number, planned in sorted(self._planned(tenant, queue, consumer, subscriber).items()):
            if number > through:
                break
            acked += self.queues.ack(tenant, planned.queue, receipts=list(planned.receipts),
                                     subscriber=planned.subscriber, consumer=consumer)
            self.storage.call(self.storage.client.hdel, key, f"b{number}")
        return acked

    def extend(self, tenant: str, queue: str, consumer: str, batches: Sequence[int],
               subscriber: str | None = None, generation: int | None = None) -> int:
        """A full ack time-out more for the planned batches ``batches`` (those the query
        works on: an earlier query's leftovers are left to time out); the deliveries extended."""
        key = self._key(tenant, queue, consumer, subscriber)
        self._fence(key, consumer, generation)
        wanted = set(batches)
        extended = 0
        for number, planned in self._planned(tenant, queue, consumer, subscriber).items():
            if number in wanted:
                extended += self.queues.extend(tenant, planned.queue, receipts=list(planned.receipts),
                                               subscriber=planned.subscriber, consumer=consumer)
        self.storage.call(self.storage.client.expire, key, RECORD_TTL_S)
        return extended
