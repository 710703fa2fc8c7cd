"""End to end: ``atomq serve`` as a real process, spoken to over HTTP with ``requests``.

Each server is the real command line (gunicorn master, threaded HTTP workers,
embedded Valkey started by the master in DATA/valkey) on a free loopback port.
test_api.py covers every endpoint in-process; these tests cover what only a
real process shows: keep-alive, long-polls holding threads (not processes),
the per-tenant long-poll cap, SIGTERM during traffic and while a worker starts,
kill -9 of every process, restarts on the same data directory.

A long-poll is known to be waiting in the server when the embedded Valkey
counts it among its blocked clients (a waiting get blocks in XREAD), so no test
sleeps blindly for a request to arrive.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from atomq.errors import CannotListen
from atomq.node.listening import bind_listener
from atomq.platform.store.storage import Storage
from atomq.platform.watch.nodes import NodeRecords
from atomq.platform.watch.overview import OverviewStore
from support.processes import pid_running
from support.served_node import SHUTDOWN_TIMEOUT_S, AtomqServe, Http, ServeFactory
from support.waiting import wait_until


@pytest.fixture
def server(serve: ServeFactory) -> AtomqServe:
    return serve()


# -- helpers --------------------------------------------------------------------------------


def new_tenant(node: AtomqServe, name: str, **settings: int) -> tuple[str, str]:
    """(tenant id, its API key)."""
    with node.owner() as owner:
        created = owner("POST", "/v1/tenants", {"name": name, **settings}, 201)
    return created["id"], created["api_key"]


def messages(*texts: str) -> dict[str, Any]:
    return {"messages": [{"documents": [{"data": t}]} for t in texts]}


def blocked_clients(node: AtomqServe) -> int:
    """The long-polls waiting in the store: clients blocked in a stream read (the listener
    supervisor blocks too, between its rounds, on its wake-up list: not counted)."""
    with node.redis() as c:
        return sum(1 for client in c.client_list() if "b" in client["flags"] and client["cmd"].startswith("xread"))


def browse_all(http: Http, queue: str, limit: int = 100) -> list[dict[str, Any]]:
    """Every message of the queue (waiting, scheduled or in flight), page by page."""
    items: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        query: dict[str, Any] = {"limit": limit, **({"after": after} if after else {})}
        page = http("GET", f"/v1/queues/{queue}/messages", status=200, **query)
        items += page["messages"]
        if not page.get("next"):
            return items
        after = page["next"]


class Call(threading.Thread):
    """A request in a thread of its own, on a connection of its own; keeps the answer or the exception."""

    def __init__(self, url: str, key: str, method: str, path: str, body: Any = None, timeout: float = 30) -> None:
        super().__init__(daemon=True)
        self.args_ = (url, key, method, path, body, timeout)
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self.ended_at: float | None = None

    def run(self) -> None:
        url, key, method, path, body, timeout = self.args_
        try:
            with Http(url, key) as http:
                self.response = http.request(method, path, body, timeout)
        except BaseException as e:  # noqa: BLE001 - reported by the test, never lost in a thread
            self.error = e
        finally:
            self.ended_at = time.monotonic()

    def result(self) -> tuple[int, Any]:
        assert not self.is_alive(), "the request is still waiting"
        assert self.error is None, f"the request got no answer: {self.error!r}"
        assert self.response is not None
        return self.response.status_code, self.response.json()


class Traffic:
    """A sender (5 messages a request, recording the ids confirmed with 201) and a consumer
    (get, then ack by receipt, recording the ids confirmed acked) on one queue, until stopped
    or until the server stops answering."""

    def __init__(self, url: str, key: str, queue: str) -> None:
        self.url, self.key, self.queue = url, key, queue
        self.confirmed: list[str] = []
        self.acked: set[str] = set()
        self.unsure_acks: set[str] = set()  # an ack sent whose answer never came: acked or not
        self.problems: list[str] = []  # answers the contract does not allow
        self.ended: dict[str, str] = {}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self._send, self._consume)]

    def start(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout: float = 15) -> None:
        for t in self.threads:
            t.join(timeout)
            assert not t.is_alive(), f"{t.name} did not end"

    def _guard(self, loop: Callable[[Http], str]) -> None:
        try:
            with Http(self.url, self.key) as http:
                self.ended[loop.__name__] = loop(http)
        except BaseException as e:  # noqa: BLE001
            self.problems.append(f"{loop.__name__} crashed: {e!r}")

    def _send(self, http: Http) -> str:
        n = 0
        while not self.stop.is_set():
            try:
                r = http.request("POST", f"/v1/queues/{self.queue}/messages",
                                 messages(*(f"m{n + i}" for i in range(5))), timeout=10)
            except requests.RequestException as e:
                return f"no answer: {e!r}"
            if r.status_code != 201:
                return f"{r.status_code} {r.text}"
            ids = r.json()["ids"]
            if len(ids) != 5:
                self.problems.append(f"a send of 5 returned {ids}")
            self.confirmed += ids
            n += 5
        return "stopped"

    def _consume(self, http: Http) -> str:
        while not self.stop.is_set():
            try:
                r = http.request("POST", f"/v1/queues/{self.queue}/get", {"max": 10}, timeout=10)
            except requests.RequestException as e:
                return f"get: no answer: {e!r}"
            if r.status_code != 200:
                return f"get: {r.status_code} {r.text}"
            got = r.json()["messages"]
            if not got:
                time.sleep(0.01)
                continue
            ids = {m["id"] for m in got}
            try:
                a = http.request("POST", f"/v1/queues/{self.queue}/ack",
                                 {"receipts": [m["receipt"] for m in got]}, timeout=10)
            except requests.RequestException as e:
                self.unsure_acks |= ids
                return f"ack: no answer: {e!r}"
            if a.status_code != 200:
                return f"ack: {a.status_code} {a.text}"
            if a.json()["acked"] != len(ids):
                self.problems.append(f"acked {a.json()['acked']} of {len(ids)} fresh receipts")
                self.unsure_acks |= ids
            else:
                self.acked |= ids
        return "stopped"


def wait_for_fsync(node: AtomqServe) -> None:
    # appendfsync everysec: Valkey writes each change to its AOF at once and fsyncs it once a
    # second, losing at most the last second to a crash. Waiting past that second is the
    # behaviour under test, so this waits wall-clock time, then polls until no AOF write or
    # background fsync is pending.
    time.sleep(1.1)
    with node.redis() as c:
        def flushed() -> bool:
            info = c.info("persistence")
            return bool(info["aof_buffer_length"] == 0 and info["aof_pending_bio_fsync"] == 0)
        wait_until(flushed, 10, "the AOF to be fsynced")


def check_nothing_lost(node: AtomqServe, key: str, queue: str, traffic: Traffic) -> list[dict[str, Any]]:
    """After a restart: each confirmed id is acked or still stored; no acked id is stored. The key works."""
    with Http(node.url, key) as http:
        stored = browse_all(http, queue)
        info = http("GET", f"/v1/queues/{queue}", status=200)
    present = {m["id"] for m in stored}
    assert len(present) == len(stored), "browse lists each message once"
    assert info["depth"] + info["in_flight"] == len(stored), (info, len(stored))
    confirmed = set(traffic.confirmed)
    assert len(confirmed) == len(traffic.confirmed), "every send got ids of its own"
    lost = confirmed - traffic.acked - traffic.unsure_acks - present
    assert not lost, f"{len(lost)} of {len(confirmed)} confirmed messages lost: {sorted(lost)[:10]}"
    back = traffic.acked & present
    assert not back, f"{len(back)} acked messages came back: {sorted(back)[:10]}"
    assert traffic.acked <= confirmed, "the consumer acked only messages the sender was told were stored"
    return stored


# -- 1. the happy path ----------------------------------------------------------------------


def test_happy_path_over_real_http_with_keep_alive(server: AtomqServe) -> None:
    anon = requests.Session()
    with anon:
        assert anon.get(server.url + "/v1/ready", timeout=10).json() == {"status": "ready"}
        spec = anon.get(server.url + "/openapi.json", timeout=10)
        assert spec.status_code == 200 and "/v1/queues/{name}/get" in spec.json()["paths"]

    _, key = new_tenant(server, "happy")
    with Http(server.url, key) as acme:
        acme("PUT", "/v1/queues/orders", {"model": "point_to_point"}, 201)
        sent: dict[str, str] = {}
        for first, count in ((0, 100), (100, 100), (200, 50)):
            texts = [f"order {i}" for i in range(first, first + count)]
            ids = acme("POST", "/v1/queues/orders/messages", messages(*texts), 201)["ids"]
            assert len(ids) == count
            sent.update(zip(ids, texts, strict=True))
        assert len(sent) == 250, "250 distinct ids"
        assert acme("GET", "/v1/queues/orders", status=200)["depth"] == 250

        got: dict[str, dict[str, Any]] = {}
        while len(got) < 250:
            batch = acme("POST", "/v1/queues/orders/get", {"max": 100, "wait_ms": 5000}, 200)["messages"]
            assert batch, f"a blocking get returned nothing with {250 - len(got)} messages waiting"
            for m in batch:
                assert m["id"] not in got, f"{m['id']} delivered twice"
                got[m["id"]] = m
        assert {i: m["documents"][0]["data"] for i, m in got.items()} == sent
        assert all(m["delivery_count"] == 1 and not m["redelivered"] for m in got.values())
        assert acme("GET", "/v1/queues/orders", status=200)["in_flight"] == 250

        receipts = [m["receipt"] for m in got.values()]
        acked = sum(acme("POST", "/v1/queues/orders/ack", {"receipts": receipts[i:i + 100]}, 200)["acked"]
                    for i in range(0, 250, 100))
        assert acked == 250
        q = acme("GET", "/v1/queues/orders", status=200)
        assert (q["depth"], q["in_flight"], q["dead_letters"]) == (0, 0, 0)
        # Keep-alive: every one of these requests went over one TCP connection.
        pools = acme.session.get_adapter(server.url).poolmanager.pools  # type: ignore[attr-defined]
        (pool,) = [pools[k] for k in pools.keys()]
        assert (pool.num_connections, pool.num_requests) == (1, 13)


def test_metrics_add_up_every_worker_process_and_one_node_exports_them(serve: ServeFactory) -> None:
    node = serve("--metrics-public")
    tenant, key = new_tenant(node, "measured")
    with Http(node.url, key) as acme:
        acme("PUT", "/v1/queues/orders", {"model": "point_to_point"}, 201)

    def send(i: int) -> int:
        return requests.post(f"{node.url}/v1/queues/orders/messages", json=messages(f"m{i}"), timeout=10,
                             headers={"Authorization": f"Bearer {key}"}).status_code

    # Concurrent requests, a connection each, so both HTTP workers are likely to answer some of them.
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(send, range(20))) == [201] * 20
    timed = f'atomq_request_duration_seconds_count{{method="POST",route="/v1/queues/{{name}}/messages",tenant="{tenant}"}}'
    # Each worker hands its share of the latency histogram to Redis every 5 s; the counters are exact at once.
    wait_until(lambda: f"{timed} 20.0" in requests.get(f"{node.url}/metrics", timeout=10).text, 20,
               "both workers' latency in /metrics")
    text = requests.get(f"{node.url}/metrics", timeout=10).text
    assert f'atomq_messages_sent_total{{queue="orders",tenant="{tenant}"}} 20.0' in text
    assert f'atomq_queue_depth{{queue="orders",tenant="{tenant}"}} 20.0' in text
    assert len(re.findall(r"^atomq_metrics_exporter\{[^}]*\} 1\.0$", text, re.M)) == 1


def test_the_node_samples_the_platform_for_the_overview_and_records_itself(serve: ServeFactory) -> None:
    node = serve()
    tenant, key = new_tenant(node, "sampled")
    with Http(node.url, key) as acme:
        acme("PUT", "/v1/queues/orders", {"model": "point_to_point"}, 201)
        acme("POST", "/v1/queues/orders/messages", messages("a", "b"), 201)
    store = OverviewStore(Storage(node.redis()))

    def sampled() -> bool:
        latest = store.latest()[0]
        return latest is not None and tenant in latest.tenants and latest.tenants[tenant].depth == 2

    wait_until(sampled, 30, "a sample with the tenant's messages (one every 10 s, by the lease holder)")
    (record,) = NodeRecords(Storage(node.redis())).all()
    assert record.url == node.url and record.pid == node.pid
    assert [(w.engine, w.state) for w in record.workers] == [("fork", "running"), ("fork", "running")]


# -- 2. long-polls ----------------------------------------------------------------------------


def test_a_long_poll_is_woken_by_a_send_and_does_not_stall_other_tenants(server: AtomqServe) -> None:
    _, key_a = new_tenant(server, "a")
    _, key_b = new_tenant(server, "b")
    with Http(server.url, key_a) as a, Http(server.url, key_b) as b:
        a("PUT", "/v1/queues/inbox", {"model": "point_to_point"}, 201)
        b("PUT", "/v1/queues/work", {"model": "point_to_point"}, 201)

        # One waiting get, woken by a send on another connection.
        waiting = Call(server.url, key_a, "POST", "/v1/queues/inbox/get", {"wait_ms": 10_000})
        waiting.start()
        wait_until(lambda: blocked_clients(server) == 1, 10, "the get to wait in the server")
        (sent,) = a("POST", "/v1/queues/inbox/messages", messages("wake up"), 201)["ids"]
        sent_at = time.monotonic()
        waiting.join(5)
        status, body = waiting.result()
        assert status == 200 and [m["id"] for m in body["messages"]] == [sent]
        assert waiting.ended_at is not None and waiting.ended_at - sent_at < 2, "woken by the send, not the time-out"
        a("POST", "/v1/queues/inbox/ack", {"ids": [sent]}, 200)

        # Eight waiting gets of tenant A hold eight threads; tenant B is answered meanwhile.
        polls = [Call(server.url, key_a, "POST", "/v1/queues/inbox/get", {"max": 1, "wait_ms": 10_000})
                 for _ in range(8)]
        for p in polls:
            p.start()
        wait_until(lambda: blocked_clients(server) == 8, 10, "8 gets to wait in the server")
        ids = b("POST", "/v1/queues/work/messages", messages(*(f"job {i}" for i in range(20))), 201)["ids"]
        got = b("POST", "/v1/queues/work/get", {"max": 20}, 200)["messages"]
        assert sorted(m["id"] for m in got) == sorted(ids)
        assert b("POST", "/v1/queues/work/ack", {"ids": ids}, 200) == {"acked": 20}
        assert b("GET", "/v1/queues/work", status=200)["depth"] == 0
        still = [p.is_alive() for p in polls]
        assert all(still), f"tenant B's calls came back only after long-polls ended: {still}"

        # One send of 8 releases the 8 waiting gets, one message each.
        released = a("POST", "/v1/queues/inbox/messages", messages(*(f"n{i}" for i in range(8))), 201)["ids"]
        delivered = []
        for p in polls:
            p.join(5)
            status, body = p.result()
            assert status == 200 and len(body["messages"]) == 1, body
            delivered.append(body["messages"][0]["id"])
        assert sorted(delivered) == sorted(released)


# -- 3. the long-poll cap ---------------------------------------------------------------------


def test_long_polls_past_the_per_tenant_cap_answer_at_once(serve: ServeFactory) -> None:
    # The cap is per worker process (see --max-longpolls-per-tenant): one worker makes it exact.
    node = serve("--max-longpolls-per-tenant", "2", http_workers=1)
    _, key = new_tenant(node, "capped")
    _, other_key = new_tenant(node, "other")
    with Http(node.url, key) as acme:
        acme("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        gets = [Call(node.url, key, "POST", "/v1/queues/q/get", {"max": 1, "wait_ms": 5000}) for _ in range(4)]
        for g in gets:
            g.start()

        def finished() -> list[Call]:
            return [g for g in gets if not g.is_alive()]

        wait_until(lambda: len(finished()) >= 2, 4, "the 2 gets past the cap to answer")
        wait_until(lambda: blocked_clients(node) == 2, 4, "the 2 gets within the cap to wait")
        first = finished()
        assert len(first) == 2, "exactly 2 answered at once"
        for g in first:
            assert g.result() == (200, {"messages": []})
        waiting = [g for g in gets if g not in first]

        # Another tenant's long-poll is not counted against this one's cap.
        with Http(node.url, other_key) as other:
            other("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
            theirs = Call(node.url, other_key, "POST", "/v1/queues/q/get", {"max": 1, "wait_ms": 5000})
            theirs.start()
            wait_until(lambda: blocked_clients(node) == 3, 4, "the other tenant's get to wait")
            other("POST", "/v1/queues/q/messages", messages("theirs"), 201)
            theirs.join(5)
            assert len(theirs.result()[1]["messages"]) == 1

        assert all(g.is_alive() for g in waiting), "the 2 gets within the cap are still waiting"
        ids = acme("POST", "/v1/queues/q/messages", messages("x", "y"), 201)["ids"]
        got = []
        for g in waiting:
            g.join(5)
            status, body = g.result()
            assert status == 200 and len(body["messages"]) == 1
            got.append(body["messages"][0]["id"])
        assert sorted(got) == sorted(ids)

        # The slots were given back: two new long-polls wait again.
        again = [Call(node.url, key, "POST", "/v1/queues/q/get", {"max": 1, "wait_ms": 5000}) for _ in range(2)]
        for g in again:
            g.start()
        wait_until(lambda: blocked_clients(node) == 2, 4, "2 new gets to wait after the slots were freed")
        assert all(g.is_alive() for g in again)
        acme("POST", "/v1/queues/q/messages", messages("p", "q"), 201)
        for g in again:
            g.join(5)
            assert len(g.result()[1]["messages"]) == 1


# -- 4. SIGTERM during traffic ----------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_during_traffic_answers_in_flight_requests_and_loses_nothing(serve: ServeFactory) -> None:
    node = serve()
    _, key = new_tenant(node, "busy")
    with Http(node.url, key) as acme:
        acme("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        acme("PUT", "/v1/queues/idle", {"model": "point_to_point"}, 201)
    long_poll = Call(node.url, key, "POST", "/v1/queues/idle/get", {"wait_ms": 20_000}, timeout=30)
    long_poll.start()
    wait_until(lambda: blocked_clients(node) == 1, 10, "the long-poll to wait in the server")
    traffic = Traffic(node.url, key, "q").start()
    wait_until(lambda: len(traffic.confirmed) >= 200 and len(traffic.acked) >= 50 or bool(traffic.ended), 20,
               "traffic to flow")
    assert not traffic.ended, traffic.ended
    valkey_pid, worker_pids = node.valkey.pid, [w.pid for w in node.workers]  # type: ignore[union-attr]
    socket_path = node.socket_path()
    clean_exits = (node.valkey_dir / "valkey.log").read_text().count("ready to exit")

    node.signal(signal.SIGTERM)
    signalled = time.monotonic()
    long_poll.join(5)
    assert not long_poll.is_alive(), "the long-poll was still waiting 5 s after SIGTERM"
    assert long_poll.result() == (200, {"messages": []}), "the long-poll in flight got an answer"
    assert long_poll.ended_at is not None and long_poll.ended_at - signalled < 3
    status = node.wait(SHUTDOWN_TIMEOUT_S)
    assert status is not None, (
        f"atomq serve still runs {SHUTDOWN_TIMEOUT_S} s (--shutdown-timeout) after SIGTERM; running: "
        f"master {pid_running(node.pid)}, workers {[pid_running(p) for p in worker_pids]}, "
        f"Valkey {pid_running(valkey_pid)}; Valkey's socket {socket_path} exists: {socket_path.exists()}")
    assert status == 0
    assert not pid_running(valkey_pid), "the embedded Valkey stopped with the node"
    assert not any(pid_running(p) for p in worker_pids)
    assert (node.valkey_dir / "valkey.log").read_text().count("ready to exit") == clean_exits + 1, \
        "Valkey shut down cleanly (AOF fsynced)"
    traffic.stop.set()
    traffic.join()
    assert not traffic.problems, traffic.problems

    again = serve(same_as=node)
    check_nothing_lost(again, key, "q", traffic)


# -- 4a. a port another program holds ----------------------------------------------------------


def test_a_taken_port_stops_the_node_before_anything_starts_and_names_the_option(serve: ServeFactory) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        refused = serve(port=port, healthy=False)
        assert refused.wait(30) == 1, "exits with an error while the port is still held"
    log = refused.log_path.read_text()
    assert f"cannot listen on 127.0.0.1:{port}: port {port} is in use" in log and "--port" in log, log
    assert "serving" not in log and "gunicorn" not in log, "it never says it serves, nor tries to bind again"
    assert not refused.valkey_dir.exists(), "the embedded Valkey never started"


# -- 4b. SIGTERM while the node starts -----------------------------------------------------------


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def has_signal(mask: str, sig: int) -> bool:
    return bool(int(mask, 16) >> (sig - 1) & 1)


def test_sigterm_while_a_worker_loads_the_app_exits_cleanly(serve: ServeFactory) -> None:
    """A service manager may stop a node that is still starting. The moment is made exact: the worker
    is single-stepped with SIGSTOP/SIGCONT until it has installed its own signal handlers (those of
    the master reset, its own set) but not yet started its maintenance thread, i.e. while it loads the app;
    it stays stopped while the master relays SIGTERM, then goes on with the signal pending."""
    node = serve(http_workers=1, healthy=False)

    def worker_pid() -> int | None:  # logged by the worker itself, before it sets up its signals
        found = re.search(r"Booting worker with pid: (\d+)", node.log_path.read_text())
        return int(found.group(1)) if found else None

    wait_until(lambda: worker_pid() is not None, 20, "the master to fork its worker")
    worker = worker_pid()
    assert worker is not None
    node.track_processes()  # for the teardown's check that nothing is left behind
    deadline = time.monotonic() + 20
    while True:
        os.kill(worker, signal.SIGSTOP)
        wait_until(lambda: proc_status(worker)["State"].startswith("T"), 5, "the worker to stop")
        status = proc_status(worker)
        # The worker resets the master's handlers (SIGCHLD last), then sets its own (SIGABRT last).
        handlers_installed = (not has_signal(status["SigCgt"], signal.SIGCHLD)
                              and has_signal(status["SigCgt"], signal.SIGABRT))
        if handlers_installed and status["Threads"] == "1":
            break  # loading the app: the maintenance thread starts only after it
        assert status["Threads"] == "1", "stepped past the loading of the app; the test could not catch it"
        assert time.monotonic() < deadline, "the worker never reached the loading of the app"
        os.kill(worker, signal.SIGCONT)
        time.sleep(0.0005)
    node.signal(signal.SIGTERM)
    wait_until(lambda: has_signal(proc_status(worker)["ShdPnd"], signal.SIGTERM)
               or has_signal(proc_status(worker)["SigPnd"], signal.SIGTERM), 5, "the master to relay SIGTERM")
    os.kill(worker, signal.SIGCONT)
    exit_status = node.wait(SHUTDOWN_TIMEOUT_S)
    log = node.log_path.read_text()
    assert exit_status == 0, f"exit status {exit_status} (None: still running)\n{log}"
    assert "Traceback" not in log and "Worker failed to boot" not in log, log


# -- 5. kill -9 during traffic ------------------------------------------------------------------


@pytest.mark.slow
def test_kill_9_of_every_process_loses_nothing_confirmed_and_restarts_cleanly(serve: ServeFactory) -> None:
    node = serve()
    _, key = new_tenant(node, "crashy")
    with Http(node.url, key) as acme:
        acme("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
    traffic = Traffic(node.url, key, "q").start()
    wait_until(lambda: len(traffic.confirmed) >= 300 and len(traffic.acked) >= 100 or bool(traffic.ended), 20,
               "traffic to flow")
    traffic.stop.set()
    traffic.join()
    assert traffic.ended == {"_send": "stopped", "_consume": "stopped"}, traffic.ended
    assert not traffic.problems and not traffic.unsure_acks, (traffic.problems, traffic.unsure_acks)
    wait_for_fsync(node)  # > 1 s after the last confirmed request: appendfsync everysec

    valkey_pid = node.valkey.pid  # type: ignore[union-attr]
    node.kill_everything()
    assert not node.running()
    log = (node.valkey_dir / "valkey.log").read_text()
    assert f"{valkey_pid}:M" in log and "ready to exit" not in log, "Valkey was killed, not shut down"
    assert (node.valkey_dir / "valkey.pid").read_text().strip() == str(valkey_pid), "a stale pid file"
    assert node.socket_path().exists(), "a stale socket file"

    again = serve(same_as=node)
    assert again.valkey is not None and again.valkey.pid != valkey_pid
    with requests.get(again.url + "/v1/ready", timeout=10) as ready:
        assert ready.status_code == 200, ready.text
    stored = check_nothing_lost(again, key, "q", traffic)
    assert {m["id"] for m in stored} == set(traffic.confirmed) - traffic.acked, \
        "exactly the confirmed, unacked messages are stored (nothing was in doubt)"
    assert "Traceback" not in again.log_path.read_text()


# -- 6. tenants and keys survive a restart ------------------------------------------------------


@pytest.mark.slow
def test_restart_keeps_tenants_and_keys_and_a_revoked_key_stays_revoked(serve: ServeFactory) -> None:
    node = serve()
    tid, first_key = new_tenant(node, "keeper", rate_limit_per_minute=600, disk_quota_bytes=10_000_000)
    with node.owner() as owner:
        second = owner("POST", f"/v1/tenants/{tid}/keys", status=201)
        revoked = owner("POST", f"/v1/tenants/{tid}/keys", status=201)
        owner("DELETE", f"/v1/tenants/{tid}/keys/{revoked['key_id']}", status=204)
    with Http(node.url, revoked["api_key"]) as gone:
        assert gone("GET", "/v1/queues", status=401)["error"]["code"] == "unauthorized"
    with Http(node.url, first_key) as acme:
        acme("PUT", "/v1/queues/kept", {"model": "point_to_point"}, 201)
        (kept,) = acme("POST", "/v1/queues/kept/messages", messages("still here"), 201)["ids"]

    node.ensure_stopped()  # SIGTERM (how it exits is test 4's business)
    again = serve(same_as=node)

    with again.owner() as owner:
        after = owner("GET", f"/v1/tenants/{tid}", status=200)
        assert {k: after[k] for k in ("id", "name", "rate_limit_per_minute", "disk_quota_bytes")} == {
            "id": tid, "name": "keeper", "rate_limit_per_minute": 600, "disk_quota_bytes": 10_000_000}
        assert [t["id"] for t in owner("GET", "/v1/tenants", status=200)["tenants"]] == [tid]
    for key in (first_key, second["api_key"]):
        with Http(again.url, key) as acme:
            (m,) = acme("GET", "/v1/queues/kept/messages", status=200)["messages"]
            assert (m["id"], m["documents"][0]["data"]) == (kept, "still here")
    with Http(again.url, revoked["api_key"]) as gone:
        assert gone("GET", "/v1/queues", status=401)["error"]["code"] == "unauthorized"
    with Http(again.url, "aq_owner_not-the-owner") as stranger:
        stranger("GET", "/v1/tenants", status=401)


def test_the_port_the_node_binds_is_held_at_once() -> None:
    """Two nodes started together on one port: both may bind it (SO_REUSEADDR) while neither
    listens, and the loser would fail only later, inside gunicorn. The node listens as it binds, so
    the other finds the port taken there and then."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", 0))
        port = other.getsockname()[1]
        with bind_listener("127.0.0.1", port):
            with pytest.raises(OSError) as taken:
                other.listen()
            assert taken.value.errno == errno.EADDRINUSE
        other.listen()
        with pytest.raises(CannotListen, match=f"port {port} is in use.*--port"):
            bind_listener("127.0.0.1", port)
