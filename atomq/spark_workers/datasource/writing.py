"""A write: rows become messages of one document each."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from atomq.client import BatchingSender, Target, wire
from atomq.errors import InvalidInput
from atomq.spark_workers.datasource.options import Options


class SendCommitMessage(WriterCommitMessage):
    def __init__(self, messages: int, requests: int) -> None:
        self.messages, self.requests = messages, requests


class QueueWriter(DataSourceWriter):
    """Rows become messages, sent through the main node in requests of at most ``maxDocumentsPerRequest`` documents."""

    def __init__(self, options: Options, schema: StructType) -> None:
        self.options = options
        names = set(schema.fieldNames())
        # In this order, per row: a row read from atomq has text only when its payload is UTF-8.
        self.data_columns = [c for c in ("text", "data", "payload") if c in names]
        self.documents = "documents" in names
        if not self.data_columns and not self.documents:
            raise InvalidInput("a DataFrame written to atomq needs a text, data or payload column, or documents",
                               field="columns")
        self.has = {c: c in names for c in ("properties", "dedupe_id", "queue", "topic")}
        if not (self.has["queue"] or self.has["topic"] or options.topic):
            options.need_queue()
        self.default = Target(options.topic, topic=True) if options.topic else Target(options.queue)

    def write(self, iterator: Iterator[Any]) -> SendCommitMessage:
        o = self.options
        messages = 0
        with o.client() as client:
            sender = BatchingSender(client, o.max_documents)
            for row in iterator:
                sender.add(self._target(row), self._message(row))
                messages += 1
            sender.flush()
        return SendCommitMessage(messages, sender.requests)

    def _target(self, row: Any) -> Target:
        """The row's ``topic`` column, else its ``queue`` column, else the option topic or queue."""
        if self.has["topic"] and row["topic"] is not None:
            return Target(row["topic"], topic=True)
        if self.has["queue"] and row["queue"] is not None:
            return Target(row["queue"])
        if not self.default.name:
            raise InvalidInput("a row has neither topic nor queue, and no option names one", field="queue")
        return self.default

    def _message(self, row: Any) -> dict[str, Any]:
        if self.documents and row["documents"] is not None:
            message = wire.message([_document(d, list(d.asDict()), True) for d in row["documents"]])
        else:
            message = wire.message([_document(row, self.data_columns)])
        if self.has["properties"] and row["properties"] is not None:
            message["properties"] = _properties(row["properties"])
        if self.has["dedupe_id"] and row["dedupe_id"] is not None:
            message["dedupe_id"] = str(row["dedupe_id"])
        return message


def _document(fields: Any, names: Sequence[str], own_properties: bool = False) -> dict[str, Any]:
    """A document from a row's ``text``, ``data`` or ``payload``, or from a struct of a
    ``documents`` array (the shape a read with ``documentsAs=array`` gives), whose
    ``properties``, when ``own_properties``, are the document's."""
    columns = [c for c in ("text", "data", "payload") if c in names]
    value = next((fields[c] for c in columns if fields[c] is not None), None)
    if value is None:
        raise InvalidInput(f"a row has a document without content: {', '.join(columns) or 'text, data, payload'} "
                           "all null or missing", field=columns[0] if columns else "documents")
    props = fields["properties"] if own_properties and "properties" in names else None
    return wire.document(value if isinstance(value, str) else bytes(value),
                         None if props is None else _properties(props))


def _properties(props: Any) -> dict[str, Any]:
    """Properties as a JSON object string or a map. Whatever the column holds goes to the node,
    which names what is wrong with it: the JSON text "null" is sent as null and refused there,
    not taken for no properties."""
    return json.loads(props) if isinstance(props, str) else dict(props)


class QueueStreamWriter(DataSourceStreamWriter):
    """Each micro-batch's rows become messages, as :class:`QueueWriter` sends them."""

    def __init__(self, options: Options, schema: StructType) -> None:
        self._writer = QueueWriter(options, schema)

    def write(self, iterator: Iterator[Any]) -> SendCommitMessage:
        return self._writer.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The rows were stored as they were sent: nothing more to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows already sent stay (a retry with dedupe ids stores each once)."""
