"""A Spark application on a standalone master that uses the ``atomq`` data source; run by
test_spark_standalone.py as ``python -m support.spark_standalone_app MASTER URL KEY CHECKPOINT``.

It writes three rows to queue ``written``, reads them back, and consumes queue ``in`` into queue
``streamed`` with a streaming query; every row carries ``ran_in``, the working directory of the
Python worker of the task that read or wrote it (an executor's is its directory under the
standalone worker's work directory). It prints its application id and the rows it read as JSON.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import functions as F

from atomq.spark_workers.datasource import register
from atomq.spark_workers.session import start_session


def main(master: str, url: str, key: str, checkpoint: str) -> None:
    # One executor of 512 MiB on the worker's single core: what the test's cluster holds.
    spark = start_session(master, "atomq-standalone-test", **{"spark.executor.memory": "512m"})
    register(spark)

    def cwd() -> str:
        import os  # in here: the function goes to the executor by value

        return os.getcwd()

    ran_in = F.udf(cwd, "string")()  # a Python UDF runs in the same task as the scan or write around it
    opts = {"url": url, "key": key}
    written = spark.createDataFrame([(f"row {i}",) for i in range(3)], "text string")
    written.select("text", F.create_map(F.lit("ran_in"), ran_in).alias("properties")) \
        .write.format("atomq").options(queue="written", **opts).mode("append").save()
    read = spark.read.format("atomq").options(queue="written", **opts).load() \
        .select("text", F.col("properties"), ran_in.alias("ran_in")).collect()
    stream = spark.readStream.format("atomq").options(queue="in", consumer="standalone", **opts).load()
    query = stream.select("text", F.create_map(F.lit("ran_in"), ran_in).alias("properties")) \
        .writeStream.format("atomq").options(queue="streamed", **opts) \
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    print(json.dumps({"app_id": spark.sparkContext.applicationId,
                      "read": [{"text": r.text, "properties": json.loads(r.properties), "ran_in": r.ran_in}
                               for r in read]}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
