"""Failover under load: two nodes on a 6-node Valkey Cluster of their own, producers and a
consumer through both, a master killed with SIGKILL (and started again later, as a restarted
machine), then the whole process tree of the node whose worker runs a fork listener's execution.

Never a 500; the killed master's tenants send again within seconds while the others barely
notice; the listener's batch comes back and is forwarded once by the other node's worker; the
surviving node is ready and takes the maintenance and listener leases; every send answered 201
to a sync queue (min_replicas 1) is consumed; the audit is clean. What async queues lost, if
anything, is reported.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from redis.cluster import key_slot

from atomq.client import AtomqClient
from atomq.platform import QueueServer
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.connection import open_redis
from atomq.platform.store.embedded import EmbeddedValkey
from support.audit import assert_audit_clean
from support.listener_processes import served_env, stall_first_delivery
from support.ports import free_port
from support.served_node import AtomqServe, ServeFactory
from support.valkey_cluster import ValkeyCluster
from support.waiting import wait_until

pytestmark = pytest.mark.slow

STEADY_S = 4.0
"""Traffic before each kill, and after it."""
WORK_HORSE_ENV = served_env(stall=stall_first_delivery)


class Producer(threading.Thread):
    """Sends one message a request to its tenant's queue through the nodes in turn, each with a
    dedupe id; an answer other than 201 is retried, with the same dedupe id, on the next node."""

    def __init__(self, tenant: str, key: str, nodes: list[AtomqServe], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.tenant, self.nodes, self.stop = tenant, nodes, stop
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"
        self.accepted: set[str] = set()
        self.statuses: Counter[int] = Counter()
        self.refused_at: list[float] = []
        self.accepted_at: list[float] = []

    def run(self) -> None:
        seq = turn = 0
        while not self.stop.is_set():
            seq += 1
            body = {"messages": [{"documents": [{"data": f"{self.tenant} {seq}"}], "dedupe_id": f"m{seq}"}]}
            while not self.stop.is_set():
                nodes = list(self.nodes)  # the test removes a killed node meanwhile
                node = nodes[turn % len(nodes)]
                turn += 1
                try:
                    answer = self.session.post(node.url + "/v1/queues/q/messages", json=body, timeout=15)
                except requests.RequestException:
                    self.statuses[0] += 1  # a node that is gone: the next one
                    continue
                self.statuses[answer.status_code] += 1
                if answer.status_code == 201:
                    self.accepted.update(answer.json()["ids"])
                    self.accepted_at.append(time.monotonic())
                    break
                self.refused_at.append(time.monotonic())
                time.sleep(0.05)


def outage(accepted_at: list[float], since: float) -> float:
    """The longest time without an accepted send from ``since`` on (and the one before it)."""
    times = [since] + [t for t in accepted_at if t > since]
    return max(b - a for a, b in zip(times, times[1:]))


class Consumer(threading.Thread):
    """Gets (up to 100, waiting up to 200 ms), tenant after tenant, through the nodes in turn, each
    get acking the tenant's batch before. A message counts as consumed once an answer says its ack
    acked the whole batch; a batch whose ack was not answered is acked again with the next get (a
    receipt acks once), and one whose ack acked fewer (a delivery past its ack time-out) is left
    unconfirmed: the final drain gets what came back."""

    def __init__(self, keys: list[str], nodes: list[AtomqServe], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.nodes, self.stop = nodes, stop
        self.sessions = [requests.Session() for _ in keys]
        for session, key in zip(self.sessions, keys):
            session.headers["Authorization"] = f"Bearer {key}"
        self.previous: list[list[dict[str, Any]]] = [[] for _ in keys]
        self.consumed: set[str] = set()
        self.unconfirmed: set[str] = set()
        self.statuses: Counter[int] = Counter()

    def run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            nodes, t = list(self.nodes), turn % len(self.sessions)
            node = nodes[turn // len(self.sessions) % len(nodes)]  # each tenant through every node in turn
            turn += 1
            self.take(node, t)

    def take(self, node: AtomqServe, t: int, body: dict[str, Any] | None = None) -> None:
        body = body or {"max": 100, "wait_ms": 200}
        previous = self.previous[t]
        if previous:
            body["ack"] = {"receipts": [m["receipt"] for m in previous]}
        try:
            answer = self.sessions[t].post(node.url + "/v1/queues/q/get", json=body, timeout=15)
        except requests.RequestException:
            self.statuses[0] += 1
            return
        self.statuses[answer.status_code] += 1
        if answer.status_code != 200:
            return
        ids = {m["id"] for m in previous}
        (self.consumed if answer.json().get("acked") == len(previous) else self.unconfirmed).update(ids)
        self.previous[t] = answer.json()["messages"]

    def finish(self, node: AtomqServe) -> None:
        """Acks each tenant's last batch (through a get of nothing more)."""
        for t in range(len(self.sessions)):
            if self.previous[t]:
                self.take(node, t, {"max": 1, "wait_ms": 0})


