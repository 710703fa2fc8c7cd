"""Listeners end to end: ``atomq serve --workers 2`` as real processes, executions in forked work horses.

The node registers the test processes of ``support.listener_processes`` (on
the work horses' ``PYTHONPATH``) and redelivers after 0.1 s. Each test has a
tenant of its own.
"""

from __future__ import annotations

import secrets
import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from atomq.client import AtomqClient
from atomq.errors import RateLimited
from atomq.workers.liveness import live_fork_workers
from support.listener_processes import always_fail, served_env, stall_first_delivery
from support.processes import pid_running
from support.served_node import AtomqServe, ServeFactory
from support.waiting import wait_until

pytestmark = pytest.mark.slow

WORK_HORSE_ENV = served_env(fail=always_fail, stall=stall_first_delivery)
"""The work horses' environment: the test processes registered and importable."""


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    server = serve_for_module("--workers", "2", http_workers=2, env=WORK_HORSE_ENV)
    wait_until(lambda: (server.track_processes(), len(server.execution_workers) == 2)[1], 30,
               "two execution workers")
    with contextlib.closing(server.redis()) as rq:  # the node's rq Redis is its own Valkey
        wait_until(lambda: live_fork_workers(rq) == 2, 30, "both workers heartbeating, so no listener waits")
    with AtomqClient(server.url, server.owner_key) as owner:
        owner.update_server(redelivery_delays_s=[0.1, 0.1])
    return server


@pytest.fixture
def api(node: AtomqServe) -> Iterator[AtomqClient]:
    with node.tenant_client(f"executions-{secrets.token_hex(4)}") as client:  # names are unique in the node's store
        yield client


def depth(api: AtomqClient, queue: str) -> int:
    return int(api.queue(queue)["depth"])


def settled(api: AtomqClient, queue: str, listener: str, executions: int) -> None:
    """Waits until the listener has finished ``executions`` executions and nothing of its queue is in flight
    (outputs are stored before the execution finishes and acks)."""
    wait_until(lambda: api.request("GET", f"/v1/listeners/{listener}")["executions"] >= executions
               and api.queue(queue)["in_flight"] == 0, 30, f"{executions} finished execution(s)")


def test_a_batch_of_250_runs_as_one_execution_that_costs_exactly_3_send_requests(node: AtomqServe) -> None:
    with AtomqClient(node.url, node.owner_key) as owner:
        tenant = owner.create_tenant("three-requests", rate_limit_per_minute=4)
    with AtomqClient(node.url, tenant["api_key"]) as api:
        api.put_queue("in")
        api.put_queue("out")
        api.request("PUT", "/v1/listeners/fwd", {"queue": "in", "process": "forward", "batch_size": 250,
                                                 "settings": {"to": "out"}})
        api.send_texts("in", [f"document {i}" for i in range(250)])  # send request 1 of 4
        wait_until(lambda: depth(api, "out") == 250, 60, "250 forwarded documents")
        settled(api, "in", "fwd", 1)
        listener = api.request("GET", "/v1/listeners/fwd")
        assert (listener["executions"], listener["failures"]) == (1, 0)
        assert api.queue("in")["in_flight"] == 0
        # The execution's 3 requests filled the window of 4: the next send is refused.
        with pytest.raises(RateLimited):
            api.send_texts("out", ["one too many"])
        assert sorted(m["documents"][0]["data"] for m in api.browse("out")) == \
            sorted(f"document {i}" for i in range(250))


