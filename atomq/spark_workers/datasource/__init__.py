"""The ``atomq`` PySpark data source: read, consume and write a tenant's queues from Spark.

Register it once per session (``register(spark)``), then::

    spark.read.format("atomq").option("url", URL).option("key", KEY).option("queue", "orders").load()
    spark.readStream.format("atomq").option(...).option("consumer", "billing").load()
    df.write.format("atomq").option(...).option("queue", "out").mode("append").save()
    df.write.format("atomq").option(...).option("topic", "orders/eu/new").mode("append").save()

Everything goes through the main node's HTTP API with the tenant's key
(``key``; the owner key with ``tenant`` acts for that tenant), so the node's
tenancy, rate limits and quotas hold. Options: ``url`` (default
http://127.0.0.1:61717), ``key``, ``tenant``, ``queue``, ``subscriber``;
for reads ``deadLetters`` (browse the dead letter queue), ``propertiesAs``
(``json`` or ``map``) and ``documentsAs`` (``rows`` or ``array``), see ``rows``; for streams
``consumer`` (required: the query's name, under which its batches are
recorded; one running query per name and queue: a query started under
a name fences off the one before it, which then fails),
``maxMessagesPerTrigger`` (default 1000, at most 1000) and ``partitions``
(default 2); for writes ``maxDocumentsPerRequest`` (default 100).

A batch read browses: it consumes nothing. A streaming read consumes: each
micro-batch is planned on the driver by taking deliveries from the main
node and recording them under the consumer's name and the batch number
(``atomq.platform.queues.streams``); partitions read that record, so a retried
task or a restart from the checkpoint reads the same rows; the driver
extends the deliveries until Spark commits the batch, and the commit acks
them. A query that fails or stops leaves its uncommitted batches to come
back by the ack time-out (at-least-once).

Rows written become messages of one document each: the document is the
``text`` or ``data`` column (string) or the ``payload`` column (binary);
``properties`` (a JSON object string or a map), ``dedupe_id``, ``topic`` and
``queue`` (per row, instead of the options) are optional columns. A
``documents`` column (an array of structs of ``text``, ``data`` or ``payload``
and ``properties``, as ``documentsAs=array`` reads them) makes a message of
several documents. A row goes
to its ``topic`` if it has one (a publish: every queue that attracts it), else
to its ``queue``, else to the option ``topic``, else to the option ``queue``. A write that fails
part-way may have stored some rows: give ``dedupe_id`` to make a retry
store each row once.
"""

from __future__ import annotations

import os

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from atomq.spark_workers.datasource.browsing import BrowseReader
from atomq.spark_workers.datasource.consuming import ConsumeReader
from atomq.spark_workers.datasource.interpreter import data_source_python
from atomq.spark_workers.datasource.options import Options
from atomq.spark_workers.datasource.rows import schema
from atomq.spark_workers.datasource.writing import QueueStreamWriter, QueueWriter


def register(spark: SparkSession) -> None:
    """Makes ``format("atomq")`` known to the session, its code run by an interpreter that imports
    atomq (``interpreter``: on a local master without ``PYSPARK_PYTHON``, the driver's).

    Raises:
        SparkPythonMissing: on a local master, ``PYSPARK_PYTHON`` names an interpreter without atomq.
    """
    try:
        sc = spark.sparkContext
    except PySparkException:  # Spark Connect: no SparkContext here, the server's Python runs it
        spark.dataSource.register(AtomqDataSource)
        return
    spark_python = sc.pythonExec
    sc.pythonExec = data_source_python(sc.master or "", spark_python, os.environ.get("PYSPARK_PYTHON"))
    try:
        spark.dataSource.register(AtomqDataSource)  # takes sc.pythonExec now, for the data source alone
    finally:
        sc.pythonExec = spark_python


class AtomqDataSource(DataSource):
    """``format("atomq")``: see the package's description."""

    @classmethod
    def name(cls) -> str:
        return "atomq"

    def schema(self) -> StructType:
        options = Options(self.options)
        return schema(options.properties_as, options.documents_as)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BrowseReader(Options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ConsumeReader(Options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return QueueWriter(Options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return QueueStreamWriter(Options(self.options), schema)
