"""What a read gives: one row per message and document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from atomq.client import wire

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


def message_rows(message: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """A message as the node gives it, one row of :data:`SCHEMA` per document."""
    enqueued = datetime.fromtimestamp(message["enqueued_at"], tz=timezone.utc)
    properties = json.dumps(wire.properties_of(message))
    for index, doc in enumerate(message["documents"]):
        payload = wire.document_bytes(doc)
        yield (message["id"], message["delivery_count"], message["delivery_count"] > 1, enqueued,
               message.get("state"), message.get("failed_deliveries"), message.get("reason"), properties,
               index, doc["id"], payload, wire.utf8_text(payload), json.dumps(wire.properties_of(doc)))
