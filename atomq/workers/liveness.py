"""Whether a worker of each engine is alive, and if not, why: what a waiting listener says.

A listener whose engine has no live worker cannot run, however healthy its
queue is; its supervisor marks it ``waiting`` with the reason and what to do
about it. Workers may run on any machine, so liveness is read from Redis:

- fork workers (``atomq worker``, or those ``atomq serve --workers N``
  starts) are rq workers: rq's own registry lists them, and each heartbeats
  (``last_heartbeat``) before every wait for a job and, while a work horse
  runs, every ``JOB_MONITORING_INTERVAL_S``;
- a Spark worker (``atomq spark-worker``) heartbeats into a sorted set in
  rq's Redis (:data:`keys.SPARK_WORKERS_KEY`), each heartbeat good for
  ``SPARK_HEARTBEAT_TTL_S`` on the server's clock;
- a node whose own worker is not running says why in the main store
  (:class:`WorkerProblems`): starting, no Java runtime, or exited with an
  error and started again after a back-off.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from rq import Worker
from rq.job import Job
from rq.utils import now as rq_now
from rq.utils import utcparse

from atomq.errors import AtomqError
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.storage import Storage

log = logging.getLogger("atomq.liveness")

JOB_MONITORING_INTERVAL_S = 2
"""How often a busy fork worker heartbeats (rq's ``job_monitoring_interval``, 30 s by default): a
worker killed with its work horse (its machine gone, say) is seen dead within seconds, and its
execution's batch and listener slot come back then, not at the execution's deadline."""
FORK_HEARTBEAT_STALE_S = 3 * JOB_MONITORING_INTERVAL_S
"""A fork worker silent for longer is dead (killed without the chance to say so)."""
SPARK_WORKER_FIELD = "atomq_spark_worker"
"""In a Spark execution's rq job: the Spark worker running it (rq's ``worker_name`` names a fork worker)."""
SPARK_HEARTBEAT_S = 5.0
SPARK_HEARTBEAT_TTL_S = 20.0
PROBLEM_STALE_S = 180.0
"""A node rewrites its record of a problem every minute; an older one is a dead node's."""
CHECK_INTERVAL_S = 2.0
"""How long a supervisor reuses what it read while every engine has a live worker: rounds run
every 0.2 s."""
MISSING_RECHECK_S = 0.1
"""How long it reuses what it read while an engine has none: a round's listeners share one read."""

SPARK_STARTING = "no Spark worker is running yet"
"""How the reason of a Spark listener begins while a node's Spark worker starts (not a failure)."""
FORK_MISSING = ("no execution worker is running: start `atomq serve --workers N` (2 by default) "
                "or `atomq worker --rq-redis-url URL` on any machine")
SPARK_MISSING = ("no Spark worker is running: `atomq serve` starts one for Spark listeners (unless --no-spark), "
                 "or start `atomq spark-worker --rq-redis-url URL` on any machine")


def _now_ms(rq: redis.Redis) -> int:
    seconds, micros = rq.time()
    return int(seconds) * 1000 + int(micros) // 1000


def spark_heartbeat(rq: redis.Redis, name: str, running: list[str] | None = None) -> None:
    """One heartbeat of Spark worker ``name``, with what it runs now (``<tenant>/<listener>`` each);
    the entries of workers silent for an hour go."""
    now = _now_ms(rq)
    gone: list[bytes] = list(rq.zrangebyscore(lk.SPARK_WORKERS_KEY, "-inf", now - 3600_000))  # type: ignore[arg-type]
    with rq.pipeline(transaction=False) as pipe:
        pipe.zadd(lk.SPARK_WORKERS_KEY, {name: now + int(SPARK_HEARTBEAT_TTL_S * 1000)})
        pipe.hset(lk.SPARK_RUNNING_KEY, name, json.dumps(running or []))
        if gone:
            pipe.zrem(lk.SPARK_WORKERS_KEY, *gone)
            pipe.hdel(lk.SPARK_RUNNING_KEY, *gone)
        pipe.execute()


