"""Sends in batches: outputs buffered per queue, or all published ones together whatever their
topics, and sent in requests of at most ``max_documents`` (``defaults.MAX_SEND_DOCUMENTS``)."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from atomq import defaults
from atomq.client.http_client import AtomqClient

log = logging.getLogger(__name__)


class Target(NamedTuple):
    """Where a message goes: a queue by name, or, with ``topic``, every queue that attracts
    the topic ``name`` (a publish)."""

    name: str
    topic: bool = False


PUBLISHED = Target("", topic=True)
"""The one buffer of every published message: each names its topic, and one request publishes
them all (``/v1/topics/messages``), so outputs with topics of their own cost no request each."""


class BatchingSender:
    """Buffers messages per queue, and published ones together, and sends them in requests of at
    most ``max_documents``.

    The main node counts requests, not documents, against a tenant's rate
    limit: 250 documents to one queue cost 3 requests.

    Messages the node accepted and stored nowhere (a publish/subscribe queue
    without subscribers, a topic no queue attracts) are counted in
    ``stored_nowhere``, and each queue or topic that swallows them is logged
    once a sender, as a warning with the node's words: a process whose
    outputs go nowhere goes on, but not unseen.
    """

    def __init__(self, client: AtomqClient, max_documents: int = defaults.MAX_SEND_DOCUMENTS) -> None:
        if max_documents < 1:
            raise ValueError("max_documents must be at least 1")
        self.client = client
        self.max_documents = max_documents
        self.requests = 0
        self.documents = 0
        self.stored_nowhere = 0
        """Messages sent that the node stored nowhere (its answers' ``warnings``)."""
        self._warned: set[tuple[str, str]] = set()
        self._buffers: dict[Target, list[dict[str, Any]]] = {}
        self._counts: dict[Target, int] = {}

    def add(self, target: str | Target, message: dict[str, Any], *, delay_s: float | None = None) -> None:
        """Buffers ``message`` for ``target``: a queue's name, or a :class:`Target`. ``delay_s``: the
        message is first delivered this many seconds after its send (every copy of it, for a topic),
        as its own ``"delay_s"`` says; None keeps what the message says (or its queue's delay)."""
        if isinstance(target, str):
            target = Target(target)
        if delay_s is not None:
            message = {**message, "delay_s": delay_s}
        if target.topic:
            message, target = {**message, "topic": target.name}, PUBLISHED
        size = len(message["documents"])
        if self._counts.get(target, 0) + size > self.max_documents:
            self.flush(target)
        self._buffers.setdefault(target, []).append(message)
        self._counts[target] = self._counts.get(target, 0) + size
        if self._counts[target] >= self.max_documents:
            self.flush(target)

    def flush(self, target: Target | None = None) -> None:
        """Sends what is buffered (for one target, or all); the main node's refusal raises."""
        for t in [target] if target is not None else list(self._buffers):
            messages = self._buffers.pop(t, [])
            count = self._counts.pop(t, 0)
            if messages:
                self._send(t, messages, count)

    def _send(self, target: Target, messages: list[dict[str, Any]], count: int) -> None:
        """One request of ``count`` documents; a sender that overlaps its requests overrides it."""
        self._sent(self._request(target, messages), count)

    def _request(self, target: Target, messages: list[dict[str, Any]]) -> Any:
        if target.topic:
            return self.client.publish_many(messages)
        return self.client.send_batch(target.name, messages)

    def _sent(self, answer: Any, count: int) -> None:
        """Counts a request the node answered."""
        self.requests += 1
        self.documents += count
        self._note_stored_nowhere(answer.get("warnings") or [])

    def _note_stored_nowhere(self, warnings: list[dict[str, Any]]) -> None:
        """Counts the messages the warnings of an answer name, and logs each queue or topic the first time."""
        for w in warnings:
            self.stored_nowhere += int(w.get("messages", 0))
            where = (w.get("queue") or "", w.get("topic") or "")
            if where not in self._warned:
                self._warned.add(where)
                log.warning("%s (logged once; the sender counts such messages in stored_nowhere)", w.get("message"))
