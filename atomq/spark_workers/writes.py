"""Outputs written by Spark's executors: each partition sends its own rows, in requests of 100.

Collected on the driver, an execution's outputs cross from the JVM to Python once more, are
turned into messages one by one, and leave as one request after the other while Spark waits.
Written by the executors instead, the partitions (one a core, at least a thousand rows each)
send in parallel, each in a Python worker of its own while the process's Python work on the rows
still to come runs in another. A process's outputs are written so when
they carry ``position``, the output's place among the outputs of its message (its dedupe id
derives from that, as ``ctx.send`` derives it from the order of the calls); without it they are
collected and sent by the driver in the order the process gave them.

Each partition sends one request ahead (:class:`PipelinedSender`): while request k is in flight,
request k+1 is made from the rows that follow (their route, their messages), so the worker's
Python work and the node's answer overlap instead of taking turns.

Order: within a partition the outputs leave in their order, in requests of at most
``max_send_documents``, one at a time; a partition holds consecutive messages of the batch, so each message's
outputs stay in order, and so do those of every part of the batch a partition holds, but two
partitions' requests go side by side: a destination receives the parts interleaved. Whoever needs
one execution's outputs in one destination in the batch's order keeps ``position`` out (the driver
then sends them in order). The input queue's order, the contract of an exclusive queue, is
untouched: an execution finishes, outputs stored, before the next one takes its batch.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from atomq import errors
from atomq.client import AtomqClient, BatchingSender, Target, wire
from atomq.errors import AtomqError, InvalidInput
from atomq.workers.context import InputDocument, outgoing_document


@dataclass(frozen=True)
class ExecutorSink:
    """What an executor needs to send an execution's outputs as its work horse would: the main
    node, the execution's token (which only sends for its tenant), and the request size."""

    api_url: str
    token: str
    max_documents: int
    headers: dict[str, str] = field(default_factory=dict)
    """The execution span's trace headers, so the node's spans of these sends are part of it."""


@dataclass(frozen=True)
class PartitionResult:
    """What one partition sent, or why it stopped (an ``AtomqError`` the node answered)."""

    documents: int
    stored_nowhere: int
    error: tuple[str, str, dict[str, Any]] | None


def _message(listener: str, row: dict[str, Any]) -> dict[str, Any]:
    data = row["text"] if "text" in row else row["payload"]
    doc_props = row.get("document_properties")
    document = InputDocument(data.encode("utf-8") if isinstance(data, str) else bytes(data),
                             json.loads(doc_props) if doc_props else {})
    props = row.get("properties")
    return wire.message([outgoing_document(document)], json.loads(props) if props else None,
                        f"{listener}/{row['message_id']}/{row['position']}")


class PipelinedSender(BatchingSender):
    """A :class:`BatchingSender` one request ahead: while a request is in flight (in a thread of
    its own) the next one is made from the rows that follow, and it leaves once the first is
    answered. One request at a time, in the order they were made, so each destination receives
    its messages in order; a refusal raises at the next request, or at :meth:`wait`."""

    def __init__(self, client: AtomqClient, max_documents: int) -> None:
        super().__init__(client, max_documents)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="atomq-executor-send")
        self._in_flight: tuple[Future[Any], int] | None = None

    def _send(self, target: Target, messages: list[dict[str, Any]], count: int) -> None:
        self.wait()
        self._in_flight = (self._pool.submit(self._request, target, messages), count)

    def wait(self) -> None:
        """Waits for the request in flight and counts it; its refusal raises here."""
        if self._in_flight is not None:
            future, count = self._in_flight
            self._in_flight = None
            self._sent(future.result(), count)

    def close(self) -> None:
        """Lets the request in flight end (counted if it was stored) before the partition's result
        is made: nothing of the execution's is still being sent once its tasks are over. Its own
        refusal is not raised: only the error that stopped the partition is (or none)."""
        try:
            with contextlib.suppress(Exception):  # the partition's first error is the one to raise
                self.wait()
        finally:
            self._pool.shutdown()


def send_partition(sink: ExecutorSink, listener: str, batch_ids: frozenset[str],
                   rows: Iterable[dict[str, Any]]) -> Iterator[PartitionResult]:
    """Sends one partition's outputs, one request ahead (:class:`PipelinedSender`); runs in an
    executor's Python worker. A refusal by the node (rate limit, quota) comes back as a result for
    the driver to raise, with its details intact."""
    with AtomqClient(sink.api_url, sink.token) as client:
        client.headers.update(sink.headers)
        sender = PipelinedSender(client, sink.max_documents)
        error: tuple[str, str, dict[str, Any]] | None = None
        try:
            for row in rows:
                if row["message_id"] not in batch_ids:
                    raise InvalidInput("a Spark process's output must carry the message_id of its input",
                                       field="message_id")
                topic = row.get("topic")
                target = Target(topic, topic=True) if topic is not None else Target(row["queue"])
                sender.add(target, _message(listener, row))
            sender.flush()
            sender.wait()
        except AtomqError as exc:
            error = (type(exc).__name__, exc.message, exc.details)
        finally:
            sender.close()
    yield PartitionResult(sender.documents, sender.stored_nowhere, error)


def raise_first_error(results: list[PartitionResult]) -> None:
    """Raises the first partition's error as the class the node's answer made of it in the
    executor (a ``RateLimited`` keeps its ``retry_after``), so the execution settles as it would
    have had the driver sent."""
    for result in results:
        if result.error is None:
            continue
        name, message, details = result.error
        cls = getattr(errors, name, AtomqError)
        if not (isinstance(cls, type) and issubclass(cls, AtomqError)):
            cls = AtomqError
        try:
            exc = cls(message, **details)
        except TypeError:  # a class whose details do not make it again: the base still says what failed
            exc = AtomqError(message, **details)
        raise exc
