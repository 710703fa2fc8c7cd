"""A batch read: a queue's messages as they are, consuming nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from atomq import defaults
from atomq.spark_workers.datasource.options import Options
from atomq.spark_workers.datasource.rows import message_rows


class BrowseReader(DataSourceReader):
    """A batch read: every queued (or dead) message, page by page, consuming nothing."""

    def __init__(self, options: Options) -> None:
        self.options = options
        options.need_queue()

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        o = self.options
        with o.client() as client:
            pages = client.dead_letters if o.dead_letters else client.browse
            for message in pages(o.queue, subscriber=o.subscriber, limit=defaults.MAX_PAGE_LIMIT):
                yield from message_rows(message, o.properties_as, o.documents_as)
