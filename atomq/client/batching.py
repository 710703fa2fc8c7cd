"""Sends in batches: outputs buffered per queue, or all published ones together whatever their
topics, and sent in requests of at most ``max_documents`` (``defaults.MAX_SEND_DOCUMENTS``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from atomq import defaults
from atomq.client.http_client import AtomqClient


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
    """

    def __init__(self, client: AtomqClient, max_documents: int = defaults.MAX_SEND_DOCUMENTS) -> None:
        if max_documents < 1:
            raise ValueError("max_documents must be at least 1")
        self.client = client
        self.max_documents = max_documents
        self.requests = 0
        self.documents = 0
        self._buffers: dict[Target, list[dict[str, Any]]] = {}
        self._counts: dict[Target, int] = {}

    def add(self, target: str | Target, message: dict[str, Any]) -> None:
        """Buffers ``message`` for ``target``: a queue's name, or a :class:`Target`."""
        if isinstance(target, str):
            target = Target(target)
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
                if t.topic:
                    self.client.publish_many(messages)
                else:
                    self.client.send(t.name, messages)
                self.requests += 1
                self.documents += count