def spark_gone(rq: redis.Redis, name: str) -> None:
    """A Spark worker that stops says so at once."""
    with rq.pipeline(transaction=False) as pipe:
        pipe.zrem(lk.SPARK_WORKERS_KEY, name)
        pipe.hdel(lk.SPARK_RUNNING_KEY, name)
        pipe.execute()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def spark_executions(rq: redis.Redis, hostname: str) -> dict[int, str]:
    """What each live Spark worker of ``hostname`` runs now, by its pid (its name is
    ``<host>:<pid>:<random>``): ``<tenant>/<listener>`` each, joined by ", "."""
    live = {_text(m) for m in rq.zrangebyscore(lk.SPARK_WORKERS_KEY, _now_ms(rq), "+inf")}
    out: dict[int, str] = {}
    for raw_name, raw in rq.hgetall(lk.SPARK_RUNNING_KEY).items():
        name = _text(raw_name)
        parts = name.split(":")
        if name in live and len(parts) == 3 and parts[0] == hostname and parts[1].isdigit():
            labels = json.loads(raw)
            if labels:
                out[int(parts[1])] = ", ".join(labels)
    return out


def live_spark_workers(rq: redis.Redis) -> int:
    return int(rq.zcount(lk.SPARK_WORKERS_KEY, _now_ms(rq), "+inf"))


def live_fork_workers(rq: redis.Redis) -> int:
    """rq workers on the tenants' execution queues that heartbeat lately (rq's Redis may
    hold other applications' workers too: atomq's listen on queues named ``aq.*``)."""
    now = rq_now()
    alive = 0
    for worker in Worker.all(connection=rq):
        names = worker.queue_names()
        if not names or not all(n.startswith(f"{k.PREFIX}.") for n in names):
            continue
        if worker.last_heartbeat and (now - worker.last_heartbeat).total_seconds() <= FORK_HEARTBEAT_STALE_S:
            alive += 1
    return alive


def current_executions(rq: redis.Redis) -> dict[int, str]:
    """What each live atomq fork worker runs now, by the worker's pid: ``<tenant>/<listener>`` (a
    node's record names the execution of each worker it keeps). rq keeps a worker's executions in
    an index of its own, which other processes read."""
    out: dict[int, str] = {}
    for worker in Worker.all(connection=rq):
        names = worker.queue_names()
        if not names or not all(n.startswith(f"{k.PREFIX}.") for n in names) or not worker.pid:
            continue
        for execution in worker.get_current_executions():
            job = Job.fetch(execution.job_id, connection=rq) if Job.exists(execution.job_id, connection=rq) else None
            if job is not None:
                tenant = job.origin.removeprefix(f"{k.PREFIX}.")
                out[int(worker.pid)] = f"{tenant}/{(job.kwargs or {}).get('listener', '?')}"
    return out


def silent_workers(rq: redis.Redis, fork: set[str], spark: set[str]) -> set[str]:
    """Of the fork workers ``fork`` and Spark workers ``spark`` (by name), those whose heartbeat
    is gone or stale: dead, with whatever they were running."""
    names = sorted(fork) + sorted(spark)
    if not names:
        return set()
    with rq.pipeline(transaction=False) as pipe:
        for name in sorted(fork):
            pipe.hget(Worker.redis_worker_namespace_prefix + name, "last_heartbeat")
        for name in sorted(spark):
            pipe.zscore(lk.SPARK_WORKERS_KEY, name)
        beats = pipe.execute()
    now, now_ms = rq_now(), _now_ms(rq)
    silent = set()
    for name, beat in zip(sorted(fork), beats):
        if beat is None or (now - utcparse(beat.decode())).total_seconds() > FORK_HEARTBEAT_STALE_S:
            silent.add(name)
    for name, good_until in zip(sorted(spark), beats[len(fork):]):
        if good_until is None or good_until < now_ms:
            silent.add(name)
    return silent


@dataclass(frozen=True)
class WorkerProblem:
    """Why a node's own worker of ``engine`` does not run: ``starting``, or ``failed`` with the reason."""

    engine: str
    state: str
    message: str
    at: float

    def to_json(self) -> str:
        return json.dumps({"state": self.state, "message": self.message, "at": self.at})