def test_pause_holds_messages_back_and_resume_drains_them(api: AtomqClient) -> None:
    for name in ("held", "flowing", "out-held", "out-flowing"):
        api.put_queue(name)
    api.request("PUT", "/v1/listeners/held", {"queue": "held", "process": "forward",
                                              "settings": {"to": "out-held"}})
    assert api.request("POST", "/v1/listeners/held/pause")["state"] == "paused"
    api.request("PUT", "/v1/listeners/flowing", {"queue": "flowing", "process": "forward",
                                                 "settings": {"to": "out-flowing"}})
    api.send_texts("held", [f"h{i}" for i in range(20)])
    api.send_texts("flowing", ["f"])
    # The running listener's message went through after the sends: the supervisor and the
    # workers had their chance at the paused one too, and took nothing.
    wait_until(lambda: depth(api, "out-flowing") == 1, 30, "the running listener's message")
    api.send_texts("flowing", ["g"])
    wait_until(lambda: depth(api, "out-flowing") == 2, 30, "the running listener's second message")
    assert (depth(api, "held"), api.queue("held")["in_flight"], depth(api, "out-held")) == (20, 0, 0)
    assert api.request("POST", "/v1/listeners/held/resume")["state"] == "running"
    wait_until(lambda: depth(api, "out-held") == 20, 30, "the held messages")
    settled(api, "held", "held", 1)
    assert depth(api, "held") == 0


def test_a_failing_process_dead_letters_its_message_after_the_redelivery_schedule(api: AtomqClient) -> None:
    api.put_queue("in", max_redeliveries=2)
    api.request("PUT", "/v1/listeners/failing", {"queue": "in", "process": "fail"})
    api.send_texts("in", ["poison"])
    wait_until(lambda: api.queue("in")["dead_letters"] == 1, 60, "the dead letter")
    (dead,) = list(api.dead_letters("in"))
    assert dead["failed_deliveries"] == 3
    assert "Refused: refusing 1 message(s)" in dead["reason"]
    listener = api.request("GET", "/v1/listeners/failing")
    assert (listener["state"], listener["executions"], listener["failures"]) == ("error", 3, 3)


def test_kill_9_of_a_work_horse_mid_execution_brings_its_batch_back(
        node: AtomqServe, api: AtomqClient, tmp_path: Path) -> None:
    pid_file = tmp_path / "horse.pid"
    api.put_queue("in", ack_timeout_s=2)
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/stall", {"queue": "in", "process": "stall", "batch_size": 10,
                                               "settings": {"to": "out", "pid_file": str(pid_file)}})
    api.send_texts("in", ["a", "b", "c"])
    wait_until(pid_file.exists, 30, "the work horse to start")
    horse = psutil.Process(int(pid_file.read_text()))
    assert {p.pid for p in node.execution_workers} >= {horse.ppid()}, "a work horse forked by an execution worker"
    assert api.queue("in")["in_flight"] == 3
    horse.send_signal(signal.SIGKILL)
    wait_until(lambda: not pid_running(horse.pid), 10, "the work horse to die")
    wait_until(lambda: depth(api, "out") == 3, 60, "the batch to come back and be forwarded")
    settled(api, "in", "stall", 2)
    assert sorted(m["documents"][0]["data"] for m in api.browse("out")) == ["a", "b", "c"]
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"], queue_in["dead_letters"]) == (0, 0, 0)
    listener = api.request("GET", "/v1/listeners/stall")
    assert listener["failures"] == 1 and "did not finish" in listener["last_error"]
    assert listener["state"] == "running"  # the successful retry ended the error state


def test_kill_9_of_a_worker_with_its_work_horse_brings_the_batch_back_within_seconds(
        node: AtomqServe, api: AtomqClient, tmp_path: Path) -> None:
    """A worker killed with its work horse (as when its machine goes) marks nothing failed: its
    silence does, within seconds, long before the ack time-out or the execution's deadline."""
    pid_file = tmp_path / "horse.pid"
    api.put_queue("in", ack_timeout_s=300)
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/stall", {"queue": "in", "process": "stall", "batch_size": 10,
                                               "settings": {"to": "out", "pid_file": str(pid_file)}})
    api.send_texts("in", ["a", "b"])
    wait_until(pid_file.exists, 30, "the work horse to start")
    horse = psutil.Process(int(pid_file.read_text()))
    worker = psutil.Process(horse.ppid())
    for process in (worker, horse):
        process.send_signal(signal.SIGKILL)
    wait_until(lambda: not pid_running(horse.pid) and not pid_running(worker.pid), 10, "both to die")
    wait_until(lambda: depth(api, "out") == 2, 30, "the batch back and forwarded by another worker")
    listener = api.request("GET", "/v1/listeners/stall")
    assert listener["failures"] == 1
    settled(api, "in", "stall", 2)
    # The node says how its worker ended (gunicorn's own reaping must not take the status first).
    wait_until(lambda: "an execution worker was killed by signal 9" in node.log_path.read_text(), 10,
               "the node to report the worker's death")
    node.track_processes()  # the worker the node started in its place, which teardown checks is stopped


