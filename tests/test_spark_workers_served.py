"""Spark listeners end to end: ``atomq serve --spark`` as real processes, executions in its
``atomq spark-worker`` (one SparkSession: a JVM, which runs Spark's Python workers).

The node registers the Spark test processes of ``support.listener_processes``
(``ATOMQ_SPARK_PROCESSES``, tests/ on the Spark worker's ``PYTHONPATH``) and
redelivers after 0.1 s.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from rq.job import Job

from atomq.client import AtomqClient
from atomq.errors import JavaMissing
from atomq.spark_workers.session import find_java
from atomq.workers.liveness import SPARK_HEARTBEAT_TTL_S, SPARK_WORKER_FIELD
from atomq.workers.supervisor import SupervisorConfig
from support.listener_processes import registered, spark_stall_first_delivery
from support.processes import pid_running, support_pythonpath
from support.served_node import AtomqServe, ServeFactory
from support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SPARK_ENV = {"ATOMQ_SPARK_PROCESSES": registered(stall=spark_stall_first_delivery),
             "PYTHONPATH": support_pythonpath()}
"""The Spark worker's environment: the test's Spark processes registered and importable."""

SPARK_START_S = 240
"""A Spark worker's JVM and SparkSession take 10-30 s to start, more on a busy 2-core machine."""


@pytest.fixture
def node(serve: ServeFactory) -> AtomqServe:
    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"needs a Java runtime: {exc.message}")
    server = serve("--workers", "0", "--spark", http_workers=1, env=SPARK_ENV)
    with AtomqClient(server.url, server.owner_key) as owner:
        owner.update_server(redelivery_delays_s=[0.1, 0.1])
    return server


@pytest.fixture
def api(node: AtomqServe) -> Iterator[AtomqClient]:
    with node.tenant_client("spark-workers") as client:
        yield client


def spark_workers(node: AtomqServe) -> list[psutil.Process]:
    """The node's ``atomq spark-worker`` processes that run now (its track records them all)."""
    node.track_processes()
    running = []
    for worker in node.execution_workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            if "spark-worker" in worker.cmdline() and pid_running(worker.pid):
                running.append(worker)
    return running


def spark_job_holders(node: AtomqServe) -> dict[str, int]:
    """The Spark workers named by the rq jobs they stamped (``SPARK_WORKER_FIELD``), with the
    seconds each job has left to live (-1: no expiry)."""
    rq = node.redis()
    try:
        holders = {}
        for key in rq.scan_iter(match=Job.redis_job_namespace_prefix + "*", _type="hash"):
            holder = rq.hget(key, SPARK_WORKER_FIELD)
            if holder is not None:
                holders[holder.decode()] = int(rq.ttl(key))
        return holders
    finally:
        rq.close()


def texts(api: AtomqClient, queue: str) -> list[str]:
    return [m["documents"][0]["data"] for m in api.browse(queue)]


def test_kill_9_of_a_spark_worker_mid_execution_brings_the_batch_back_within_seconds(
        node: AtomqServe, api: AtomqClient, tmp_path: Path) -> None:
    """A Spark worker killed mid-execution (as when its machine goes) marks nothing failed: its
    heartbeat stops vouching for the rq job it stamped, and the supervisor counts the execution
    lost within seconds (``SPARK_HEARTBEAT_TTL_S``), long before the ack time-out (300 s) or the
    execution's deadline (240 s). The node's next Spark worker processes the batch, once."""
    pid_file = tmp_path / "spark-python-worker.pid"
    api.put_queue("in", ack_timeout_s=300)
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/stall", {"queue": "in", "process": "stall", "engine": "spark", "batch_size": 10,
                                               "settings": {"to": "out", "sleep_s": 600, "pid_file": str(pid_file)}})
    api.send_texts("in", ["a", "b", "c"])
    wait_until(pid_file.exists, SPARK_START_S,
               "the Spark worker to start and its Python worker to stall in the execution")
    (worker,) = spark_workers(node)
    task = psutil.Process(int(pid_file.read_text()))  # a Python worker of the Spark worker's JVM
    tree = worker.children(recursive=True)  # its JVM, Spark's Python daemon and workers
    assert task in tree, "the stalled task runs under the Spark worker"
    ((holder, ttl),) = spark_job_holders(node).items()
    assert ttl == -1, "a running Spark execution's job does not expire"
    assert holder.split(":")[-2] == str(worker.pid), f"the rq job is stamped by the Spark worker: {holder}"
    assert api.queue("in")["in_flight"] == 3 and api.listener("stall")["failures"] == 0
    worker.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    # Nothing of it outlives it: the JVM exits when its driver's pipe closes, and Spark's Python
    # daemon, with its workers, when the JVM's does.
    wait_until(lambda: not [p.pid for p in [worker, *tree] if pid_running(p.pid)], 30,
               "the Spark worker, its JVM and Spark's Python workers to be gone")
    wait_until(lambda: api.listener("stall")["failures"] == 1, 30, "the execution to count as lost")
    lost_after_s = time.monotonic() - killed_at
    print(f"the execution counted as lost {lost_after_s:.1f} s after the kill")
    assert lost_after_s <= SPARK_HEARTBEAT_TTL_S + 5  # the most a dead Spark worker's last heartbeat vouches for
    # Its job, which nobody will finish now, expires as a failed one does instead of staying for ever.
    assert 0 < spark_job_holders(node)[holder] <= SupervisorConfig.failed_job_ttl_s
    wait_until(lambda: api.queue("out")["depth"] == 3 and api.queue("in")["in_flight"] == 0, SPARK_START_S,
               "the batch back and forwarded by the node's next Spark worker")
    wait_until(lambda: api.listener("stall")["executions"] >= 2, 30, "the retry to finish")
    assert sorted(texts(api, "out")) == ["a", "b", "c"]
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"], queue_in["dead_letters"]) == (0, 0, 0)
    assert "the Spark worker was killed by signal 9" in node.log_path.read_text()
    (successor,) = spark_workers(node)  # tracked (with its JVM): teardown checks it is all gone
    assert successor.pid != worker.pid
    listener = api.listener("stall")
    assert listener["failures"] == 1 and "did not finish" in listener["last_error"]
    assert listener["state"] == "running"