def drain(node: AtomqServe, key: str) -> set[str]:
    """Every message of the tenant's queue, got and acked, until nothing waits and nothing is in
    flight (what the consumer got without its ack confirmed comes back after the ack time-out)."""
    got: set[str] = set()
    with requests.Session() as s:
        s.headers["Authorization"] = f"Bearer {key}"

        def emptied() -> bool:
            while True:
                answer = s.post(node.url + "/v1/queues/q/get", json={"max": 500}, timeout=15)
                assert answer.status_code == 200, answer.text
                if not (messages := answer.json()["messages"]):
                    break
                got.update(m["id"] for m in messages)
                acked = s.post(node.url + "/v1/queues/q/ack", json={"receipts": [m["receipt"] for m in messages]},
                               timeout=15)
                assert acked.status_code == 200, acked.text
            queue = s.get(node.url + "/v1/queues/q", timeout=15)
            assert queue.status_code == 200, queue.text
            return bool(queue.json()["depth"] == 0 and queue.json()["in_flight"] == 0)

        wait_until(emptied, 40, "the queue drained with nothing in flight")
    return got


@pytest.fixture
def stores(serve: ServeFactory, tmp_path: Path) -> Iterator[tuple[ValkeyCluster, EmbeddedValkey]]:
    """A 6-node cluster of the test's own and an rq Valkey; at teardown the test's nodes stop
    first, as they would in service, then the stores (each also when another's stop failed)."""
    cluster = ValkeyCluster(tmp_path / "cluster", ["--cluster-require-full-coverage", "no"])
    rq = EmbeddedValkey(tmp_path / "rq", port=free_port())
    with contextlib.ExitStack() as cleanup:  # last first
        cleanup.callback(cluster.stop)
        cluster.start()
        cleanup.callback(rq.stop)
        rq.start()
        cleanup.callback(lambda: [node.ensure_stopped() for node in serve.nodes])
        yield cluster, rq