def test_echo_service_routes_valid_invalid_and_unparsable_messages(api: AtomqClient) -> None:
    for name in ("tests", "echo", "errors"):
        api.put_queue(name)
    api.request("PUT", "/v1/listeners/echo", {"queue": "tests", "process": "echo-service", "batch_size": 50,
                                              "settings": {"echo_queue": "echo", "errors_queue": "errors"}})
    valid = [{"documents": [{"data": json.dumps({"msgId": f"m{i}", "n": i})}]} for i in range(40)]
    invalid = [{"documents": [{"data": json.dumps({"n": i})}]} for i in range(5)]
    unparsable = [{"documents": [{"data": f"<test {i}/>"}]} for i in range(5)]
    api.send("tests", valid + invalid + unparsable)
    wait_until(lambda: depth(api, "echo") == 40 and depth(api, "errors") == 10, 60, "every message routed")
    settled(api, "tests", "echo", 1)
    echoes = sorted(json.loads(m["documents"][0]["data"])["msgId"] for m in api.browse("echo"))
    assert echoes == sorted(f"m{i}" for i in range(40))
    reasons = [json.loads(m["documents"][0]["data"])["reason"] for m in api.browse("errors")]
    assert reasons.count("the field msgId is missing") == 5
    assert sum(r.startswith("not JSON") for r in reasons) == 5
    tests_queue = api.queue("tests")
    assert (tests_queue["depth"], tests_queue["in_flight"], tests_queue["dead_letters"]) == (0, 0, 0)
    assert api.request("GET", "/v1/listeners/echo")["failures"] == 0


def test_sigterm_lets_a_running_execution_finish_before_the_api_stops(serve: ServeFactory, tmp_path: Path) -> None:
    """The execution workers stop first, while the API they ack through still answers."""
    node = serve("--workers", "1", http_workers=1, env=WORK_HORSE_ENV)
    pid_file = tmp_path / "horse.pid"
    with AtomqClient(node.url, node.owner_key) as owner:
        key = owner.create_tenant("sigterm")["api_key"]
    with AtomqClient(node.url, key) as api:
        api.put_queue("in")
        api.put_queue("out")
        api.request("PUT", "/v1/listeners/slow", {"queue": "in", "process": "stall", "settings": {
            "to": "out", "pid_file": str(pid_file), "sleep_s": 1.5}})
        api.send_texts("in", ["finishes"])
        wait_until(pid_file.exists, 30, "the execution to start")
    node.signal(signal.SIGTERM)
    assert node.wait(20) == 0
    node.start()
    with AtomqClient(node.url, key) as api:
        assert [m["documents"][0]["data"] for m in api.browse("out")] == ["finishes"]
        queue_in = api.queue("in")
        assert (queue_in["depth"], queue_in["in_flight"]) == (0, 0)
        assert api.request("GET", "/v1/listeners/slow")["executions"] == 1


def test_the_server_reports_its_temporary_and_job_scheduler_stores(node: AtomqServe) -> None:
    with AtomqClient(node.url, node.owner_key) as owner:
        wait_until(lambda: owner.server()["job_scheduler_store_bytes"] is not None, 30, "the first measurement")
        server = owner.server()
    assert server["temporary_store_bytes"] >= 0 and server["job_scheduler_store_bytes"] >= 0
