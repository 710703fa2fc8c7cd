"""Sends in batches: outputs buffered per queue and sent in requests of at most ``max_documents``
(``defaults.MAX_SEND_DOCUMENTS``)."""

from __future__ import annotations

from typing import Any

from atomq import defaults
from atomq.client.http_client import AtomqClient


class BatchingSender:
    """Buffers messages per queue and sends them in requests of at most ``max_documents``.

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
        self._buffers: dict[str, list[dict[str, Any]]] = {}
        self._counts: dict[str, int] = {}

    def add(self, queue: str, message: dict[str, Any]) -> None:
        size = len(message["documents"])
        if self._counts.get(queue, 0) + size > self.max_documents:
            self.flush(queue)
        self._buffers.setdefault(queue, []).append(message)
        self._counts[queue] = self._counts.get(queue, 0) + size
        if self._counts[queue] >= self.max_documents:
            self.flush(queue)

    def flush(self, queue: str | None = None) -> None:
        """Sends what is buffered (for one queue, or all); the main node's refusal raises."""
        for name in [queue] if queue is not None else list(self._buffers):
            messages = self._buffers.pop(name, [])
            count = self._counts.pop(name, 0)
            if messages:
                self.client.send(name, messages)
                self.requests += 1
                self.documents += count