def test_a_master_and_then_a_node_killed_under_load(serve: ServeFactory, stores: tuple[ValkeyCluster, EmbeddedValkey],
                                                     tmp_path: Path) -> None:
    cluster, rq = stores
    store = ("--redis-url", cluster.urls, "--rq-redis-url", str(rq.tcp_url), "--workers", "1")
    first, second = (serve(*store, "--advertise-url", f"http://127.0.0.1:{port}", port=port, env=WORK_HORSE_ENV)
                     for port in (free_port(), free_port()))
    nodes = [first, second]
    owner = first.owner()
    owner("PATCH", "/v1/server", {"min_replicas": 1, "sync_timeout_ms": 5000}, 200)
    masters = cluster.masters()

    def master_of(tenant: str) -> int:
        slot = key_slot(tenant.encode())
        return next(port for port, first_slot, last in masters if first_slot <= slot <= last)

    # The victim is the master holding the server settings, which every request reads (every few
    # seconds, in the background): the other tenants must not wait on it. Tenants (sync and async
    # queues in turn) until it holds one of each, and another master one at least.
    # --redis-url names every node, so a node process that connects while the victim is down
    # (a worker that starts again, say) finds the cluster through the others.
    settings_master = master_of(k.SERVER_SETTINGS_KEY)
    tenants: list[tuple[str, str, str]] = []
    victim_port = None
    while victim_port is None:
        assert len(tenants) < 60, "the settings' master holds no tenant of each durability"
        created = owner("POST", "/v1/tenants", {"name": f"load-{len(tenants)}"}, 201)
        durability = "sync" if len(tenants) % 2 == 0 else "async"
        with requests.Session() as s:
            s.headers["Authorization"] = f"Bearer {created['api_key']}"
            answer = s.put(first.url + "/v1/queues/q", json={"model": "point_to_point", "ack_timeout_s": 10,
                                                            "durability": durability}, timeout=15)
            assert answer.status_code == 201, answer.text
        tenants.append((created["id"], created["api_key"], durability))
        held = {(master_of(t), d) for t, _, d in tenants}
        if {(settings_master, "sync"), (settings_master, "async")} <= held and any(
                master_of(t) != settings_master and d == "async" for t, _, d in tenants):
            victim_port = settings_master
    stop = threading.Event()
    producers = [Producer(t, key, nodes, stop) for t, key, _ in tenants]
    consumer = Consumer([key for _, key, _ in tenants], nodes, stop)
    for thread in [*producers, consumer]:
        thread.start()
    time.sleep(STEADY_S)  # traffic before the kill: what the figures compare with

    killed_at = time.monotonic()
    cluster.kill(victim_port)
    wait_until(lambda: victim_port not in {port for port, _, _ in cluster.masters()}, 30,
               "a replica to take the killed master's slots")
    # Sends answered just after the kill may have been stored before it: the tenants count as
    # sending again once a send is answered after the failover.
    failed_over_at = time.monotonic()
    asynchronous = [p for (_, _, d), p in zip(tenants, producers) if d == "async"]
    wait_until(lambda: all(p.accepted_at and p.accepted_at[-1] > failed_over_at for p in asynchronous), 30,
               "every async queue's tenant sending again after the failover")
    # A tenant's outage: the longest wait between two of its accepted sends around the kill
    # (redis-py's cluster client retries while the replica takes over: sends wait, or get 503).
    recovered = {t: outage(p.accepted_at, killed_at) for (t, _, d), p in zip(tenants, producers) if d == "async"}
    victims = [t for t in recovered if master_of(t) == victim_port]
    assert victims and max(recovered[t] for t in victims) < 10, recovered
    others = [recovered[t] for t in recovered if t not in victims]
    assert others and max(others) < 2.5, f"the other masters' tenants waited: {recovered}"
    # The promoted replica has no replica of its own: a sync queue (min_replicas 1) there
    # refuses sends (503 not_durable) until the dead node comes back as its replica.
    cluster.restart(victim_port)
    restarted_at = time.monotonic()
    wait_until(lambda: all(p.accepted_at and p.accepted_at[-1] > restarted_at for p in producers), 60,
               "every tenant sending again once the dead node is back as a replica")
    time.sleep(STEADY_S)

    # A fork listener's execution in flight when the node whose worker runs it dies with its
    # whole process tree: the batch comes back and the surviving node's worker forwards it, once.
    listening = owner("POST", "/v1/tenants", {"name": "listening"}, 201)
    inputs = [f"job {i}" for i in range(5)]
    pid_file = tmp_path / "horse.pid"
    with AtomqClient(first.url, listening["api_key"]) as api:
        api.put_queue("jobs", ack_timeout_s=300)  # its batch can only come back through the worker's silence
        api.put_queue("done")
        api.request("PUT", "/v1/listeners/stall", {"queue": "jobs", "process": "stall", "batch_size": 10,
                                                   "settings": {"to": "done", "pid_file": str(pid_file)}})
        api.send_texts("jobs", inputs)
        wait_until(pid_file.exists, 30, "the work horse to start")
        horse = psutil.Process(int(pid_file.read_text()))
        for node in nodes:
            node.track_processes()
        try:
            (dying,) = [n for n in nodes if horse.ppid() in {w.pid for w in n.execution_workers}]
            survivor = first if dying is second else second
            dying.kill_everything()
        finally:
            with contextlib.suppress(psutil.NoSuchProcess):
                horse.kill()  # rq gives a work horse a session of its own: it outlives its worker's group
        nodes.remove(dying)
        with AtomqClient(survivor.url, listening["api_key"]) as surviving:
            wait_until(lambda: surviving.queue("done")["depth"] == len(inputs), 60,
                       "the batch back and forwarded by the surviving node's worker")
            wait_until(lambda: surviving.queue("jobs")["in_flight"] == 0, 30, "the execution settled")
            assert sorted(m["documents"][0]["data"] for m in surviving.browse("done")) == inputs
            listener = surviving.request("GET", "/v1/listeners/stall")
            assert (listener["executions"], listener["failures"]) == (2, 1), listener
    time.sleep(STEADY_S)
    stop.set()
    for thread in [*producers, consumer]:
        thread.join(30)
    consumer.finish(survivor)
    sends = sum((p.statuses for p in producers), Counter())
    assert 500 not in sends and set(sends) <= {0, 201, 503}, sends
    assert 500 not in consumer.statuses and set(consumer.statuses) <= {0, 200, 503}, consumer.statuses
    with survivor.owner() as surviving_owner:
        wait_until(lambda: survivor.ready().status_code == 200, 30, "the surviving node ready")
        survivor_id = surviving_owner("GET", "/v1/server", status=200)["node_id"]
        wait_until(lambda: 'atomq_metrics_exporter{node=' in (text := surviving_owner.request("GET", "/metrics").text)
                   and text.split("atomq_metrics_exporter{", 1)[1].split("\n", 1)[0].endswith(" 1.0"), 30,
                   "the surviving node holding the maintenance lease (it exports the store's metrics)")

    client = open_redis(cluster.url)
    try:
        listener_holder = client.get(k.lease_key(lk.listener_lease_name(listening["id"], "stall")))
        assert listener_holder is not None and listener_holder.decode().startswith(f"{survivor_id}:")
        lost: dict[str, int] = {}
        for (tenant, key, durability), p in zip(tenants, producers):
            # An id whose ack acked fewer than its batch may have been acked: not counted as lost.
            missing = p.accepted - consumer.consumed - drain(survivor, key) - consumer.unconfirmed
            if durability == "sync":
                assert not missing, f"{len(missing)} messages answered 201 to a sync queue are gone"
            lost[tenant] = len(missing)
        print(f"failover: sends {dict(sends)}, gets and acks {dict(consumer.statuses)}, the killed master's "
              f"async tenants waited at most {max(recovered[t] for t in victims):.1f} s, the others' "
              f"{max((v for t, v in recovered.items() if t not in victims), default=0.0):.1f} s, "
              f"sent {sum(len(p.accepted) for p in producers)}, consumed by then {len(consumer.consumed)} "
              f"({len(consumer.unconfirmed)} unconfirmed), lost of async queues {sum(lost.values())}")
        assert_audit_clean(client, {t for t, _, _ in tenants} | {listening["id"]})
    finally:
        client.close()


