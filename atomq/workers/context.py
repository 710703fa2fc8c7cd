"""What a process sees of an execution: its batch, its settings, ``send`` and a logger.

A process reads ``ctx.messages`` (each with its documents and properties,
and ``redelivered`` when an earlier delivery failed) and calls
``ctx.send(queue, documents, properties, source=message)`` for its outputs,
or ``ctx.publish(topic, ...)`` alike for every queue that attracts a topic;
``ctx.browse(queue)`` reads a queue without taking anything (a checkpoint in
a last-value queue) and ``ctx.flush()`` stores the outputs so far at once.
Sends are buffered and leave in requests of at most the node's ``--max-send-documents``; the
execution acks its batch only after every send was accepted, so a process
that returns has had all its outputs stored, and one that raises has its
batch redelivered. ``source`` ties an output to the input it came from: the
output's de-duplication id is derived from that input and the output's
position, so a redelivered execution does not store its outputs twice.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from atomq.client import Target, wire
from atomq.errors import InvalidInput


@dataclass(frozen=True)
class InputDocument:
    """One document of an input message."""

    data: bytes
    properties: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The document as UTF-8 text (raises UnicodeDecodeError for binary data)."""
        return self.data.decode("utf-8")


@dataclass(frozen=True)
class InputMessage:
    """One message of the execution's batch."""

    id: str
    delivery_count: int
    properties: dict[str, Any]
    documents: tuple[InputDocument, ...]

    @property
    def redelivered(self) -> bool:
        """True when an earlier delivery of this message failed (a get's ``redelivered``)."""
        return self.delivery_count > 1

    @classmethod
    def from_api(cls, raw: dict[str, Any]) -> InputMessage:
        """A message as the HTTP API delivers it."""
        docs = tuple(InputDocument(wire.document_bytes(d), wire.properties_of(d)) for d in raw["documents"])
        return cls(id=raw["id"], delivery_count=int(raw["delivery_count"]),
                   properties=wire.properties_of(raw), documents=docs)


Document = bytes | str | InputDocument
Emit = Callable[[Target, dict[str, Any]], None]


def outgoing_document(doc: Document) -> dict[str, Any]:
    """A document a process sends, in the shape the send API takes."""
    if isinstance(doc, InputDocument):
        return wire.document(doc.data, doc.properties or None)
    if isinstance(doc, (bytes, str)):
        return wire.document(doc)
    raise InvalidInput("a document is bytes, str or an InputDocument", field="documents")


class ExecutionContext:
    """One execution of a listener's process."""

    def __init__(self, listener: str, execution: str, messages: Sequence[InputMessage],
                 settings: dict[str, Any], emit: Emit, log: logging.Logger | None = None, *,
                 flush: Callable[[], None] | None = None,
                 browse: Callable[[str], list[InputMessage]] | None = None) -> None:
        self.listener = listener
        self.execution = execution
        self.messages = list(messages)
        self.settings = settings
        self.log = log or logging.getLogger(f"atomq.process.{listener}")
        self._emit = emit
        self._flush = flush
        self._browse = browse
        self._positions: dict[str, int] = {}
        self._batch_source = hashlib.sha1(",".join(sorted(m.id for m in messages)).encode()).hexdigest()[:16]

    def send(self, queue: str, documents: Iterable[Document], properties: dict[str, Any] | None = None,
             *, source: InputMessage | None = None) -> None:
        """Sends one message of ``documents`` to ``queue`` (of this tenant) when the execution succeeds.

        Without ``source`` the output is tied to the whole batch: a redelivery
        of the same batch is recognised, one in a different batch is not.
        """
        self._output(Target(queue), documents, properties, source)

    def publish(self, topic: str, documents: Iterable[Document], properties: dict[str, Any] | None = None,
                *, source: InputMessage | None = None) -> None:
        """Publishes one message of ``documents`` to ``topic`` when the execution succeeds: it
        reaches every queue of this tenant that attracts the topic (none may)."""
        self._output(Target(topic, topic=True), documents, properties, source)

    def _output(self, target: Target, documents: Iterable[Document], properties: dict[str, Any] | None,
                source: InputMessage | None) -> None:
        origin = source.id if source is not None else f"batch-{self._batch_source}"
        position = self._positions.get(origin, 0)
        self._positions[origin] = position + 1
        self._emit(target, wire.message([outgoing_document(d) for d in documents], properties or None,
                                        f"{self.listener}/{origin}/{position}"))

    def flush(self) -> None:
        """Stores the outputs sent so far now, rather than when the process returns: what a
        process that records its progress (a checkpoint) must do before it goes on."""
        if self._flush is not None:
            self._flush()

    def browse(self, queue: str) -> list[InputMessage]:
        """The messages waiting or in flight in ``queue`` (of this tenant), without taking them:
        a last-value queue's current values, such as a checkpoint."""
        if self._browse is None:
            raise InvalidInput("this execution cannot browse queues", field="queue")
        return self._browse(queue)
