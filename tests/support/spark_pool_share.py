"""Two tenants' pools busy side by side on a session of their own; run by test_spark_pools.py as
``python -m support.spark_pool_share``.

Prints a JSON object: the tasks each tenant's job started while both jobs ran.
It needs a session of its own (``local[4]`` or the master given as its
argument), which the suite's session cannot be in the same process.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark import InheritableThread

from atomq.spark_workers.session import start_session
from atomq.spark_workers.worker import FairPools

TASKS = 160
TASK_S = 0.05


def busy_job(spark, tenant: str, results: dict) -> None:  # type: ignore[no-untyped-def]
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", tenant)

    def task(_rows):  # type: ignore[no-untyped-def]
        started = time.time()
        time.sleep(TASK_S)
        yield started

    starts = spark.sparkContext.parallelize(range(TASKS), TASKS).mapPartitions(task).collect()
    results[tenant] = (starts, time.time())


def main(master: str) -> None:
    spark = start_session(master, "atomq-pool-share", **{"spark.scheduler.mode": "FAIR"})
    pools = FairPools(spark)
    pools.ensure("heavy", 3)
    pools.ensure("light", 1)
    spark.sparkContext.parallelize(range(8), 8).count()  # Python workers up before the race
    results: dict = {}
    threads = [InheritableThread(target=busy_job, args=(spark, t, results)) for t in ("heavy", "light")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    both_busy_until = min(end for _, end in results.values())
    counts = {t: sum(1 for s in starts if s < both_busy_until) for t, (starts, _) in results.items()}
    print(json.dumps(counts))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "local[4]")
