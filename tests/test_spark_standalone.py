"""atomq on a real Spark standalone cluster: a master and one worker started from the installed
pyspark (``support.spark_standalone``), the recipe infra/README.md gives.

On a standalone master the driver runs no tasks: they run in the executors the worker starts,
each in ``<work dir>/<application id>/<executor id>``, the working directory of the executor's
JVM and of the Python workers it starts. The processes here report that directory per row (a
Python UDF in the same task as the scan or write), which names the application and executor.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from atomq.client import AtomqClient
from atomq.errors import JavaMissing
from atomq.spark_workers.session import find_java
from support.listener_processes import registered, spark_forward_where_run, spark_rows_where_run
from support.processes import REPO, clean_env, pid_running, support_pythonpath
from support.served_node import AtomqServe, ServeFactory
from support.spark_standalone import StandaloneSpark
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPARK_ENV = {"ATOMQ_SPARK_PROCESSES": registered(where=spark_forward_where_run, rows=spark_rows_where_run),
             "PYTHONPATH": support_pythonpath()}

APP_S = 300
"""An application's driver and executor JVMs, and its first Python tasks, on a busy 2-core machine."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneSpark]:
    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"needs a Java runtime: {exc.message}")
    spark = StandaloneSpark(tmp_path / "spark", cores=1, memory="1g")
    try:
        spark.start()
        yield spark
    finally:
        spark.stop()
        print(spark.logs())


def rq_url(node: AtomqServe) -> str:
    """The node's embedded Valkey as ``atomq spark-worker --rq-redis-url`` takes it."""
    password = (node.valkey_dir / "password").read_text().strip()
    return f"unix://:{quote(password, safe='')}@{quote(str(node.socket_path()))}"


def ran_in(message: dict[str, Any]) -> str:
    """Where the task that made the message ran (its ``ran_in`` property)."""
    return str(message["properties"]["ran_in"])


def test_listeners_and_the_data_source_run_in_the_standalone_workers_executors(
        cluster: StandaloneSpark, serve: ServeFactory, tmp_path: Path) -> None:
    started = time.monotonic()
    node = serve("--workers", "0", "--no-spark", http_workers=1, env=SPARK_ENV)
    with AtomqClient(node.url, node.owner_key) as owner:
        key = owner.create_tenant("standalone")["api_key"]
    with AtomqClient(node.url, key) as api:
        for queue in ("in", "written", "streamed", "orders", "out", "lines", "lines-out"):
            api.put_queue(queue)
        api.send_texts("in", ["a", "b", "c", "d"])

        # A data engineer's application: read, readStream and write through the data source.
        app = subprocess.run([sys.executable, "-m", "support.spark_standalone_app", cluster.master_url, node.url,
                              key, str(tmp_path / "checkpoint")], cwd=REPO, capture_output=True, text=True,
                             timeout=APP_S, env=clean_env(**SPARK_ENV))
        assert app.returncode == 0, app.stderr[-3000:]
        result = json.loads(app.stdout.strip().splitlines()[-1])
        executor = cluster.work_dir / result["app_id"] / "0"
        assert (executor / "stderr").is_file(), cluster.executor_dirs()
        assert [(r["text"], r["ran_in"]) for r in sorted(result["read"], key=lambda r: r["text"])] == [
            (f"row {i}", str(executor)) for i in range(3)]
        assert {r["properties"]["ran_in"] for r in result["read"]} == {str(executor)}  # written there too
        streamed = list(api.browse("streamed"))
        assert sorted(m["documents"][0]["data"] for m in streamed) == ["a", "b", "c", "d"]
        assert {m["properties"]["ran_in"] for m in streamed} == {str(executor)}
        data_source_s = time.monotonic() - started

        # A Spark listener's executions, run by `atomq spark-worker` against the same master.
        log = (tmp_path / "spark-worker.log").open("wb")
        worker = subprocess.Popen([sys.executable, "-m", "atomq", "spark-worker", "--rq-redis-url", rq_url(node),
                                   "--spark-master", cluster.master_url, "--concurrency", "1"],
                                  cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=clean_env(**SPARK_ENV))
        try:
            api.request("PUT", "/v1/listeners/where", {"queue": "orders", "process": "where", "engine": "spark",
                                                       "batch_size": 10, "settings": {"to": "out"}})
            # A process with a row form: its batch goes to the executors as plain rows, no DataFrame.
            api.request("PUT", "/v1/listeners/rows", {"queue": "lines", "process": "rows", "engine": "spark",
                                                      "batch_size": 10, "settings": {"to": "lines-out"}})
            api.send_texts("orders", [f"order {i}" for i in range(30)])
            api.send_texts("lines", [f"line {i}" for i in range(20)])
            wait_until(lambda: api.queue("out")["depth"] == 30, APP_S, "the listener's executions on the cluster")
            wait_until(lambda: api.queue("lines-out")["depth"] == 20, APP_S, "the row listener's executions")
            wait_until(lambda: api.listener("where")["executions"] >= 3, 30, "the executions to finish")
            wait_until(lambda: api.listener("rows")["executions"] >= 2, 30, "the row executions to finish")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
            log.close()
        out = list(api.browse("out"))
        assert sorted(m["documents"][0]["data"] for m in out) == sorted(f"order {i}" for i in range(30))
        (listener_app,) = {Path(ran_in(m)).parent.name for m in out}
        assert listener_app != result["app_id"] and Path(ran_in(out[0])).name == "0"
        assert (cluster.work_dir / listener_app / "0" / "stderr").is_file()
        assert api.listener("where")["failures"] == 0
        lines = list(api.browse("lines-out"))
        assert sorted(m["documents"][0]["data"] for m in lines) == sorted(f"line {i}" for i in range(20))
        assert {(ran_in(m), m["properties"]["form"]) for m in lines} == {(ran_in(out[0]), "rows")}
        assert api.listener("rows")["failures"] == 0
    assert not pid_running(worker.pid)
    print(f"standalone: data source application {data_source_s:.1f} s, "
          f"whole test {time.monotonic() - started:.1f} s")
