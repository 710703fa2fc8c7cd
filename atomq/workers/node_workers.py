"""The execution workers a node keeps running: its fork workers, and its Spark worker on demand.

``atomq serve`` starts ``--workers N`` ``atomq worker`` processes at once, and
one ``atomq spark-worker`` the first time a listener with engine "spark"
exists on any node (at once with ``--spark``, never with ``--no-spark``): a
SparkSession holds a JVM and a gigabyte, which a node whose tenants use no
Spark should not pay for.

Before it starts the Spark worker it checks for a Java runtime as the worker
will (``spark_workers.session.find_java``, which runs it). Without one it
says so once in the node's own log, records why (``liveness.WorkerProblems``:
the Spark listeners wait, with that reason), and looks again every minute,
or as soon as another Spark listener is deployed; it says so again only when
the reason changes. A worker that exits is started again after a back-off
that doubles with each exit that came soon after its start (from 5 s, up to
a minute for a fork worker and 5 minutes for the Spark worker);
the Spark worker writes the reason of a fatal exit to a file the node names,
which the node logs and records.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from atomq import defaults
from atomq.errors import AtomqError, JavaMissing
from atomq.platform.listeners.deployed import ListenerStore
from atomq.platform.store.child_processes import parent_death_signal
from atomq.platform.store.storage import Storage
from atomq.platform.watch.nodes import KeptWorkerState
from atomq.spark_workers.session import find_java
from atomq.workers.liveness import WorkerProblem, WorkerProblems

log = logging.getLogger("atomq.node")

RQ_REDIS_URL_ENV = "ATOMQ_RQ_REDIS_URL"
SPARK_MODES = ("on_demand", "at_start", "never")
BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = {"fork": 60.0, "spark": 300.0}
"""A fork worker is cheap to start and needed back soon after an outage of rq's Redis; a Spark worker is a JVM."""
STEADY_S = 60.0
"""A worker that ran this long before it exited starts its back-off over."""
JAVA_RECHECK_S = 60.0
DEMAND_CHECK_S = 3.0
"""How often a node without a Spark worker looks for a first Spark listener (one read per tenant that has one)."""
PROBLEM_REFRESH_S = 60.0
"""Records of a problem are rewritten this often, so that readers can tell a dead node's (``PROBLEM_STALE_S``)."""
SPARK_ERROR_FILE = "spark-worker.error"


@dataclass(frozen=True)
class WorkerPlan:
    """Which workers a node keeps: see ``atomq serve --help``."""

    fork_workers: int
    spark: str = "on_demand"
    spark_master: str = defaults.SPARK_MASTER
    rq_redis_url: str = ""
    error_dir: Path = Path(".")
    node_id: str = ""

    def __post_init__(self) -> None:
        if self.spark not in SPARK_MODES:
            raise ValueError(f"spark must be one of {SPARK_MODES}")


