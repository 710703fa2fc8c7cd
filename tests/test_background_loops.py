"""The node's background loops (maintenance, listener supervision), tried as they fail in the field.

They used to die for good of any error that was not atomq's or redis-py's
``RedisError`` while ``/v1/ready`` kept saying ready; now each runs under
``run_loop``, backs off, is named in ``/v1/ready`` by every HTTP worker while
it fails and comes back by itself.

Everything runs on real Valkey servers and real ``atomq serve`` processes;
the one injected fault is redis-py's cluster exception, which only a Redis
Cluster raises on its own.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from redis.exceptions import RedisClusterException
from rq import Queue

from atomq.api import create_app
from atomq.api.services import LongPollLimiter, Services
from atomq.platform import QueueServer, QueueSettings
from atomq.platform.background import HEALTH_EXTENSION, HealthBoard, run_loop
from atomq.platform.listeners.deployed import ListenerSpec
from atomq.platform.maintenance import MAINTENANCE_PART, run_maintenance
from atomq.platform.store import keys as k
from atomq.platform.store import lease as leases
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.connection import open_redis
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.lease import Lease
from atomq.tenants import TenantStore
from atomq.workers import supervisor as supervision
from atomq.workers.supervisor import SUPERVISION_PART, WAKE_SPACING_S, Supervisor, SupervisorConfig
from support.ports import free_port
from support.queues import msg
from support.served_node import ServeFactory, tenant_with_messages
from support.valkey_cluster import ValkeyCluster
from support.waiting import wait_until

# -- one loop under run_loop ----------------------------------------------------------------


class WaitsRecorded(threading.Event):
    """A stop event whose waits return at once and are recorded: the loop's timing is read from what it
    asked for, not from a clock that a loaded machine stretches."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout if timeout is not None else math.inf)
        return self.is_set()


def test_a_loop_outlives_any_exception_backs_off_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    overflow = OverflowError("too big")
    # What each call of the step does: raise, or succeed (None); past the list it succeeds.
    script: list[BaseException | None] = [RedisClusterException("Cluster is down"), overflow, overflow, overflow,
                                          None, overflow]
    calls = 0
    health = HealthBoard()
    seen: list[list[str]] = []
    stop = WaitsRecorded()

    def step() -> None:
        nonlocal calls
        calls += 1
        seen.append(health.problems())
        if calls >= 9:
            stop.set()
        outcome = script[calls - 1] if calls <= len(script) else None
        if outcome is not None:
            raise outcome

    caplog.set_level(logging.INFO, logger="atomq.background")
    run_loop("sweeping", step, stop, 0.01, health, 0.05, 0.2)
    assert seen[1] == ["sweeping: RedisClusterException: Cluster is down"]
    assert seen[2] == seen[3] == seen[4] == ["sweeping: OverflowError: too big"]
    assert seen[5] == [], "a success clears the part"
    assert seen[6] == ["sweeping: OverflowError: too big"] and seen[7] == []
    assert stop.waits[:4] == [0.05, 0.1, 0.2, 0.2], "the back-off doubles up to its cap of 0.2 s"
    assert stop.waits[4:7] == [0.01, 0.05, 0.01], "a success brings back the interval, and the back-off starts again"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage().split(";")[0] for r in errors] == [
        "sweeping failed: RedisClusterException: Cluster is down", "sweeping failed: OverflowError: too big",
        "sweeping failed: OverflowError: too big"], "a failure is logged once for as long as it repeats"
    assert all(r.exc_info is not None for r in errors), "with its traceback"
    assert sum("sweeping works again" in r.getMessage() for r in caplog.records) == 2


def test_a_base_exception_still_ends_the_loop() -> None:
    def step() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit):
        run_loop("exiting", step, threading.Event(), 0.01, HealthBoard(), 0.01, 0.01)


def _report_then_wait(directory: Path, part: str, problem: str | None, go_on: Any, reported: Any) -> None:
    board = HealthBoard(directory)
    board.report(part, "first failure")
    board.report(part, problem)
    reported.set()
    go_on.wait(30)
    board.close()


