"""The node's execution and Spark workers, tried as a new user would: ``atomq serve`` with no flag, real processes.

A node starts two execution workers by default and its Spark worker the
first time a Spark listener is deployed. A listener whose engine has no
live worker is ``waiting`` and says what is missing; a Spark worker that
cannot start (no Java runtime) says so once, is not started again in a
tight loop, and ``/v1/ready`` names it.

The machine's own Java is hidden from a node by its environment: a
``JAVA_HOME`` that points at an empty directory and a ``PATH`` without java
(``support.processes.no_java_env``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psutil
import pytest
import requests

from atomq.client import AtomqClient
from atomq.errors import JavaMissing
from atomq.platform.listeners.deployed import ListenerSpec, ListenerStore
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.storage import Storage
from atomq.spark_workers import session
from atomq.workers import liveness, node_workers
from atomq.workers.node_workers import NodeWorkers, WorkerPlan
from support.processes import clean_env, no_java_env
from support.served_node import AtomqServe, ServeFactory
from support.waiting import wait_until

FORWARD = {"queue": "in", "process": "forward", "settings": {"to": "out"}}


def spark_worker_pids(node: AtomqServe) -> set[int]:
    found = set()
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(node.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if "spark-worker" in child.cmdline():
                    found.add(child.pid)
    return found


@contextlib.contextmanager
def tenant_api(node: AtomqServe) -> Iterator[AtomqClient]:
    with node.tenant_client("out-of-the-box") as api:
        api.put_queue("in")
        api.put_queue("out")
        yield api


# -- atomq serve ------------------------------------------------------------------------------


@pytest.mark.slow
def test_serve_without_a_worker_flag_runs_fork_listeners(serve: ServeFactory) -> None:
    node = serve(http_workers=1)
    wait_until(lambda: (node.track_processes(), len(node.execution_workers) == 2)[1], 30, "two execution workers")
    with tenant_api(node) as api:
        api.request("PUT", "/v1/listeners/fwd", FORWARD)
        api.send_texts("in", [f"message {i}" for i in range(5)])
        wait_until(lambda: api.queue("out")["depth"] == 5 and api.queue("in")["in_flight"] == 0, 60,
                   "the 5 messages forwarded")
        # The workers register with rq as they start; the supervisor reads that every 2 s.
        wait_until(lambda: api.listener("fwd")["state"] == "running", 10, "the listener to run")
        listener = api.listener("fwd")
        assert listener["last_error"] == "" and listener["executions"] >= 1 and listener["failures"] == 0


@pytest.mark.slow
def test_without_java_a_spark_listener_waits_and_the_node_says_so_once(
        serve: ServeFactory, tmp_path: Path) -> None:
    node = serve("--workers", "0", http_workers=1, env=no_java_env(tmp_path))
    with tenant_api(node) as api:
        api.request("PUT", "/v1/listeners/sparky", {**FORWARD, "engine": "spark"})
        api.send_texts("in", ["waits"])
        wait_until(lambda: api.listener("sparky")["state"] == "waiting"
                   and "no Java runtime" in api.listener("sparky")["last_error"], 30, "the listener to wait")
        reason = api.listener("sparky")["last_error"]
        assert reason.startswith("no Spark worker is running: no Java runtime: JAVA_HOME is ")
        assert "openjdk-17-jre-headless" in reason and "checks again every 60 s" in reason
        ready = requests.get(node.url + "/v1/ready", timeout=5)
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        assert [w for w in ready.json()["warnings"] if w.startswith("spark worker: no Java runtime: JAVA_HOME")]
        # Watched for 10 s: no Spark worker is started, and the node said it once.
        spawned: set[int] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            spawned |= spark_worker_pids(node)
            time.sleep(0.1)
        assert not spawned
        assert node.log_path.read_text().count("the Spark worker cannot start: no Java runtime") == 1
        assert (api.listener("sparky")["state"], api.queue("in")["depth"]) == ("waiting", 1)


@pytest.mark.slow
def test_a_listener_waits_for_an_execution_worker_and_runs_once_one_is_started(
        serve: ServeFactory) -> None:
    node = serve("--workers", "0", http_workers=1)
    with tenant_api(node) as api:
        api.request("PUT", "/v1/listeners/fwd", FORWARD)
        api.send_texts("in", ["one", "two", "three"])
        wait_until(lambda: api.listener("fwd")["state"] == "waiting", 30, "the listener to wait")
        assert api.listener("fwd")["last_error"] == liveness.FORK_MISSING
        assert api.queue("out")["depth"] == 0
        password = (node.valkey_dir / "password").read_text().strip()
        rq_url = f"unix://:{quote(password, safe='')}@{quote(str(node.socket_path()))}"
        worker = subprocess.Popen([sys.executable, "-m", "atomq", "worker"], env=clean_env(ATOMQ_RQ_REDIS_URL=rq_url),
                                  start_new_session=True)
        try:
            wait_until(lambda: api.queue("out")["depth"] == 3 and api.queue("in")["in_flight"] == 0, 60,
                       "the 3 messages forwarded")
            wait_until(lambda: api.listener("fwd")["state"] == "running", 10, "the listener to run")
            assert api.listener("fwd")["last_error"] == ""
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0
            wait_until(lambda: api.listener("fwd")["state"] == "waiting", 15, "the listener to wait again")
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_spark_worker_starts_when_the_first_spark_listener_is_deployed(
        serve: ServeFactory) -> None:
    try:
        session.find_java()
    except JavaMissing as exc:
        pytest.skip(f"needs a Java runtime: {exc.message}")
    node = serve("--workers", "0", http_workers=1)
    with tenant_api(node) as api:
        api.request("PUT", "/v1/listeners/fwd", FORWARD)  # a fork listener starts no Spark worker
        api.send_texts("in", ["by spark"])
        wait_until(lambda: api.listener("fwd")["state"] == "waiting", 30, "the fork listener to wait")
        assert not spark_worker_pids(node)
        api.request("DELETE", "/v1/listeners/fwd")
        api.request("PUT", "/v1/listeners/sparky", {**FORWARD, "engine": "spark"})
        wait_until(lambda: spark_worker_pids(node), 30, "the Spark worker to start")
        wait_until(lambda: api.queue("out")["depth"] == 1 and api.queue("in")["in_flight"] == 0, 240,
                   "the message forwarded by Spark")
        listener = api.listener("sparky")
        assert (listener["state"], listener["last_error"], listener["failures"]) == ("running", "", 0)
        assert len(spark_worker_pids(node)) == 1


# -- the node's workers, one step at a time --------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def storage(valkey: EmbeddedValkey) -> Iterator[Storage]:
    """A database of the session's Valkey of its own: no other test's listeners count here."""
    client = valkey.client(db=7)
    client.flushdb()
    yield Storage(client)
    client.flushdb()
    client.close()


class Said(logging.Handler):
    """What the node's workers say in its log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_spark_worker_that_exits_is_started_again_after_a_growing_back_off_and_its_error_is_kept(
        storage: Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_workers, "find_java", lambda: (Path("/java"), 17))
    workers = NodeWorkers(WorkerPlan(fork_workers=0, spark="at_start", error_dir=tmp_path, node_id="n_backoff"),
                          lambda: storage, clock := Clock())
    spawned: list[float] = []

    def failing_spark_worker(engine: str) -> subprocess.Popen[bytes]:
        spawned.append(clock.now)
        write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('Spark did not start: boom\\n'); sys.exit(3)"
        return subprocess.Popen([sys.executable, "-c", write, str(workers.error_file)])

    monkeypatch.setattr(workers, "_spawn", failing_spark_worker)
    problems = liveness.WorkerProblems(storage)
    for _ in range(400):  # 200 s in steps of 0.5 s; each exit is seen at the step after its start
        workers.manage()
        for proc in workers.processes():
            proc.wait()
        clock.now += 0.5
    assert [b - a - 0.5 for a, b in zip(spawned, spawned[1:])] == [5, 10, 20, 40, 80]
    (problem,) = problems.of_node("n_backoff")
    assert problem.state == "failed"
    assert problem.message == ("the Spark worker exited with status 3: Spark did not start: boom; "
                               "the node starts another in 160 s")
    workers.stop(5)
    assert problems.of_node("n_backoff") == []