def test_a_client_finds_the_cluster_while_the_first_node_it_names_is_down(tmp_path: Path) -> None:
    """A node process that connects during a failover (a worker started again, say) is given every
    node's URL: the first one dead, it finds the cluster through the others."""
    cluster = ValkeyCluster(tmp_path / "cluster", ["--cluster-require-full-coverage", "no"])
    cluster.start()
    try:
        victim = cluster.masters()[0][0]
        cluster.kill(victim)
        client = open_redis(",".join(f"redis://127.0.0.1:{port}" for port in
                                     [victim, *(p for p in cluster.ports if p != victim)]))
        try:
            wait_until(lambda: cluster_answers(client), 30, "the cluster to serve every slot again")
            assert client.get("aq:{t}:probe") == b"1"
        finally:
            client.close()
    finally:
        cluster.stop()


def cluster_answers(client: Any) -> bool:
    try:
        return bool(client.set("aq:{t}:probe", "1"))
    except Exception:  # noqa: BLE001 - any error while the replica takes over: not yet
        return False


def test_readiness_asks_every_primary_and_recovers_after_the_failover(tmp_path: Path) -> None:
    """A node is not ready while one primary does not answer (its tenants' calls would fail), and is
    ready again once a replica took its slots; scripts a primary lost are loaded there again."""
    cluster = ValkeyCluster(tmp_path / "cluster", ["--cluster-require-full-coverage", "no"])
    cluster.start()
    client = open_redis(cluster.urls)
    try:
        qs = QueueServer(client)
        assert qs.readiness_problems() == []
        cluster.kill(cluster.masters()[1][0])
        (problem,) = qs.readiness_problems()
        assert problem.startswith("Redis does not answer or refuses the scripts")
        wait_until(lambda: qs.readiness_problems() == [], 30, "ready again after the failover")
        client.execute_command("SCRIPT FLUSH", target_nodes=client.get_primaries())
        assert qs.readiness_problems() == [] and not qs.storage.scripts.missing(client)
    finally:
        client.close()
        cluster.stop()
