"""What a read gives: a row per message and document, or a row per message with its documents.

Two options choose the Spark types (both kept as they were by default, for who reads them so):
``propertiesAs`` is ``json`` (properties as a JSON object string, exact) or ``map``
(``map<string,string>``: a string value as it is, any other value as its JSON text, so ``1`` and
``"1"`` both read ``"1"``); ``documentsAs`` is ``rows`` (a row per document) or ``array`` (a row
per message, its documents in ``documents``, an array of structs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from atomq.client import wire

PROPERTIES_AS = ("json", "map")
DOCUMENTS_AS = ("rows", "array")

_MESSAGE = [
    StructField("message_id", StringType(), False),
    StructField("delivery_count", IntegerType(), False),
    StructField("redelivered", BooleanType(), False),
    StructField("enqueued_at", TimestampType(), False),
    StructField("state", StringType(), True),
    StructField("failed_deliveries", IntegerType(), True),
    StructField("reason", StringType(), True),
]


def _properties_type(properties_as: str) -> DataType:
    return MapType(StringType(), StringType(), True) if properties_as == "map" else StringType()


def schema(properties_as: str = "json", documents_as: str = "rows") -> StructType:
    """The read's schema for these options (docs/spark.md shows each column with an example)."""
    props = _properties_type(properties_as)
    document = [StructField("payload", BinaryType(), False), StructField("text", StringType(), True)]
    if documents_as == "array":
        documents = ArrayType(StructType([StructField("id", StringType(), False), *document,
                                          StructField("properties", props, False)]), False)
        return StructType([*_MESSAGE, StructField("properties", props, False),
                           StructField("documents", documents, False)])
    return StructType([*_MESSAGE, StructField("properties", props, False),
                       StructField("document_index", IntegerType(), False),
                       StructField("document_id", StringType(), False), *document,
                       StructField("document_properties", props, False)])


SCHEMA = schema()
"""The default schema: one row per message and document, properties as JSON."""


def _properties(raw: dict[str, Any], properties_as: str) -> Any:
    props = wire.properties_of(raw)
    if properties_as == "map":
        return {k: v if isinstance(v, str) or v is None else json.dumps(v) for k, v in props.items()}
    return json.dumps(props)


def message_rows(message: dict[str, Any], properties_as: str = "json",
                 documents_as: str = "rows") -> Iterator[tuple[Any, ...]]:
    """A message as the node gives it, as rows of :func:`schema` for these options."""
    head = (message["id"], message["delivery_count"], message["delivery_count"] > 1,
            datetime.fromtimestamp(message["enqueued_at"], tz=timezone.utc), message.get("state"),
            message.get("failed_deliveries"), message.get("reason"), _properties(message, properties_as))
    documents = []
    for index, doc in enumerate(message["documents"]):
        payload = wire.document_bytes(doc)
        documents.append((index, doc["id"], payload, wire.utf8_text(payload), _properties(doc, properties_as)))
    if documents_as == "array":
        yield (*head, [(doc_id, payload, text, props) for _, doc_id, payload, text, props in documents])
    else:
        for document in documents:
            yield (*head, *document)
