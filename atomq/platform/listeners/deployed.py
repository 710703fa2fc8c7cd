"""Listeners: what a tenant deployed on a queue, and the state every node agrees on.

A listener names a queue (or a subscriber of a publish/subscribe queue) and
a registered process. Its state lives in Redis (see ``keys.ListenerKeys``),
so it survives restarts and every node sees the same: running, paused,
error, or waiting (no worker of its engine is alive: the supervisor says so,
see ``atomq.workers.liveness``), its counts, and the executions it waits for,
each holding a slot until it finishes or its deadline passes. Which process names exist is not
known here: the caller checks them (``atomq.workers.processes``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from atomq import defaults
from atomq.errors import AtomqError, Conflict, InvalidInput, NotFound
from atomq.integer_range import check_integer_range
from atomq.platform.queues.names import (
    check_queue_name,
    check_subscriber_name,
    check_tenant_id,
)
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys
from atomq.platform.store.lease import holder as lease_holder
from atomq.platform.store.storage import Storage, translate
from atomq.platform.watch.counters import read_ring

log = logging.getLogger("atomq.listeners")

ENGINES = ("fork", "spark")
STATES = ("running", "paused", "error", "waiting")
WAKE_TTL_MS = 10_000
"""How long a wake-up waits for a supervisor to take it."""


def max_batch_size(engine: str) -> int:
    """The largest batch an engine's execution takes: a fork execution's is one get, a Spark
    execution's may be several (see ``defaults.MAX_SPARK_LISTENER_BATCH_SIZE``)."""
    return defaults.MAX_SPARK_LISTENER_BATCH_SIZE if engine == "spark" else defaults.MAX_LISTENER_BATCH_SIZE


def check_listener_name(name: str) -> str:
    """Listener names follow the queue name rule."""
    return check_queue_name(name, field="name")