def test_every_process_of_a_node_sees_the_failing_parts_of_the_others(tmp_path: Path) -> None:
    """gunicorn answers /v1/ready from any worker: a part failing in one worker shows in all."""
    ctx = multiprocessing.get_context("fork")
    here = HealthBoard(tmp_path)
    go_on, reported = ctx.Event(), ctx.Event()
    failing = ctx.Process(target=_report_then_wait, args=(tmp_path, "maintenance", "StorageError: gone",
                                                          go_on, reported))
    failing.start()
    try:
        assert reported.wait(30)
        assert here.problems() == ["maintenance: StorageError: gone"]
        go_on.set()
        failing.join(30)
        assert failing.exitcode == 0
        assert here.problems() == [], "a process that stops cleanly takes its record with it"
    finally:
        go_on.set()
        failing.join(30)

    go_on, reported = ctx.Event(), ctx.Event()
    killed = ctx.Process(target=_report_then_wait, args=(tmp_path, "listener supervision", "boom", go_on, reported))
    killed.start()
    assert reported.wait(30)
    assert here.problems() == ["listener supervision: boom"]
    assert killed.pid is not None
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(30)
    assert here.problems() == [], "a dead process's record counts for nothing"
    assert [p.name for p in tmp_path.glob("*.json")] == [f"{os.getpid()}.json"], "and is removed"
    here.close()


# -- a store outage under the loops of a node in this process -------------------------------