class WorkerProblems:
    """The nodes' records of their own workers that do not run, in the main store."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def put(self, node_id: str, problem: WorkerProblem) -> None:
        self.storage.call(self.storage.client.hset, lk.WORKER_PROBLEMS_KEY,
                          lk.worker_problem_field(node_id, problem.engine), problem.to_json())

    def clear(self, node_id: str, engine: str) -> None:
        self.storage.call(self.storage.client.hdel, lk.WORKER_PROBLEMS_KEY, lk.worker_problem_field(node_id, engine))

    def of_node(self, node_id: str) -> list[WorkerProblem]:
        """The node's own records (``/v1/ready`` names its failures)."""
        fields = [lk.worker_problem_field(node_id, engine) for engine in ("fork", "spark")]
        raws = self.storage.call(self.storage.client.hmget, lk.WORKER_PROBLEMS_KEY, fields)
        return [p for engine, raw in zip(("fork", "spark"), raws) if raw is not None
                for p in [_problem(engine, raw)] if p is not None]

    def fresh(self, engine: str) -> list[WorkerProblem]:
        """Every node's recent record for ``engine``, newest first; older ones (their node died) go."""
        records = self.storage.call(self.storage.client.hgetall, lk.WORKER_PROBLEMS_KEY)
        found, stale = [], []
        cutoff = time.time() - PROBLEM_STALE_S
        for raw_field, raw in records.items():
            field = raw_field.decode()
            if not field.endswith(f":{engine}"):
                continue
            problem = _problem(engine, raw)
            if problem is None or problem.at < cutoff:
                stale.append(field)
            else:
                found.append(problem)
        if stale:
            self.storage.call(self.storage.client.hdel, lk.WORKER_PROBLEMS_KEY, *stale)
        return sorted(found, key=lambda p: p.at, reverse=True)


def _problem(engine: str, raw: bytes) -> WorkerProblem | None:
    try:
        data = json.loads(raw)
        return WorkerProblem(engine, str(data["state"]), str(data["message"]), float(data["at"]))
    except (ValueError, KeyError, TypeError):
        return None


class WorkerLiveness:
    """Why each engine's listeners wait ('' when a worker of that engine is alive), read at most
    every ``check_interval_s`` while the engine asked about has a worker, and every
    ``MISSING_RECHECK_S`` while it has none: a worker that starts (a node's, in its first seconds)
    is seen at the next round, not seconds after it ran a listener's execution that still read
    "waiting"."""

    def __init__(self, rq: redis.Redis, problems: WorkerProblems, check_interval_s: float = CHECK_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rq = rq
        self.problems = problems
        self.check_interval_s = check_interval_s
        self._clock = clock
        self._reasons: dict[str, str] = {}
        self._read_at: float | None = None

    def waiting_for(self, engine: str) -> str:
        """Why a listener of ``engine`` waits, or ''. When rq's Redis or the store cannot
        be read, the last answer stands (the supervision round reports the error)."""
        now = self._clock()
        interval = self.check_interval_s
        if self._reasons.get(engine):
            interval = min(interval, MISSING_RECHECK_S)
        if self._read_at is None or now - self._read_at >= interval:
            self._read_at = now
            try:
                self._reasons = {"fork": self._fork(), "spark": self._spark()}
            except (redis.RedisError, AtomqError) as exc:
                log.warning("cannot tell whether execution workers are alive: %s", exc)
        return self._reasons.get(engine, "")

    def _fork(self) -> str:
        if live_fork_workers(self.rq):
            return ""
        failed = [p for p in self.problems.fresh("fork") if p.state == "failed"]
        return f"no execution worker is running: {failed[0].message}" if failed else FORK_MISSING

    def _spark(self) -> str:
        if live_spark_workers(self.rq):
            return ""
        problems = self.problems.fresh("spark")
        if not problems:
            return SPARK_MISSING
        newest = problems[0]
        if newest.state == "starting":
            return f"{SPARK_STARTING}: {newest.message}"
        return f"no Spark worker is running: {newest.message}"