@dataclass(frozen=True)
class ListenerSpec:
    """A listener's definition, as deployed."""

    queue: str
    process: str
    subscriber: str | None = None
    batch_size: int = defaults.LISTENER_BATCH_SIZE
    max_concurrent_executions: int = 0
    engine: str = "fork"
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_queue_name(self.queue, field="queue")
        if self.subscriber is not None:
            check_subscriber_name(self.subscriber)
        check_integer_range(self.batch_size, "batch_size", 1, max_batch_size(self.engine))
        check_integer_range(self.max_concurrent_executions, "max_concurrent_executions", 0,
                            defaults.MAX_CONCURRENT_EXECUTIONS)
        if self.engine not in ENGINES:
            raise InvalidInput(f"engine must be one of {', '.join(ENGINES)}", field="engine")
        if not isinstance(self.process, str) or not self.process:
            raise InvalidInput("process must name a registered process", field="process")
        if not isinstance(self.settings, dict):
            raise InvalidInput("settings must be an object", field="settings")
        if len(json.dumps(self.settings)) > defaults.MAX_LISTENER_SETTINGS_BYTES:
            raise InvalidInput(f"settings must be at most {defaults.MAX_LISTENER_SETTINGS_BYTES} bytes of JSON",
                               field="settings")

    def to_json(self) -> str:
        return json.dumps({"queue": self.queue, "subscriber": self.subscriber, "process": self.process,
                           "batch_size": self.batch_size,
                           "max_concurrent_executions": self.max_concurrent_executions,
                           "engine": self.engine, "settings": self.settings}, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> ListenerSpec:
        return cls(**json.loads(raw))

    @property
    def outstanding_cap(self) -> int:
        """Most executions scheduled at once."""
        return self.max_concurrent_executions or defaults.UNLIMITED_OUTSTANDING


@dataclass(frozen=True)
class ScheduleCall:
    """One listener's supervision round (:meth:`ListenerStore.schedule_all`), with what it is given."""

    tenant: str
    name: str
    spec: ListenerSpec
    destination: k.DestinationKeys
    id_prefix: str
    waiting_for: str = ""


@dataclass(frozen=True)
class Listener:
    """A listener with its state."""

    name: str
    spec: ListenerSpec
    state: str
    executions: int
    failures: int
    last_error: str
    outstanding: int
    recent_failures: tuple[tuple[float, str], ...] = ()
    """The last ``RECENT_FAILURES`` failed executions, newest first: (epoch seconds, error)."""


@dataclass(frozen=True)
class ExecutionBucket:
    """A listener's executions, and failed ones, in the 10 seconds from ``start`` (epoch seconds)."""

    start: int
    executions: int
    failures: int


RECENT_FAILURES = 10
"""Failed executions a listener keeps with their errors (as RECENT_FAILURES in listener_finish.lua)."""


def listener_not_found(name: str) -> NotFound:
    return NotFound(f"listener {name!r} does not exist", listener=name)


class ListenerStore:
    """The listeners of every tenant, in Redis."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @staticmethod
    def _keys(tenant: str, name: str) -> listener_keys.ListenerKeys:
        return listener_keys.ListenerKeys(check_tenant_id(tenant), check_listener_name(name))

    def put(self, tenant: str, name: str, spec: ListenerSpec) -> bool:
        """Deploys (or redeploys) a listener; True when it is new. Its state and counts survive a redeploy."""
        lk = self._keys(tenant, name)
        self.storage.call(self.storage.client.sadd, listener_keys.LISTENER_TENANTS_KEY, tenant)
        if spec.engine == "spark":
            self.storage.call(self.storage.client.sadd, listener_keys.SPARK_LISTENER_TENANTS_KEY, tenant)
        created = bool(self.storage.run(
            "listener_put", [*lk.as_list(), lk.spark_count],
            [name, spec.to_json(), defaults.MAX_LISTENERS_PER_TENANT, spec.engine],
            errors={"TOOMANY": lambda _: Conflict(
                f"a tenant has at most {defaults.MAX_LISTENERS_PER_TENANT} listeners",
                limit=defaults.MAX_LISTENERS_PER_TENANT)}))
        self._changed()
        return created

    def get(self, tenant: str, name: str) -> Listener:
        lk = self._keys(tenant, name)
        client = self.storage.client
        pipe = client.pipeline(transaction=False)
        pipe.hget(lk.definitions, name)
        pipe.hgetall(lk.stat)
        pipe.zcard(lk.executions)
        raw, stat, outstanding = self.storage.call(pipe.execute)
        if raw is None:
            raise listener_not_found(name)
        return _listener(name, ListenerSpec.from_json(raw), stat, outstanding)

    def execution_rates(self, tenant: str, name: str, buckets: int = 30) -> list[ExecutionBucket]:
        """Executions and failed ones in each of the last ``buckets`` 10-second buckets, oldest first."""
        lk = self._keys(tenant, name)
        return [ExecutionBucket(start=start, executions=n["e"], failures=n["f"])
                for start, n in read_ring(self.storage, lk.stat, "ef", buckets)]

    def of_tenant(self, tenant: str, limit: int | None = None, after: str | None = None) -> list[Listener]:
        """The listeners of a tenant by name: those after ``after``, at most ``limit`` (all without)."""
        check_tenant_id(tenant)
        definitions = self.storage.call(self.storage.client.hgetall, listener_keys.tenant_listeners(tenant))
        names = sorted(n for n in (d.decode() for d in definitions) if after is None or n > after)[:limit]
        pipe = self.storage.client.pipeline(transaction=False)
        for name in names:
            lk = listener_keys.ListenerKeys(tenant, name)
            pipe.hgetall(lk.stat)
            pipe.zcard(lk.executions)
        replies = self.storage.call(pipe.execute) if names else []
        return [_listener(name, ListenerSpec.from_json(definitions[name.encode()]), replies[2 * i], replies[2 * i + 1])
                for i, name in enumerate(names)]

    def specs(self, tenants: Sequence[str]) -> dict[str, dict[str, ListenerSpec]]:
        """The listener definitions of each of ``tenants``, by name, in one round trip: what a
        supervisor needs each round."""
        if not tenants:
            return {}
        pipe = self.storage.client.pipeline(transaction=False)
        for tenant in tenants:
            pipe.hgetall(listener_keys.tenant_listeners(tenant))
        replies = self.storage.call(pipe.execute)
        return {tenant: {n.decode(): ListenerSpec.from_json(raw) for n, raw in definitions.items()}
                for tenant, definitions in zip(tenants, replies)}

    def tenants(self) -> list[str]:
        """Tenants that have (or had) listeners."""
        return self.index()[0]

    def spark_listener_count(self) -> int:
        """How many Spark listeners exist, over every tenant: a node starts its Spark
        worker for the first. It reads one counter per tenant that ever deployed one,
        not the listeners; a deleted tenant leaves that set here."""
        client = self.storage.client
        tenants = sorted(t.decode() for t in self.storage.call(client.smembers, listener_keys.SPARK_LISTENER_TENANTS_KEY))
        if not tenants:
            return 0
        pipe = client.pipeline(transaction=False)
        for tenant in tenants:
            pipe.get(listener_keys.tenant_spark_listeners(tenant))
            pipe.exists(k.tenant_record(tenant))
        replies = self.storage.call(pipe.execute)
        total, gone = 0, []
        for i, tenant in enumerate(tenants):
            count, exists = replies[2 * i], replies[2 * i + 1]
            total += int(count or 0)
            # Tenant ids are never reused: one without a record never deploys again.
            if count is None and not exists:
                gone.append(tenant)
        if gone:
            self.storage.call(client.srem, listener_keys.SPARK_LISTENER_TENANTS_KEY, *gone)
        return total

    def control(self, tenant: str, name: str, action: str) -> None:
        """pause, resume, restart or delete (see ``listener_control.lua``)."""
        lk = self._keys(tenant, name)
        self.storage.run("listener_control", [*lk.as_list(), lk.spark_count], [name, action],
                         errors={"NOLISTENER": lambda _: listener_not_found(name)})
        if action == "delete":
            self._changed()

    def _changed(self) -> None:
        """Moves the definitions' version, after the change, so that a supervisor that read the
        version before it reads the definitions again. The change is made: when the version
        cannot move (the store at its maxmemory refuses the INCR that a delete, which frees
        memory, needs; or this process dies first) the supervisors' periodic reading finds it."""
        try:
            self.storage.call(self.storage.client.incr, listener_keys.LISTENERS_VERSION_KEY)
        except AtomqError as exc:
            log.info("the listeners' version did not move (%s): supervisors see the change at their next "
                     "periodic reading", exc.message)

    def index(self) -> tuple[list[str], bytes | None]:
        """The tenants that have (or had) listeners, and the version of the definitions
        (``keys.LISTENERS_VERSION_KEY``), in one round trip."""
        pipe = self.storage.client.pipeline(transaction=False)
        pipe.smembers(listener_keys.LISTENER_TENANTS_KEY)
        pipe.get(listener_keys.LISTENERS_VERSION_KEY)
        tenants, version = self.storage.call(pipe.execute)
        return sorted(t.decode() for t in tenants), version

    def schedule_all(self, calls: Sequence[ScheduleCall],
                     start_within_ms: int) -> list[tuple[list[str], int] | AtomqError]:
        """One supervision round of each listener of ``calls``, all in one round trip (one a node
        on a cluster): the ids of the executions it scheduled (the call's ``id_prefix`` and a
        4-digit number) and how many executions it found lost, or where it failed its error.
        A call's ``waiting_for`` says why no worker of the listener's engine is alive ('' when
        one is): the listener's state becomes ``waiting`` with that as its last error, or goes
        back to ``running`` once it is ''."""
        replies = self.storage.run_many("listener_schedule", [
            ([*self._keys(c.tenant, c.name).as_list(), c.destination.ready, c.destination.sched,
              c.destination.ordered],
             [c.name, c.spec.batch_size, c.spec.outstanding_cap, start_within_ms, c.id_prefix, c.waiting_for])
            for c in calls])
        return [translate(reply) if isinstance(reply, Exception)
                else ([f"{c.id_prefix}{i:04d}" for i in range(int(reply[0]))], int(reply[1]))
                for c, reply in zip(calls, replies)]

    def start(self, tenant: str, name: str, execution: str, run_within_ms: int) -> bool:
        """Whether a scheduled execution may run now: the listener waits for it, it has
        not started before, and the listener is not paused."""
        lk = self._keys(tenant, name)
        return bool(self.storage.run("listener_start", lk.as_list(), [name, execution, run_within_ms]))

    def processed(self, tenant: str, name: str, message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` the listener has processed (within its window)."""
        if not message_ids:
            return set()
        lk = self._keys(tenant, name)
        scores = self.storage.call(self.storage.client.zmscore, lk.done, list(message_ids))
        return {m for m, score in zip(message_ids, scores) if score is not None}

    def finish(self, tenant: str, name: str, execution: str, outcome: str, error: str = "",
               processed: Sequence[str] = (), retry_after_ms: int = 0) -> bool:
        """Records an execution's end (``ok``; ``failed``; ``deferred``, when the node
        refused its sends for a while and the listener backs off ``retry_after_ms``;
        or ``empty`` when it found nothing to do); False when the listener no longer
        waited for it."""
        lk = self._keys(tenant, name)
        return bool(self.storage.run(
            "listener_finish", lk.as_list(),
            [name, execution, outcome, error[:defaults.MAX_LISTENER_ERROR_CHARS], retry_after_ms,
             defaults.PROCESSED_WINDOW_MS, defaults.PROCESSED_WINDOW_MAX,
             *processed]))

    def wake_supervisor(self, tenant: str, name: str) -> None:
        """Tells the supervisor of listener ``name`` (the holder of its lease) that one of its
        executions ended, so its next round runs now rather than at its next tick.

        Every HTTP worker of every node runs a supervisor. On one list they all waited on, a
        wake-up reached the listener's own once in as many wake-ups as there are supervisors (the
        others' rounds skip the listener); each now waits on a list of its own. A supervisor of an
        older atomq, during a rolling upgrade, still waits on the shared list and runs at its tick
        until it is upgraded. The list holds one entry at most and goes when its supervisor does
        not take it (it stopped, or ``--workers 0``); nobody is woken while nobody holds the lease."""
        holder = lease_holder(self.storage, listener_keys.listener_lease_name(tenant, name))
        if holder is None:
            return
        key = listener_keys.listener_wake_key(holder)

        def push() -> None:
            with self.storage.client.pipeline(transaction=False) as pipe:
                pipe.lpush(key, 1)
                pipe.ltrim(key, 0, 0)
                pipe.pexpire(key, WAKE_TTL_MS)
                pipe.execute()
        self.storage.call(push)

    def wait_for_wake(self, holder: str, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` (above 0: BLPOP's 0 is for ever) for :meth:`wake_supervisor`
        of a listener ``holder`` supervises; whether it came."""
        if timeout_s <= 0:
            return False
        return self.storage.call(self.storage.client.blpop, [listener_keys.listener_wake_key(holder)], timeout_s) is not None

    def execution_alive(self, tenant: str, name: str, execution: str) -> bool:
        """Whether an execution is scheduled, running or has a batch to settle (its token works only then)."""
        lk = self._keys(tenant, name)
        pipe = self.storage.client.pipeline(transaction=False)
        pipe.exists(listener_keys.execution_record(tenant, execution))
        pipe.zscore(lk.executions, execution)
        has_batch, score = self.storage.call(pipe.execute)
        return bool(has_batch) or score is not None

    def waiting_executions(self, listeners: Sequence[tuple[str, str]]) -> list[list[str]]:
        """The executions each of ``listeners`` (tenant, name) waits for (scheduled or running),
        in one round trip."""
        if not listeners:
            return []
        pipe = self.storage.client.pipeline(transaction=False)
        for tenant, name in listeners:
            pipe.zrange(self._keys(tenant, name).executions, 0, -1)
        return [[e.decode() for e in ids] for ids in self.storage.call(pipe.execute)]

    def expire_execution(self, tenant: str, name: str, execution: str) -> None:
        """Brings an execution's deadline to now: its work horse is known to be dead (or its
        job never started), so the next round counts it lost (or just frees its slot)."""
        lk = self._keys(tenant, name)
        self.storage.call(self.storage.client.zadd, lk.executions, {execution: 0}, xx=True)


def _listener(name: str, spec: ListenerSpec, stat: dict[bytes, bytes], outstanding: int) -> Listener:
    def num(field_name: bytes) -> int:
        return int(stat.get(field_name, b"0"))

    recent = []
    for field_name, value in stat.items():
        if field_name.startswith(b"x:"):
            number, at, error = value.split(b"|", 2)
            recent.append((int(number), int(at) / 1000, error.decode(errors="replace")))
    return Listener(name=name, spec=spec, state=stat.get(b"state", b"running").decode(),
                    executions=num(b"executions"), failures=num(b"failures"),
                    last_error=stat.get(b"last_error", b"").decode(), outstanding=int(outstanding),
                    recent_failures=tuple((at, error) for _, at, error in sorted(recent, reverse=True)))