def test_without_java_the_node_says_so_once_and_looks_again_each_minute_or_for_a_new_spark_listener(
        storage: Storage, tenant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    looked: list[float] = []
    clock = Clock()

    def no_java() -> tuple[Path, int]:
        looked.append(clock.now)
        raise JavaMissing("no Java runtime was found (JAVA_HOME is not set and there is no java on PATH)")

    monkeypatch.setattr(node_workers, "find_java", no_java)
    workers = NodeWorkers(WorkerPlan(fork_workers=0, spark="on_demand", error_dir=tmp_path, node_id="n_nojava"),
                          lambda: storage, clock)
    monkeypatch.setattr(workers, "_spawn", lambda engine: pytest.fail("spawned without Java"))
    store = ListenerStore(storage)
    spark = ListenerSpec(queue="in", process="forward", engine="spark", settings={"to": "out"})
    said = Said()
    node_log = logging.getLogger("tests.node_workers.node")
    node_log.addHandler(said)
    node_log.setLevel(logging.INFO)
    node_log.propagate = False
    monkeypatch.setattr(node_workers, "log", node_log)

    def run_for(seconds: float) -> None:
        for _ in range(int(seconds / 0.5)):
            workers.manage()
            clock.now += 0.5

    run_for(10)
    assert looked == []  # no Spark listener yet: no Spark worker wanted
    store.put(tenant, "s1", spark)
    run_for(90)
    first = looked[0]
    assert [round(t - first) for t in looked] == [0, 60]
    store.put(tenant, "s2", spark)  # a new Spark listener: look again now
    run_for(5)
    assert len(looked) == 3 and looked[2] - first < 100
    node_log.removeHandler(said)
    assert [line for line in said.lines if "cannot start" in line] == [
        "the Spark worker cannot start: no Java runtime was found (JAVA_HOME is not set and there is no java on "
        "PATH); the node checks again every 60 s"]
    (problem,) = liveness.WorkerProblems(storage).of_node("n_nojava")
    assert problem.message.startswith("no Java runtime was found")


def test_a_spark_worker_that_cannot_start_writes_why_where_its_node_reads_it(
        valkey: EmbeddedValkey, tmp_path: Path) -> None:
    error_file = tmp_path / node_workers.SPARK_ERROR_FILE
    done = subprocess.run([sys.executable, "-m", "atomq", "spark-worker", "--error-file", str(error_file)],
                          env=clean_env(ATOMQ_RQ_REDIS_URL=valkey.url, **no_java_env(tmp_path)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    reason = error_file.read_text().strip()
    assert reason.startswith(f"no Java runtime: JAVA_HOME is {tmp_path / 'no-java-here'}, which has no bin/java")
    assert reason in done.stderr