@pytest.fixture
def private_valkey(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """A Valkey of this test alone, on a fixed TCP port, so that it can stop and start again."""
    server = EmbeddedValkey(tmp_path / "valkey", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_store_outage_is_a_failing_part_and_the_loops_come_back_by_themselves(
        private_valkey: EmbeddedValkey) -> None:
    url = private_valkey.tcp_url
    assert url is not None
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    rq = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    queues = QueueServer(client, QueueSettings(redelivery_delays_s=(1.0,)))
    services = Services(queues=queues, tenants=TenantStore(client, f"aq_owner_{secrets.token_urlsafe(24)}"),
                        longpolls=LongPollLimiter(1))
    app = create_app(services)
    health = HealthBoard()
    app.extensions[HEALTH_EXTENSION] = health
    http = app.test_client()
    supervisor = Supervisor(queues, services.tenants.execution_tokens, rq, SupervisorConfig(api_url="http://unused"),
                            "this-node", services.tenants.exists)
    tenant = "t_resilience01"
    queues.put_queue(tenant, "orders", "point_to_point")
    queues.send(tenant, "orders", [msg("a")])
    stop = threading.Event()
    loops = [threading.Thread(target=run_maintenance, args=(queues, stop, 0.05), kwargs={
                 "health": health, "max_backoff_s": 0.5}),
             threading.Thread(target=supervisor.run, kwargs={"stop": stop, "interval_s": 0.05, "health": health,
                                                             "max_backoff_s": 0.5})]
    for loop in loops:
        loop.start()
    try:
        assert http.get("/v1/ready").status_code == 200
        (delivery,) = queues.get(tenant, "orders")
        queues.nack(tenant, "orders", receipts=[delivery.receipt], reason="try again in a second")
        assert queues.get_queue(tenant, "orders").scheduled == 1

        private_valkey.stop()

        def failing_parts() -> set[str]:
            answer = http.get("/v1/ready")
            assert answer.status_code == 503, answer.json
            return {problem.split(":")[0] for problem in answer.json["problems"]}

        wait_until(lambda: {MAINTENANCE_PART, SUPERVISION_PART} <= failing_parts(), 10,
                   "/v1/ready to name both loops")
        assert all(loop.is_alive() for loop in loops)

        private_valkey.start()
        wait_until(lambda: http.get("/v1/ready").status_code == 200, 10, "/v1/ready to recover")
        assert health.problems() == []
        wait_until(lambda: queues.get_queue(tenant, "orders").scheduled == 0, 10,
                   "maintenance to move the due redelivery after the outage")
        info = queues.get_queue(tenant, "orders")
        assert (info.depth, info.in_flight) == (1, 0)
        (again,) = queues.get(tenant, "orders")
        assert again.delivery_count == 2
        queues.ack(tenant, "orders", receipts=[again.receipt])
    finally:
        stop.set()
        for loop in loops:
            loop.join(timeout=10)
        client.close()
        rq.close()
    assert not any(loop.is_alive() for loop in loops), "the loops end when told to"


def supervisor_on(client: redis.Redis, holder: str = "this-node") -> Supervisor:
    """A listener supervisor on ``client`` (its store and its rq Redis), as ``holder``."""
    queues = QueueServer(client)
    tenants = TenantStore(client, f"aq_owner_{secrets.token_urlsafe(24)}")
    return Supervisor(queues, tenants.execution_tokens, client, SupervisorConfig(api_url="http://unused"),
                      holder, tenants.exists)


def test_a_wake_up_after_a_quiet_while_gets_its_round_at_once_and_close_ones_are_spaced(
        valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """An exclusive queue's one execution ends every few hundred ms: its wake-up is not held back.
    A wake-up that comes within WAKE_SPACING_S of the end of the last round waits out the rest of it."""
    client = valkey.client()
    supervisor = supervisor_on(client, "node-c:3")
    readings: list[float] = []
    monkeypatch.setattr(supervision, "time", SimpleNamespace(monotonic=lambda: readings.pop(0)))
    assert Lease(supervisor.queues.storage, lk.listener_lease_name("t_0123456789ab", "one"), supervisor.holder,
                 ttl_s=60).acquire()
    waits: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return False

    readings[:] = [1000.0, 1000.005]  # the round ended; the wake-up came 5 ms later
    supervisor.listeners.wake_supervisor("t_0123456789ab", "one")
    supervisor._pause(Stop(), 5)
    assert waits == [pytest.approx(WAKE_SPACING_S - 0.005)], "5 ms after a round, a wake-up waits out the spacing"
    readings[:] = [2000.0, 2000.3]  # the wake-up came 300 ms after the round ended
    supervisor.listeners.wake_supervisor("t_0123456789ab", "one")
    supervisor._pause(Stop(), 5)
    assert len(waits) == 1, "300 ms after the last round, a wake-up runs its round at once"
    assert readings == []
    client.close()


def test_the_supervisor_outlives_a_cluster_exception(valkey: EmbeddedValkey) -> None:
    """redis-py's cluster client raises RedisClusterException, which is not a RedisError."""
    client = valkey.client()
    supervisor = supervisor_on(client)
    real_index = supervisor.listeners.index
    outage = threading.Event()
    outage.set()
    rounds: list[float] = []

    def index() -> tuple[list[str], bytes | None]:
        rounds.append(time.monotonic())
        if outage.is_set():
            raise RedisClusterException("ClusterDownError: The cluster is down")
        return real_index()

    supervisor.listeners.index = index  # type: ignore[method-assign]
    health = HealthBoard()
    stop = threading.Event()
    loop = threading.Thread(target=supervisor.run, kwargs={"stop": stop, "interval_s": 0.01, "health": health,
                                                           "max_backoff_s": 0.2})
    loop.start()
    try:
        wait_until(lambda: len(rounds) >= 3, 10, "three failed rounds")
        assert health.problems() == [
            "listener supervision: RedisClusterException: ClusterDownError: The cluster is down"]
        outage.clear()
        wait_until(lambda: not health.problems(), 10, "the supervisor to work again")
        count = len(rounds)
        wait_until(lambda: len(rounds) >= count + 10, 10, "rounds at the normal interval")
    finally:
        stop.set()
        loop.join(timeout=10)
        client.close()
    assert not loop.is_alive()


# -- a served node: every HTTP worker's /v1/ready -------------------------------------------


def test_ready_names_a_failing_loop_from_every_worker_and_recovers(serve: ServeFactory) -> None:
    """A round that fails (here the set of tenants it reads has the wrong type: a store answer
    no code path expects) used to kill the maintenance thread for good; only the lease holder's
    round fails, and every HTTP worker's /v1/ready says so."""
    node = serve()
    tenant_with_messages(node, "x")
    store = node.redis()
    aside = f"{k.TENANTS_KEY}:aside"
    try:
        store.rename(k.TENANTS_KEY, aside)
        store.set(k.TENANTS_KEY, "not a set")
        wait_until(lambda: node.ready().status_code == 503, 20, "/v1/ready to see the failing maintenance")
        answers = [node.ready() for _ in range(20)]
        assert all(a.status_code == 503 for a in answers), [a.text for a in answers]
        for answer in answers:
            body = answer.json()
            assert body["status"] == "unavailable"
            assert any(p.startswith(f"{MAINTENANCE_PART}: ") for p in body["problems"]), body
        assert "maintenance failed" in node.log_path.read_text()
    finally:
        store.delete(k.TENANTS_KEY)
        store.rename(aside, k.TENANTS_KEY)
        store.close()
    wait_until(lambda: node.ready().status_code == 200, 40, "/v1/ready to recover")
    assert "maintenance works again" in node.log_path.read_text()


def counting_rounds(supervisor: Supervisor) -> threading.Semaphore:
    """A semaphore released at the start of each of ``supervisor``'s rounds."""
    rounds = threading.Semaphore(0)
    real_round = supervisor.round

    def counted_round() -> int:
        rounds.release()
        return real_round()

    supervisor.round = counted_round  # type: ignore[method-assign]
    return rounds


def test_a_finished_execution_wakes_its_listeners_supervisor_before_its_next_tick(valkey: EmbeddedValkey) -> None:
    """On an exclusive queue the next execution waits for the last one's slot: the supervisor that
    holds the listener, between rounds, waits on the store for one of its executions to end, not only
    for its interval. Every HTTP worker of every node runs a supervisor: the wake-up reaches the one
    holding the listener's lease, never another (whose round would skip the listener)."""
    client = valkey.client()
    holding, other = supervisor_on(client, "node-a:1"), supervisor_on(client, "node-b:2")
    assert Lease(holding.queues.storage, lk.listener_lease_name("t_0123456789ab", "echo"), holding.holder,
                 ttl_s=60).acquire()
    rounds = {s.holder: counting_rounds(s) for s in (holding, other)}
    for s in (holding, other):
        client.delete(lk.listener_wake_key(s.holder))
    stop = threading.Event()
    loops = [threading.Thread(target=s.run, kwargs={"stop": stop, "interval_s": 600}) for s in (holding, other)]
    for loop in loops:
        loop.start()
    try:
        for s in (holding, other):
            assert rounds[s.holder].acquire(timeout=10), "the first round"
        for _ in range(3):
            other.listeners.wake_supervisor("t_0123456789ab", "echo")  # from any process of any node
            assert rounds[holding.holder].acquire(timeout=10), "a round at the wake-up, 600 s before the next tick"
        assert not rounds[holding.holder].acquire(timeout=0.3), "no round without one"
        assert not rounds[other.holder].acquire(timeout=0), "the supervisor that does not hold the listener sleeps on"
        other.listeners.wake_supervisor("t_0123456789ab", "nobody-holds-it")
        assert not client.exists(*(lk.listener_wake_key(s.holder) for s in (holding, other))), \
            "nobody holds that listener: nobody is woken"
    finally:
        stop.set()
        for s in (holding, other):
            client.lpush(lk.listener_wake_key(s.holder), 1)  # each loop sees stop at its wake-up
        for loop in loops:
            loop.join(timeout=10)
    assert not any(loop.is_alive() for loop in loops)
    client.delete(lk.listener_wake_key(holding.holder))
    holding.listeners.wake_supervisor("t_0123456789ab", "echo")
    holding.listeners.wake_supervisor("t_0123456789ab", "echo")
    assert client.llen(lk.listener_wake_key(holding.holder)) == 1, "wake-ups that wait for one round are one"
    assert 0 < client.pttl(lk.listener_wake_key(holding.holder)) <= 10_000, "and go when no supervisor takes them"
    client.close()


# -- a supervision round over many listeners ------------------------------------------------


def deploy(supervisor: Supervisor, tenant: str, messages: int = 0, **spec: Any) -> None:
    """A queue ``in`` of ``tenant`` holding ``messages``, and a listener ``l`` on it forwarding to ``out``."""
    supervisor.queues.put_queue(tenant, "in", "point_to_point")
    if messages:
        supervisor.queues.send(tenant, "in", [msg(f"m{i}") for i in range(messages)])
    supervisor.listeners.put(tenant, "l", ListenerSpec(queue="in", process="forward", settings={"to": "out"}, **spec))


def test_a_supervision_round_takes_a_few_round_trips_however_many_listeners(
        private_valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step of a round reads or runs what it needs for every listener at once: a call a
    listener each made a round of 1,000 idle listeners take 0.4 s, on every HTTP worker of every
    node, five times a second."""
    client = private_valkey.client()
    send = redis.connection.AbstractConnection.send_packed_command

    def round_trips(supervisor: Supervisor) -> int:
        """The round trips of one round of ``supervisor`` over idle listeners (it schedules nothing)."""
        trips: list[bytes] = []

        def counted(connection: Any, command: Any, check_health: bool = True) -> None:
            trips.append(command)
            send(connection, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
        try:
            assert supervisor.round() == 0, "idle listeners: nothing to schedule"
        finally:
            monkeypatch.undo()
        return len(trips)

    def first_round(listeners: int) -> int:
        """The round trips of a new supervisor's first round (every lease to take) over ``listeners``."""
        for i in range(len(supervisor_on(client).listeners.tenants()), listeners):
            deploy(supervisor_on(client), f"t_many{i:08d}")
        supervisor = supervisor_on(client, f"node-{listeners}:1")
        trips = round_trips(supervisor)
        taken = [leases.holder(supervisor.queues.storage, lk.listener_lease_name(t, "l"))
                 for t in supervisor.listeners.tenants()]
        assert taken == [supervisor.holder] * listeners, "the round took every listener's lease"
        supervisor.release_all()
        return trips

    assert first_round(2) == first_round(40) == 5, \
        "the listener index, their definitions, their leases, their executions, their rounds"
    supervisor = supervisor_on(client, "node-later:1")
    supervisor.round()
    assert round_trips(supervisor) == 3, \
        "no definition changed and no lease is due: the index, the executions, the rounds"
    client.close()


def test_a_supervisor_reads_the_definitions_again_when_a_listener_is_deployed_or_deleted(
        private_valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between changes it goes on with what it read; a change whose version did not move (its
    writer died in between, or runs an older atomq) is seen within DEFINITIONS_REFRESH_S."""
    client = private_valkey.client()
    supervisor, other = supervisor_on(client), supervisor_on(client, "another-node:1")
    deploy(supervisor, "t_first000001", batch_size=1)
    assert supervisor.round() == 0
    deploy(other, "t_second00001", messages=2, batch_size=1)
    assert supervisor.round() == 2, "deployed from another node: scheduled at the next round"
    assert leases.holder(supervisor.queues.storage, lk.listener_lease_name("t_second00001", "l")) == supervisor.holder
    other.listeners.control("t_second00001", "l", "delete")
    supervisor.round()
    assert leases.holder(supervisor.queues.storage, lk.listener_lease_name("t_second00001", "l")) is None, \
        "deleted: its lease is given up at the next round"

    supervisor.queues.send("t_first000001", "in", [msg(f"m{i}") for i in range(4)])
    quietly = ListenerSpec(queue="in", process="forward", settings={"to": "out"}, batch_size=4)
    client.hset(lk.tenant_listeners("t_first000001"), "l", quietly.to_json())  # as an atomq without the version
    clock = [time.monotonic()]
    monkeypatch.setattr(supervision, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    assert supervisor.round() == 4, "the definition it read: batches of 1"
    supervisor.listeners.control("t_first000001", "l", "restart")  # frees the slots; not a new definition
    clock[0] += supervision.DEFINITIONS_REFRESH_S
    assert supervisor.round() == 1, "read again after DEFINITIONS_REFRESH_S: one batch of 4"

    client.config_set("maxmemory", 1)  # the store refuses the version's INCR; a delete, which frees, still works
    try:
        other.listeners.control("t_first000001", "l", "delete")
    finally:
        client.config_set("maxmemory", 0)
    assert not client.hexists(lk.tenant_listeners("t_first000001"), "l")
    supervisor.round()
    assert leases.holder(supervisor.queues.storage, lk.listener_lease_name("t_first000001", "l")) is not None
    clock[0] += supervision.DEFINITIONS_REFRESH_S
    supervisor.round()
    assert leases.holder(supervisor.queues.storage, lk.listener_lease_name("t_first000001", "l")) is None, \
        "the delete whose version did not move is seen at the periodic reading"
    client.close()


def test_a_round_schedules_each_listener_as_its_queue_and_slots_say(private_valkey: EmbeddedValkey) -> None:
    client = private_valkey.client()
    supervisor = supervisor_on(client)
    deploy(supervisor, "t_batches0001", messages=5, batch_size=2)
    deploy(supervisor, "t_nothing0001")
    deploy(supervisor, "t_paused00001", messages=4)
    supervisor.listeners.control("t_paused00001", "l", "pause")
    deploy(supervisor, "t_oneatatime1", messages=4, batch_size=1, max_concurrent_executions=1)
    tenants = ["t_batches0001", "t_nothing0001", "t_paused00001", "t_oneatatime1"]
    assert supervisor.round() == 4
    waiting = supervisor.listeners.waiting_executions([(t, "l") for t in tenants])
    assert [len(w) for w in waiting] == [3, 0, 0, 1]
    assert [Queue(lk.rq_queue_name(t), connection=client).count for t in tenants] == [3, 0, 0, 1]
    assert supervisor.round() == 0, "every slot that is needed is taken"
    client.close()


def test_rq_failing_for_one_listener_frees_its_slots_and_the_others_are_enqueued(
        private_valkey: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executions of a round are scheduled together; when rq's Redis refuses one listener's
    jobs, the others still get theirs, the refused ones give their slots back at once (not after
    start_within_s), and the round fails as rq did (so /v1/ready names it)."""
    client = private_valkey.client()
    supervisor = supervisor_on(client)
    deploy(supervisor, "t_refused0001", messages=3, batch_size=1)
    deploy(supervisor, "t_accepted001", messages=2, batch_size=1)
    refused = lk.rq_queue_name("t_refused0001")
    enqueue = Queue.enqueue_call

    def failing(queue: Queue, *args: Any, **kwargs: Any) -> Any:
        if queue.name == refused:
            raise redis.ConnectionError("rq's Redis went away")
        return enqueue(queue, *args, **kwargs)

    monkeypatch.setattr(Queue, "enqueue_call", failing)
    with pytest.raises(redis.ConnectionError):
        supervisor.round()
    monkeypatch.undo()
    assert Queue(lk.rq_queue_name("t_accepted001"), connection=client).count == 2
    (gave_back, kept) = [client.zrange(lk.ListenerKeys(t, "l").executions, 0, -1, withscores=True)
                         for t in ("t_refused0001", "t_accepted001")]
    now_ms = time.time() * 1000
    assert len(gave_back) == 3 and all(deadline <= now_ms for _, deadline in gave_back), \
        "the refused executions are due to be dropped at the next round"
    assert len(kept) == 2 and all(deadline > now_ms + 60_000 for _, deadline in kept)
    assert supervisor.round() == 3, "the next round schedules the refused listener's executions again"
    assert Queue(refused, connection=client).count == 3
    client.close()


def test_a_round_over_listeners_on_every_master_of_a_cluster(valkey_cluster: ValkeyCluster,
                                                             valkey: EmbeddedValkey) -> None:
    """On a cluster each step of the round goes to every master at once: each listener is
    scheduled from its own tenant's slot."""
    store, rq = open_redis(valkey_cluster.url), valkey.client()
    queues, tenants = QueueServer(store), TenantStore(store, f"aq_owner_{secrets.token_urlsafe(24)}")
    supervisor = Supervisor(queues, tenants.execution_tokens, rq, SupervisorConfig(api_url="http://unused"),
                            "cluster-node:1", tenants.exists)
    ids = [valkey_cluster.tenant_on(master) for master in range(3)]
    try:
        for i, tenant in enumerate(ids):
            deploy(supervisor, tenant, messages=i + 1, batch_size=1)
        supervisor.round()  # the session's cluster may hold other tests' listeners too: each is checked alone
        assert [len(w) for w in supervisor.listeners.waiting_executions([(t, "l") for t in ids])] == [1, 2, 3]
        assert [Queue(lk.rq_queue_name(t), connection=rq).count for t in ids] == [1, 2, 3]
    finally:
        supervisor.release_all()
        for tenant in ids:
            supervisor.listeners.control(tenant, "l", "delete")
            store.srem(lk.LISTENER_TENANTS_KEY, tenant)  # the session's other supervisors never see them
            Queue(lk.rq_queue_name(tenant), connection=rq).delete(delete_jobs=True)
        store.close()
        rq.close()