class KeptWorker:
    """One worker process the node keeps running, with its back-off."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.quick_exits = 0
        self.next_start = 0.0

    def exited(self, now: float) -> float:
        """Notes an exit; the back-off before the next start."""
        self.quick_exits = self.quick_exits + 1 if now - self.started_at < STEADY_S else 1
        delay = min(BACKOFF_FIRST_S * 2.0 ** (self.quick_exits - 1), BACKOFF_MAX_S[self.engine])
        self.next_start = now + delay
        self.proc = None
        return delay


def _exit_status(code: int) -> str:
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


class NodeWorkers:
    """The node's execution workers, kept by the master's loop (:meth:`manage`, about every second)."""

    def __init__(self, plan: WorkerPlan, storage: Callable[[], Storage],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plan = plan
        self._storage = storage
        self.clock = clock
        self.fork = [KeptWorker("fork") for _ in range(plan.fork_workers)]
        self.spark: KeptWorker | None = None
        self._spark_wanted = plan.spark == "at_start"
        self._demand_checked_at = -DEMAND_CHECK_S
        self._spark_listeners = 0
        self._java_checked_at: float | None = None
        self._java_problem = ""
        self._problems: dict[str, tuple[WorkerProblem, float]] = {}
        self._said = ""
        self.stopping = False

    @property
    def error_file(self) -> Path:
        return self.plan.error_dir / SPARK_ERROR_FILE

    # -- the master's loop ------------------------------------------------------------------

    def manage(self) -> None:
        """One turn of the master's loop. It runs inside gunicorn's arbiter, which stops the
        whole node on any exception: a failure here (a fork refused under memory pressure,
        say) is logged and tried again on a later turn instead."""
        try:
            self._manage()
        except Exception:
            log.exception("keeping the execution workers failed; trying again shortly")

    def _manage(self) -> None:
        if self.stopping:
            return
        now = self.clock()
        for worker in self.fork:
            self._keep(worker, now)
        if self._wants_spark(now):
            if self.spark is None:
                self.spark = KeptWorker("spark")
            self._keep(self.spark, now)
        self._refresh_problems(now)

    def collect_exits(self) -> None:
        """Takes the exit status of every worker that ended, for ``_keep`` to report. The master
        calls it before gunicorn's own reaping, which waits for any child and would otherwise take
        the status (a worker killed by a signal would then seem to have exited with status 0)."""
        for worker in [*self.fork, *([self.spark] if self.spark else [])]:
            if worker.proc is not None:
                worker.proc.poll()

    def _keep(self, worker: KeptWorker, now: float) -> None:
        if worker.proc is not None:
            code = worker.proc.poll()
            if code is None:
                if now - worker.started_at >= STEADY_S and worker.engine in self._problems:
                    self._clear_problem(worker.engine)
                return
            self._exited(worker, code, now)
        if now < worker.next_start:
            return
        if worker.engine == "spark" and not self._java_ready(now):
            return
        worker.proc = self._spawn(worker.engine)
        worker.started_at = now
        if worker.engine == "spark":
            self._put_problem("spark", "starting", f"the Spark worker of node {self.plan.node_id} is starting "
                                                   "(a JVM and a SparkSession take 10-30 s)", now)

    def _exited(self, worker: KeptWorker, code: int, now: float) -> None:
        delay = worker.exited(now)
        reason = _exit_status(code)
        if worker.engine == "spark":
            error = self._read_error_file()
            if error:
                reason = f"{reason}: {error}"
            text = f"the Spark worker {reason}; the node starts another in {delay:.0f} s"
        else:
            text = f"an execution worker {reason}; the node starts another in {delay:.0f} s"
        log.warning("%s", text)
        self._put_problem(worker.engine, "failed", text, now)

    def _read_error_file(self) -> str:
        try:
            return " ".join(self.error_file.read_text(errors="replace").split())[:1000]
        except OSError:
            return ""

    # -- the Spark worker on demand ------------------------------------------------------------

    def _wants_spark(self, now: float) -> bool:
        if self._spark_wanted or self.plan.spark == "never":
            return self._spark_wanted
        if self._more_spark_listeners(now):
            self._spark_wanted = True
            log.info("a listener with engine \"spark\" exists: starting the Spark worker")
        return self._spark_wanted

    def _more_spark_listeners(self, now: float) -> bool:
        """Whether Spark listeners were deployed since the last look (one look every ``DEMAND_CHECK_S``)."""
        if now - self._demand_checked_at < DEMAND_CHECK_S:
            return False
        self._demand_checked_at = now
        try:
            count = ListenerStore(self._storage()).spark_listener_count()
        except (AtomqError, redis.RedisError) as exc:
            self._say(f"cannot tell whether Spark listeners exist: {exc}", logging.WARNING)
            return False
        more = count > self._spark_listeners
        self._spark_listeners = count
        return more

    def _java_ready(self, now: float) -> bool:
        """Whether Java is there; while it is not, looked for again every ``JAVA_RECHECK_S``
        and whenever another Spark listener is deployed."""
        if self._java_checked_at is not None:
            if not self._java_problem:
                return True
            if now - self._java_checked_at < JAVA_RECHECK_S and not self._more_spark_listeners(now):
                return False
        self._java_checked_at = now
        try:
            find_java()
        except JavaMissing as exc:
            problem = f"{exc.message}; the node checks again every {JAVA_RECHECK_S:.0f} s"
            if problem != self._java_problem:
                log.error("the Spark worker cannot start: %s", problem)
            self._java_problem = problem
            self._put_problem("spark", "failed", problem, now)
            return False
        if self._java_problem:
            log.info("a Java runtime is there now: starting the Spark worker")
        self._java_problem = ""
        return True

    # -- processes ---------------------------------------------------------------------------

    def _spawn(self, engine: str) -> subprocess.Popen[bytes]:
        # The URL may hold a password: it goes through the environment, never the command line.
        env = {**os.environ, RQ_REDIS_URL_ENV: self.plan.rq_redis_url}
        command = [sys.executable, "-m", "atomq", "worker"]
        if engine == "spark":
            self.error_file.unlink(missing_ok=True)
            command = [sys.executable, "-m", "atomq", "spark-worker", "--spark-master", self.plan.spark_master,
                       "--error-file", str(self.error_file)]
        # Its own session: a terminal's Ctrl-C reaches the master, which stops the workers
        # first; and the master's death, even by kill -9, stops them too.
        return subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=parent_death_signal())

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [w.proc for w in [*self.fork, *([self.spark] if self.spark else [])] if w.proc is not None]

    def stop(self, timeout_s: float) -> None:
        """SIGTERM to every worker (each finishes its executions), then kill what is left after ``timeout_s``."""
        self.stopping = True
        procs = self.processes()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for engine in list(self._problems):
            self._clear_problem(engine)

    # -- what the node says --------------------------------------------------------------------

    def describe(self, executions: dict[int, str] | None = None) -> list[KeptWorkerState]:
        """Each worker the node keeps, for its record (``atomq.platform.watch.nodes``): running since
        when (and what it runs, from ``executions`` by pid), or restarting after an exit, with
        the problem its engine has."""
        now, wall = self.clock(), time.time()
        out = []
        for worker in [*self.fork, *([self.spark] if self.spark else [])]:
            problem = self._problems.get(worker.engine)
            if worker.proc is not None and worker.proc.returncode is None:
                state, pid, since = "running", worker.proc.pid, wall - (now - worker.started_at)
            elif not worker.started_at:
                state, pid, since = "not started", None, 0.0
            else:
                state, pid, since = "restarting", None, wall + max(0.0, worker.next_start - now)
            out.append(KeptWorkerState(engine=worker.engine, pid=pid, state=state, since=since,
                                       restarts=worker.quick_exits, problem=problem[0].message if problem else "",
                                       execution=(executions or {}).get(pid or 0, "")))
        return out

    def _put_problem(self, engine: str, state: str, message: str, now: float) -> None:
        problem = WorkerProblem(engine, state, message, time.time())
        self._problems[engine] = (problem, now)
        self._publish(problem)

    def _refresh_problems(self, now: float) -> None:
        for engine, (problem, published_at) in list(self._problems.items()):
            if now - published_at >= PROBLEM_REFRESH_S:
                self._put_problem(engine, problem.state, problem.message, now)

    def _clear_problem(self, engine: str) -> None:
        self._problems.pop(engine, None)
        try:
            WorkerProblems(self._storage()).clear(self.plan.node_id, engine)
        except (AtomqError, redis.RedisError) as exc:
            self._say(f"cannot record the execution workers' state: {exc}", logging.WARNING)

    def _publish(self, problem: WorkerProblem) -> None:
        try:
            WorkerProblems(self._storage()).put(self.plan.node_id, problem)
        except (AtomqError, redis.RedisError) as exc:
            self._say(f"cannot record the execution workers' state: {exc}", logging.WARNING)

    def _say(self, text: str, level: int) -> None:
        """Logs ``text`` unless it was the last thing said this way (the loop runs every second)."""
        if text != self._said:
            log.log(level, "%s", text)
            self._said = text
