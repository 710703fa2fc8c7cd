"""The data source's options, read and checked once for every part (see the package's description)."""

from __future__ import annotations

from typing import Any

from atomq import defaults
from atomq.client import AtomqClient
from atomq.errors import InvalidInput
from atomq.spark_workers.datasource.rows import DOCUMENTS_AS, PROPERTIES_AS


class Options:
    """The options every part needs, read once (``options`` is case-insensitive)."""

    def __init__(self, options: Any) -> None:
        self.url = options.get("url") or defaults.NODE_URL
        self.key = options.get("key") or ""
        self.tenant = options.get("tenant") or None
        self.queue = options.get("queue") or ""
        self.topic = options.get("topic") or ""
        self.subscriber = options.get("subscriber") or None
        self.dead_letters = str(options.get("deadLetters", "false")).lower() == "true"
        self.consumer = options.get("consumer") or ""
        self.max_per_trigger = _int_option(options, "maxMessagesPerTrigger", defaults.MAX_STREAM_BATCH, 1,
                                            defaults.MAX_STREAM_BATCH)
        self.partitions = _int_option(options, "partitions", 2, 1, defaults.MAX_STREAM_PARTITIONS)
        self.max_documents = _int_option(options, "maxDocumentsPerRequest", defaults.MAX_SEND_DOCUMENTS,
                                          *defaults.MAX_SEND_DOCUMENTS_RANGE)
        self.properties_as = _choice(options, "propertiesAs", PROPERTIES_AS)
        self.documents_as = _choice(options, "documentsAs", DOCUMENTS_AS)
        if not self.key:
            raise InvalidInput("the atomq data source needs option key (a tenant's API key)", field="key")

    def client(self) -> AtomqClient:
        return AtomqClient(self.url, self.key, tenant=self.tenant)

    def need_queue(self) -> str:
        if not self.queue:
            raise InvalidInput("the atomq data source needs option queue" + (" (a topic is for writes only)"
                                                                              if self.topic else ""), field="queue")
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


def _choice(options: Any, name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (the first by default), in any case."""
    value = str(options.get(name) or choices[0]).lower()
    if value not in choices:
        raise InvalidInput(f"option {name} must be {' or '.join(choices)}", field=name)
    return value
