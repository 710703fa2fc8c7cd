"""Listeners and executions on a real Valkey, a real HTTP server and real rq jobs, in one process.

The node's API runs in a thread (werkzeug); the supervisor's rounds and rq's
SimpleWorker (burst) are driven by the test, so every step is deterministic:
a round schedules, the worker runs what was scheduled, the test looks. The
forking workers of ``atomq serve --workers N`` are tested end to end in
``test_executions_served.py``.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from rq import Queue, SimpleWorker

from atomq import defaults
from atomq.client import AtomqClient, wire
from atomq.errors import Forbidden, InvalidInput, NotFound, StorageError, Unauthorized
from atomq.platform import QueueServer
from atomq.platform.listeners.deployed import ListenerSpec, ListenerStore, ScheduleCall
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.lease import Lease
from atomq.workers import execution, processes
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from atomq.workers.worker import TenantQueues, run_worker
from support.in_process_node import InProcessNode, NodeHarness as Harness, Tenant
from support.listener_processes import always_fail, registered, stall_first_delivery
from support.queues import msg

OWNER = "owner-key-for-listener-tests"
TEST_PROCESSES = registered(fail=always_fail, stall=stall_first_delivery)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """A node of its own (the tests change the server's redelivery delays), with the test processes."""
    mp = pytest.MonkeyPatch()
    mp.setenv(processes.FORK.env, TEST_PROCESSES)
    processes.FORK.clear()
    with InProcessNode(tmp_path_factory.mktemp("listeners"), OWNER) as node:
        services = node.services
        supervisor = Supervisor(services.queues, services.tenants.execution_tokens, node.rq,
                                SupervisorConfig(api_url=node.url, execution_timeout_s=30), holder="test-node",
                                tenant_exists=services.tenants.exists)
        node.owner.update_server(redelivery_delays_s=[0.05, 0.1])
        yield Harness(node.url, services, supervisor, node.rq, node.owner)
    mp.undo()
    processes.FORK.clear()


@pytest.fixture
def tenant(harness: Harness) -> Iterator[Tenant]:
    created = harness.owner.create_tenant(f"listeners-{secrets.token_hex(4)}", rate_limit_per_minute=1000)
    with AtomqClient(harness.url, created["api_key"]) as api:
        yield Tenant(created["id"], api)


def work(h: Harness, tenant: Tenant) -> int:
    """Runs every execution waiting in the tenant's rq queue, in this process; how many ran."""
    queue = Queue(lk.rq_queue_name(tenant.id), connection=h.rq)
    jobs = queue.count
    SimpleWorker([queue], connection=h.rq).work(burst=True, logging_level="WARNING")
    return jobs


def drive(h: Harness, tenant: Tenant, done: Callable[[], bool], what: str, timeout: float = 20) -> int:
    """Maintenance, a supervision round and the waiting executions, until ``done``; the executions run."""
    deadline = time.monotonic() + timeout
    ran = 0
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        h.services.queues.maintain(tenant.id)
        h.supervisor.round()
        ran += work(h, tenant)
        time.sleep(0.02)
    return ran


def texts(api: AtomqClient, queue: str) -> list[str]:
    return [m["documents"][0]["data"] for m in api.browse(queue)]


def send_requests_counted(h: Harness, tenant: Tenant) -> int:
    """The send requests the tenant's rate-limit window on this node has counted."""
    raw = h.services.queues.client.hget(k.tenant_rate_window(tenant.id, h.services.node_id), "count")
    return int(raw or 0)


# -- deploying ------------------------------------------------------------------------------


def test_deploy_checks_the_process_its_settings_and_the_queue(tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    with pytest.raises(InvalidInput) as unknown:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "process": "no-such-process"})
    assert unknown.value.details["field"] == "process"
    with pytest.raises(InvalidInput) as no_target:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "process": "forward"})
    assert no_target.value.details["field"] == "settings.to"
    with pytest.raises(InvalidInput) as bad_target:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "process": "forward", "settings": {"to": "a:b"}})
    assert bad_target.value.details["field"] == "settings.to"
    with pytest.raises(NotFound):
        api.request("PUT", "/v1/listeners/l1", {"queue": "missing", "process": "forward", "settings": {"to": "x"}})
    with pytest.raises(InvalidInput) as p2p_subscriber:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "subscriber": "s", "process": "forward",
                                                "settings": {"to": "x"}})
    assert p2p_subscriber.value.details["field"] == "subscriber"
    with pytest.raises(InvalidInput) as batch:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "process": "forward", "batch_size": 0,
                                                "settings": {"to": "x"}})
    assert "batch_size" in json.dumps(batch.value.details)
    assert api.request("GET", "/v1/listeners") == {"listeners": [], "next": None}


def test_deploy_checks_the_queue_and_the_subscriber_before_the_rest_of_the_definition(tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    big = {"to": "x", "pad": "a" * 70_000}  # passes forward's own check, not the 64 KiB bound
    with pytest.raises(NotFound):
        api.request("PUT", "/v1/listeners/l1", {"queue": "missing", "process": "forward", "settings": big})
    with pytest.raises(InvalidInput) as p2p_subscriber:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "subscriber": "s", "process": "forward",
                                                "settings": big})
    assert p2p_subscriber.value.details["field"] == "subscriber"
    with pytest.raises(InvalidInput) as too_big:
        api.request("PUT", "/v1/listeners/l1", {"queue": "in", "process": "forward", "settings": big})
    assert too_big.value.details["field"] == "settings"


def test_a_redeploy_keeps_state_and_counts_and_pubsub_listeners_get_their_subscriber(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("events", "publish_subscribe")
    api.put_queue("out")
    body = {"queue": "events", "process": "forward", "settings": {"to": "out"}}
    status_created = requests.put(f"{api.url}/v1/listeners/audit", json=body, headers=api.headers, timeout=10).status_code
    assert status_created == 201
    assert [s["name"] for s in api.queue("events")["subscribers"]] == ["audit"]
    api.send_texts("events", ["e1"])
    drive(harness, tenant, lambda: api.queue("out")["depth"] == 1, "the forwarded event")
    api.request("POST", "/v1/listeners/audit/pause")
    again = requests.put(f"{api.url}/v1/listeners/audit", json={**body, "batch_size": 5}, headers=api.headers,
                         timeout=10)
    assert again.status_code == 200
    listener = again.json()
    assert (listener["batch_size"], listener["state"], listener["executions"]) == (5, "paused", 1)


# -- executions -----------------------------------------------------------------------------


def test_forward_runs_one_execution_for_a_batch_of_250_and_sends_it_in_3_requests(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    # The input goes in through the library: only the execution's sends count in the window.
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i}") for i in range(250)])
    api.request("PUT", "/v1/listeners/fwd", {"queue": "in", "process": "forward", "batch_size": 250,
                                             "settings": {"to": "out"}})
    ran = drive(harness, tenant, lambda: api.queue("out")["depth"] == 250, "250 forwarded documents")
    assert ran == 1
    assert sorted(texts(api, "out")) == sorted(f"doc {i}" for i in range(250))
    queue_in = api.queue("in")
    assert (queue_in["depth"], queue_in["in_flight"], queue_in["dead_letters"]) == (0, 0, 0)
    assert send_requests_counted(harness, tenant) == 3
    listener = api.request("GET", "/v1/listeners/fwd")
    assert (listener["executions"], listener["failures"], listener["state"], listener["outstanding"]) == \
        (1, 0, "running", 0)


def test_a_process_publishes_to_a_topic_and_every_queue_attracting_it_gets_the_outputs(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("eu", topics=["orders/eu/*"])
    api.put_queue("audit", topics=["orders/>"])
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i}") for i in range(3)])
    for settings, field in (({"to": "eu", "topic": "orders/eu/new"}, "settings.to"),
                            ({"topic": "orders/*"}, "settings.topic")):
        with pytest.raises(InvalidInput) as refused:
            api.request("PUT", "/v1/listeners/bad", {"queue": "in", "process": "forward", "settings": settings})
        assert refused.value.details["field"] == field
    api.request("PUT", "/v1/listeners/fan", {"queue": "in", "process": "forward",
                                             "settings": {"topic": "orders/eu/new"}})
    drive(harness, tenant, lambda: api.queue("audit")["depth"] == 3, "3 published documents")
    for queue in ("eu", "audit"):
        assert sorted(texts(api, queue)) == ["doc 0", "doc 1", "doc 2"]
        assert {m["topic"] for m in api.browse(queue)} == {"orders/eu/new"}


def test_a_listener_on_an_exclusive_queue_is_its_consumer(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in", access="exclusive")
    api.put_queue("out")
    harness.services.queues.send(tenant.id, "in", [msg(f"doc {i}") for i in range(5)])
    api.request("PUT", "/v1/listeners/fwd", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    drive(harness, tenant, lambda: api.queue("out")["depth"] == 5, "5 forwarded documents")
    assert texts(api, "out") == [f"doc {i}" for i in range(5)], "in send order"
    consumers = api.queue("in")["consumers"]
    assert [(c["name"], c["active"]) for c in consumers] == [("fwd", True)]
    assert api.take("in", consumer="someone-else") == {"messages": [], "active": False}


def test_max_concurrent_executions_bounds_the_executions_scheduled(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.send_texts("in", [f"m{i}" for i in range(5)])
    api.request("PUT", "/v1/listeners/two", {"queue": "in", "process": "forward", "batch_size": 1,
                                             "max_concurrent_executions": 2, "settings": {"to": "out"}})
    harness.supervisor.round()
    assert Queue(lk.rq_queue_name(tenant.id), connection=harness.rq).count == 2
    assert api.request("GET", "/v1/listeners/two")["outstanding"] == 2
    harness.supervisor.round()  # the slots are taken: nothing more
    assert Queue(lk.rq_queue_name(tenant.id), connection=harness.rq).count == 2
    drive(harness, tenant, lambda: api.queue("out")["depth"] == 5, "all five forwarded")


def test_pause_holds_messages_back_even_from_scheduled_executions_and_resume_drains_them(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.send_texts("in", ["a", "b", "c"])
    api.request("PUT", "/v1/listeners/p", {"queue": "in", "process": "forward", "batch_size": 10,
                                           "settings": {"to": "out"}})
    harness.supervisor.round()
    assert api.request("POST", "/v1/listeners/p/pause")["state"] == "paused"
    assert work(harness, tenant) == 1  # scheduled before the pause: it starts, sees the pause, takes nothing
    harness.supervisor.round()
    assert work(harness, tenant) == 0
    assert (api.queue("in")["depth"], api.queue("in")["in_flight"], api.queue("out")["depth"]) == (3, 0, 0)
    listener = api.request("GET", "/v1/listeners/p")
    assert (listener["executions"], listener["outstanding"]) == (0, 0)
    assert api.request("POST", "/v1/listeners/p/resume")["state"] == "running"
    drive(harness, tenant, lambda: api.queue("out")["depth"] == 3, "the held messages")
    assert sorted(texts(api, "out")) == ["a", "b", "c"]


def test_a_failing_process_nacks_and_its_message_is_dead_lettered_after_the_schedule(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in", max_redeliveries=2)
    api.send_texts("in", ["poison"])
    api.request("PUT", "/v1/listeners/f", {"queue": "in", "process": "fail"})
    ran = drive(harness, tenant, lambda: api.queue("in")["dead_letters"] == 1, "the dead letter")
    assert ran == 3  # the first delivery and max_redeliveries=2 redeliveries, each failed once
    (dead,) = list(api.dead_letters("in"))
    assert dead["failed_deliveries"] == 3
    assert "Refused: refusing 1 message(s)" in dead["reason"]
    listener = api.request("GET", "/v1/listeners/f")
    assert (listener["state"], listener["executions"], listener["failures"]) == ("error", 3, 3)
    assert "Refused" in listener["last_error"]


def test_echo_service_routes_valid_invalid_and_unparsable_messages_and_acks_them_all(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    for name in ("tests", "echo", "errors"):
        api.put_queue(name)
    api.send(("tests"), [
        {"documents": [{"data": json.dumps({"msgId": "m-1", "text": "hello"})}]},
        {"documents": [{"data": json.dumps({"text": "no id"})}]},
        {"documents": [{"data": "{not json"}]},
        {"documents": [{"data_base64": "//79"}]},
        {"documents": [{"data": "[1, 2]"}]},
    ])
    api.request("PUT", "/v1/listeners/echo", {"queue": "tests", "process": "echo-service",
                                              "settings": {"echo_queue": "echo", "errors_queue": "errors"}})
    drive(harness, tenant, lambda: api.queue("errors")["depth"] == 4, "the error messages")
    (echo,) = [json.loads(t) for t in texts(api, "echo")]
    assert (echo["type"], echo["msgId"], echo["received"]) == ("echo", "m-1", {"msgId": "m-1", "text": "hello"})
    errors = [json.loads(t) for t in texts(api, "errors")]
    reasons = [e["reason"] for e in errors]
    assert reasons[0] == "the field msgId is missing"
    assert reasons[1].startswith("not JSON")
    assert reasons[2].startswith("not JSON")
    assert reasons[3] == "not a JSON object but a list"
    assert errors[1]["payload"] == "{not json"
    assert errors[2]["payload_base64"] == "//79"
    tests_queue = api.queue("tests")
    assert (tests_queue["depth"], tests_queue["in_flight"], tests_queue["dead_letters"]) == (0, 0, 0)
    assert api.request("GET", "/v1/listeners/echo")["failures"] == 0


def _echo_setup(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("tests", ack_timeout_s=0.5)
    api.put_queue("echo")
    api.put_queue("errors")
    api.send_texts("tests", [json.dumps({"msgId": "once"})])
    api.request("PUT", "/v1/listeners/echo", {"queue": "tests", "process": "echo-service",
                                              "settings": {"echo_queue": "echo", "errors_queue": "errors"}})


def test_a_redelivery_after_a_lost_ack_is_recognised_and_not_processed_again(
        harness: Harness, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """The execution's sends were stored and its messages recorded as processed,
    but the ack failed: the redelivered message is acked without a second echo."""
    api = tenant.api
    _echo_setup(harness, tenant)
    real_ack = harness.services.queues.ack
    failed = []

    def ack_fails_once(*args: Any, **kwargs: Any) -> int:
        if not failed:
            failed.append(True)
            raise StorageError("the ack was lost")
        return real_ack(*args, **kwargs)

    monkeypatch.setattr(harness.services.queues, "ack", ack_fails_once)
    drive(harness, tenant, lambda: bool(failed), "the lost ack")
    assert api.queue("echo")["depth"] == 1
    drive(harness, tenant, lambda: api.queue("tests")["depth"] + api.queue("tests")["in_flight"] == 0,
          "the redelivery to be acked")
    assert api.queue("echo")["depth"] == 1
    assert api.queue("tests")["dead_letters"] == 0


def crash_once_before_finish(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The first execution's work horse dies after its sends, before it finishes (its finish
    request raises); the list it returns gets an entry when that happened."""
    real_request = execution.AtomqClient.request
    crashed: list[bool] = []

    def crash_before_finish(self: AtomqClient, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/finish") and not crashed:
            crashed.append(True)
            raise StorageError("the work horse died")
        return real_request(self, method, path, *args, **kwargs)

    monkeypatch.setattr(execution.AtomqClient, "request", crash_before_finish)
    return crashed


def test_a_redelivery_after_a_crash_between_send_and_finish_stores_its_outputs_once(
        harness: Harness, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """The work horse sent its outputs and died before finishing: the message comes
    back and is processed again, and the outputs' dedupe ids keep them single."""
    api = tenant.api
    _echo_setup(harness, tenant)
    crashed = crash_once_before_finish(monkeypatch)
    drive(harness, tenant, lambda: bool(crashed), "the crash")
    assert api.queue("echo")["depth"] == 1
    assert api.queue("tests")["in_flight"] == 1
    ran = drive(harness, tenant, lambda: api.queue("tests")["depth"] + api.queue("tests")["in_flight"] == 0,
                "the redelivery to be processed")
    assert ran >= 1
    assert api.queue("echo")["depth"] == 1
    listener = api.request("GET", "/v1/listeners/echo")
    assert (listener["executions"], listener["failures"]) == (2, 1)  # the crashed one is counted lost


def test_the_echo_service_publishes_and_its_checkpoint_recognises_what_a_dead_execution_processed(
        harness: Harness, tenant: Tenant, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Seed 002, version 3: topics in and out, an exclusive input, a checkpoint in a last-value
    queue. The execution stored its outputs and its checkpoint, then died before finishing: the
    redelivered messages are recognised through the checkpoint and not processed again."""
    api = tenant.api
    api.put_queue("input", access="exclusive", topics=["boomi/test/>"], ack_timeout_s=1)
    api.put_queue("checkpoints", last_value=True, topics=["boomi/checkpoint/echo-service"])
    api.put_queue("errors", topics=["boomi/errors/echo-service/>"])
    api.put_queue("echoes", topics=["boomi/echo/>"])
    inputs = [json.dumps({"msgId": f"m-{i}"}) for i in range(3)] + ["not json"]
    ids = api.publish("boomi/test/echo-service", [wire.message([wire.document(t)]) for t in inputs])["ids"]
    crashed = crash_once_before_finish(monkeypatch)
    settings = {"echo_topic": "boomi/echo", "errors_topic": "boomi/errors/echo-service",
                "checkpoint_queue": "checkpoints", "checkpoint_topic": "boomi/checkpoint/echo-service"}
    api.request("PUT", "/v1/listeners/echo", {"queue": "input", "process": "echo-service", "settings": settings})
    drive(harness, tenant, lambda: bool(crashed), "the crash")
    (mark,) = api.browse("checkpoints")
    assert json.loads(mark["documents"][0]["data"]) == {"last_message_id": ids[-1], "message_ids": ids}
    with caplog.at_level(logging.INFO, logger="atomq.process.echo"):
        drive(harness, tenant, lambda: api.queue("input")["depth"] + api.queue("input")["in_flight"] == 0,
              "the redeliveries to be settled")
    recognised = [r for r in caplog.records if "processed already" in r.getMessage()]
    assert len(recognised) == 4
    assert sorted(m["topic"] for m in api.browse("echoes")) == ["boomi/echo/m-0", "boomi/echo/m-1", "boomi/echo/m-2"]
    assert [m["topic"] for m in api.browse("errors")] == ["boomi/errors/echo-service/not-JSON"]
    assert api.queue("input")["dead_letters"] == 0
    assert send_requests_counted(harness, tenant) == 3, \
        "the inputs' publish, then the four outputs (four topics) in one request, then the checkpoint"
    with pytest.raises(InvalidInput) as half:
        api.request("PUT", "/v1/listeners/bad", {"queue": "input", "process": "echo-service",
                                                 "settings": {k: v for k, v in settings.items()
                                                              if k != "checkpoint_topic"}})
    assert half.value.details["field"] == "settings.checkpoint_topic"


def _bytes_of_100_outputs(harness: Harness, tenant: Tenant, input_id: str) -> int:
    """What 100 forwarded documents add to the tenant's usage, measured on a scratch queue."""
    api = tenant.api
    api.put_queue("scratch")
    before = harness.owner.tenant(tenant.id)["stored_bytes"]
    harness.services.queues.send(tenant.id, "scratch", [msg(f"document {i:03d}", dedupe_id=f"q/{input_id}/{i}")
                                                        for i in range(100)])
    added = harness.owner.tenant(tenant.id)["stored_bytes"] - before
    api.delete_queue("scratch")
    harness.services.queues.resume_removals(tenant.id)  # its bytes come back when its removal is done
    markers = harness.owner.tenant(tenant.id)["stored_bytes"] - before
    assert 0 < markers < added, "only the de-duplication markers stay, until they expire"
    return int(added)


def test_a_refused_flush_fails_the_execution_and_its_retry_stores_each_output_once(
        harness: Harness, tenant: Tenant) -> None:
    """The second request of 100 passes the tenant's quota (507): the execution fails and
    nacks its batch. Once the quota is raised, the retry's first 100 outputs are recognised
    by their dedupe ids and the rest are stored: 250 outputs, none twice.

    Nothing goes through the HTTP send before the quota is set: a node reads a
    tenant's quota again only every few seconds."""
    api = tenant.api
    api.put_queue("in", max_redeliveries=1000)
    api.put_queue("out")
    harness.services.queues.send(tenant.id, "in", [msg(f"document {i:03d}") for i in range(250)])
    per_100 = _bytes_of_100_outputs(harness, tenant, next(iter(api.browse("in")))["id"])
    stored = harness.owner.tenant(tenant.id)["stored_bytes"]
    harness.owner.update_tenant(tenant.id, disk_quota_bytes=stored + per_100 * 3 // 2)
    api.request("PUT", "/v1/listeners/q", {"queue": "in", "process": "forward", "batch_size": 250,
                                           "settings": {"to": "out"}})
    drive(harness, tenant, lambda: api.request("GET", "/v1/listeners/q")["failures"] >= 1, "a refused flush")
    assert "QuotaExceeded" in api.request("GET", "/v1/listeners/q")["last_error"]
    assert api.queue("out")["depth"] == 100
    harness.owner.update_tenant(tenant.id, disk_quota_bytes=0)
    drive(harness, tenant, lambda: api.queue("in")["depth"] + api.queue("in")["in_flight"] == 0,
          "the retry to finish", timeout=30)
    assert sorted(texts(api, "out")) == sorted(f"document {i:03d}" for i in range(250))
    assert api.queue("in")["dead_letters"] == 0


# -- tokens ---------------------------------------------------------------------------------


def _manual_execution(harness: Harness, tenant: Tenant, listener: str, queue: str) -> tuple[str, str]:
    """Schedules one execution by hand, as a supervisor round would; its id and token."""
    store = harness.supervisor.listeners
    ((execution_id,), _), = store.schedule_all([ScheduleCall(
        tenant.id, listener, store.get(tenant.id, listener).spec, k.TenantKeys(tenant.id).queue(queue).destination(),
        "xmanual")], 60_000)
    return execution_id, harness.services.tenants.execution_tokens.mint(tenant.id, listener, execution_id, 60)


def _forwarding_execution(harness: Harness, tenant: Tenant) -> tuple[str, str]:
    """Listener ``t`` forwarding ``in`` (which holds one message, "x") to ``out``, and one execution
    of it scheduled by hand: the execution's id and its token."""
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.send_texts("in", ["x"])
    api.request("PUT", "/v1/listeners/t", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    return _manual_execution(harness, tenant, "t", "in")


def test_a_spark_listeners_batch_may_pass_one_get_and_keeps_the_send_order(harness: Harness, tenant: Tenant) -> None:
    """A Spark listener takes up to 10,000 messages an execution (a fork one 1,000): its start takes
    them by gets of 1,000 from the exclusive queue, oldest first, and its finish acks them all."""
    api = tenant.api
    api.put_queue("in", access="exclusive")
    api.put_queue("out")
    body = {"queue": "in", "process": "forward", "batch_size": defaults.MAX_LISTENER_BATCH_SIZE + 1,
            "settings": {"to": "out"}}
    with pytest.raises(InvalidInput) as fork_batch:
        api.request("PUT", "/v1/listeners/big", body)
    assert fork_batch.value.details["field"] == "batch_size"
    with pytest.raises(InvalidInput):
        api.request("PUT", "/v1/listeners/big", {**body, "engine": "spark",
                                                  "batch_size": defaults.MAX_SPARK_LISTENER_BATCH_SIZE + 1})
    api.request("PUT", "/v1/listeners/big", {**body, "engine": "spark", "batch_size": 2500})
    texts = [f"m{i}" for i in range(2600)]
    for first in range(0, len(texts), 1000):
        api.send_texts("in", texts[first:first + 1000])
    store = harness.supervisor.listeners
    ((execution_id, *_), _), = store.schedule_all([ScheduleCall(
        tenant.id, "big", store.get(tenant.id, "big").spec, k.TenantKeys(tenant.id).queue("in").destination(),
        "xmanual")], 60_000)
    token = harness.services.tenants.execution_tokens.mint(tenant.id, "big", execution_id, 60)
    base = f"/v1/listeners/big/executions/{execution_id}"
    with AtomqClient(harness.url, token) as horse:
        started = horse.request("POST", f"{base}/start")
        taken = [wire.document_bytes(m["documents"][0]).decode() for m in started["messages"]]
        assert taken == texts[:2500]
        assert horse.request("POST", f"{base}/finish", {"ok": True, "processed": [
            m["id"] for m in started["messages"]]}) == {"acked": 2500, "requeued": 0, "dead_lettered": 0}
    assert api.queue("in")["depth"] == 100


def test_a_finish_names_what_is_wrong_with_its_processed_ids_and_settles_nothing(
        harness: Harness, tenant: Tenant) -> None:
    """The ids a finish says it processed are strings, at most a batch of them; a finish that
    breaks that gets 400 naming the field, and the batch waits for a finish that does not."""
    api = tenant.api
    execution_id, token = _forwarding_execution(harness, tenant)
    base = f"/v1/listeners/t/executions/{execution_id}"
    with AtomqClient(harness.url, token) as horse:
        started = horse.request("POST", f"{base}/start")
        message_id = started["messages"][0]["id"]
        for processed, field in (([message_id, 7], "1"), ([message_id] * (defaults.MAX_SPARK_LISTENER_BATCH_SIZE + 1), None),
                                 ("not a list", None)):
            with pytest.raises(InvalidInput) as bad:
                horse.request("POST", f"{base}/finish", {"ok": True, "processed": processed})
            problems = bad.value.details["fields"]["json"]["processed"]
            assert (field in problems) if field is not None else problems, problems
        assert api.queue("in")["in_flight"] == 1, "nothing settled"
        assert horse.request("POST", f"{base}/finish", {"ok": True, "processed": [message_id]}) == {
            "acked": 1, "requeued": 0, "dead_lettered": 0}


def test_an_execution_token_is_good_only_for_its_own_execution_and_only_while_it_runs(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    execution_id, token = _forwarding_execution(harness, tenant)
    base = f"/v1/listeners/t/executions/{execution_id}"
    with AtomqClient(harness.url, token) as horse:
        for method, path in (("GET", "/v1/queues"), ("GET", "/v1/listeners"),
                             ("POST", "/v1/listeners/t/pause"), ("POST", "/v1/queues/in/get"),
                             ("POST", "/v1/queues/in/ack"), ("POST", "/v1/queues/in/extend"),
                             ("DELETE", "/v1/queues/in"), ("GET", "/v1/tenants")):
            with pytest.raises(Forbidden):
                horse.request(method, path, {"ids": ["1-1"]} if path.endswith(("ack", "extend")) else None)
        with pytest.raises(Forbidden):
            horse.request("POST", "/v1/listeners/t/executions/xother/start")
        assert [m["documents"][0]["data"] for m in horse.browse("in")] == ["x"], "browsing (a checkpoint) is allowed"
        started = horse.request("POST", f"{base}/start")
        assert started["run"] and [m["documents"][0]["data"] for m in started["messages"]] == ["x"]
        assert horse.request("POST", f"{base}/start") == {"run": False, "messages": []}  # once only
        assert horse.request("POST", f"{base}/extend") == {"extended": 1}
        assert horse.send_texts("out", ["sent with a token"])
        holder = harness.supervisor.holder
        assert Lease(harness.services.queues.storage, lk.listener_lease_name(tenant.id, "t"), holder, 60).acquire()
        wake = lk.listener_wake_key(holder)
        harness.services.queues.client.delete(wake)
        finished = horse.request("POST", f"{base}/finish", {"ok": True, "processed": [started["messages"][0]["id"]]})
        assert finished == {"acked": 1, "requeued": 0, "dead_lettered": 0}
        assert harness.services.queues.client.lrange(wake, 0, -1) == [b"1"], "the listener's supervisor woken"
        for method, path, body in (("POST", f"{base}/finish", {"ok": True}), ("POST", f"{base}/extend", None),
                                   ("POST", "/v1/queues/out/messages", {"messages": [{"documents": [{"data": "late"}]}]})):
            with pytest.raises(Unauthorized):  # the execution is over: so is its token
                horse.request(method, path, body)
    assert api.queue("in")["depth"] + api.queue("in")["in_flight"] == 0
    assert api.queue("out")["depth"] == 1
    with pytest.raises(Forbidden):
        api.request("POST", f"{base}/start")  # a tenant key is no execution token
    tokens = harness.services.tenants.execution_tokens
    for bad in (tokens.mint(tenant.id, "t", execution_id, -1), token[:-2] + "xx", "aqx_garbage", "aqx_é.é"):
        with AtomqClient(harness.url, bad) as horse:
            with pytest.raises(Unauthorized):
                horse.request("POST", f"{base}/start")


@pytest.mark.parametrize("change", ["delete", "redeploy"])
def test_finish_settles_the_batch_the_execution_took_whatever_became_of_its_listener(
        harness: Harness, tenant: Tenant, change: str) -> None:
    api = tenant.api
    for name in ("in", "elsewhere", "out"):
        api.put_queue(name)
    api.send_texts("in", ["taken"])
    api.request("PUT", "/v1/listeners/moving", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    execution_id, token = _manual_execution(harness, tenant, "moving", "in")
    base = f"/v1/listeners/moving/executions/{execution_id}"
    with AtomqClient(harness.url, token) as horse:
        started = horse.request("POST", f"{base}/start")
        if change == "delete":
            api.request("DELETE", "/v1/listeners/moving")
        else:
            api.request("PUT", "/v1/listeners/moving", {"queue": "elsewhere", "process": "forward",
                                                        "settings": {"to": "out"}})
        finished = horse.request("POST", f"{base}/finish", {"ok": True, "processed": [started["messages"][0]["id"]]})
    assert finished["acked"] == 1
    assert (api.queue("in")["depth"], api.queue("in")["in_flight"]) == (0, 0)


def test_a_rate_limited_execution_gives_its_batch_back_without_a_failed_delivery_and_backs_off(
        harness: Harness) -> None:
    created = harness.owner.create_tenant("limited", rate_limit_per_minute=1)
    with AtomqClient(harness.url, created["api_key"]) as api:
        tenant = Tenant(created["id"], api)
        api.put_queue("in")
        api.put_queue("out")
        harness.services.queues.send(tenant.id, "in", [msg(f"m{i}") for i in range(150)])
        api.request("PUT", "/v1/listeners/lim", {"queue": "in", "process": "forward", "batch_size": 150,
                                                 "settings": {"to": "out"}})
        drive(harness, tenant, lambda: api.request("GET", "/v1/listeners/lim")["failures"] == 1, "the refusal")
        listener = api.request("GET", "/v1/listeners/lim")
        assert "RateLimited" in listener["last_error"] and listener["outstanding"] == 0
        assert api.queue("out")["depth"] == 100  # the first request of 100 got through, the second did not
        queue_in = api.queue("in")
        assert (queue_in["depth"], queue_in["in_flight"], queue_in["dead_letters"]) == (150, 0, 0)
        assert {m["failed_deliveries"] for m in api.browse("in")} == {0}
        harness.services.queues.maintain(tenant.id)
        harness.supervisor.round()
        assert work(harness, tenant) == 0  # the listener waits for the window to close


def test_another_tenants_listener_names_are_not_found(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/mine", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    other = harness.owner.create_tenant("other")
    with AtomqClient(harness.url, other["api_key"]) as stranger:
        assert stranger.request("GET", "/v1/listeners") == {"listeners": [], "next": None}
        for method, path in (("GET", "/v1/listeners/mine"), ("POST", "/v1/listeners/mine/pause"),
                             ("POST", "/v1/listeners/mine/resume"), ("POST", "/v1/listeners/mine/restart"),
                             ("DELETE", "/v1/listeners/mine")):
            with pytest.raises(NotFound):
                stranger.request(method, path)
        with pytest.raises(NotFound):  # its own queue "in" does not exist: another tenant's does not count
            stranger.request("PUT", "/v1/listeners/mine", {"queue": "in", "process": "forward",
                                                           "settings": {"to": "out"}})
    assert api.request("GET", "/v1/listeners/mine")["state"] == "running"


# -- lost executions, restart -----------------------------------------------------------------


def _execution_dies_after_taking_its_batch(harness: Harness, tenant: Tenant, listener: str) -> None:
    """A supervisor round schedules the listener's one execution; a work horse takes its batch
    and dies with its job (rq keeps no trace of it)."""
    assert harness.supervisor.round() >= 1
    (job_id,) = Queue(lk.rq_queue_name(tenant.id), connection=harness.rq).job_ids
    token = harness.services.tenants.execution_tokens.mint(tenant.id, listener, job_id, 60)
    with AtomqClient(harness.url, token) as horse:
        assert horse.request("POST", f"/v1/listeners/{listener}/executions/{job_id}/start")["run"]
    Queue(lk.rq_queue_name(tenant.id), connection=harness.rq).empty()
    harness.rq.delete(f"rq:job:{job_id}")


def test_an_execution_whose_work_horse_died_is_counted_lost_and_restart_clears_the_error(
        harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in", ack_timeout_s=0.5)
    api.put_queue("out")
    api.send_texts("in", ["survivor"])
    api.request("PUT", "/v1/listeners/lost", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    _execution_dies_after_taking_its_batch(harness, tenant, "lost")
    harness.supervisor.round()
    queue_in = api.queue("in")
    assert (queue_in["in_flight"], queue_in["scheduled"]) == (0, 1), "its batch failed at once, not at its deadline"
    listener = api.request("GET", "/v1/listeners/lost")
    assert (listener["state"], listener["failures"], listener["outstanding"]) == ("error", 1, 0)
    assert "did not finish" in listener["last_error"]
    drive(harness, tenant, lambda: api.queue("out")["depth"] == 1, "the batch to come back and be forwarded")
    assert texts(api, "out") == ["survivor"]
    assert api.request("GET", "/v1/listeners/lost")["state"] == "running"  # a success ends the error state
    restarted = api.request("POST", "/v1/listeners/lost/restart")
    assert (restarted["state"], restarted["last_error"]) == ("running", "")


def test_a_dead_work_horse_whose_queue_went_meanwhile_does_not_stop_the_round(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("gone")
    api.put_queue("out")
    api.send_texts("gone", ["x"])
    api.request("PUT", "/v1/listeners/orphan", {"queue": "gone", "process": "forward", "settings": {"to": "out"}})
    _execution_dies_after_taking_its_batch(harness, tenant, "orphan")
    api.request("DELETE", "/v1/queues/gone")
    harness.supervisor.round()  # the batch cannot be failed: logged, and the round goes on
    assert api.request("GET", "/v1/listeners/orphan")["failures"] == 1


def test_deleting_a_listener_stops_its_executions(harness: Harness, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/gone", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    api.send_texts("in", ["stays"])
    harness.supervisor.round()
    api.request("DELETE", "/v1/listeners/gone")
    with pytest.raises(NotFound):
        api.request("GET", "/v1/listeners/gone")
    work(harness, tenant)  # the scheduled job finds its listener gone and takes nothing
    harness.supervisor.round()
    assert work(harness, tenant) == 0
    assert (api.queue("in")["depth"], api.queue("out")["depth"]) == (1, 0)
    assert not harness.rq.keys(f"{k.tenant_prefix(tenant.id)}:l:gone:*")


# -- the round-robin worker -------------------------------------------------------------------


RAN: list[str] = []


def record(label: str) -> None:
    RAN.append(label)


class InProcessTenantWorker(TenantQueues, SimpleWorker):
    """TenantWorker's queue choice with SimpleWorker's in-process execution, to watch the order."""


def test_the_worker_takes_tenant_queues_round_robin(harness: Harness) -> None:
    RAN.clear()
    rq = harness.rq
    busy, quiet = "t_roundrobin01", "t_roundrobin02"
    for tenant_id, count in ((busy, 6), (quiet, 2)):
        rq.sadd(lk.RQ_TENANTS_KEY, tenant_id)
        queue = Queue(lk.rq_queue_name(tenant_id), connection=rq)
        for i in range(count):
            queue.enqueue_call(record, args=(f"{tenant_id[-1]}{i}",), result_ttl=0)
    try:
        run_worker(rq, burst=True, worker_class=InProcessTenantWorker)
    finally:
        rq.srem(lk.RQ_TENANTS_KEY, busy, quiet)
    mine = [r for r in RAN if r[0] in "12"]
    assert mine[:4] in (["10", "20", "11", "21"], ["20", "10", "21", "11"])
    assert sorted(mine) == ["10", "11", "12", "13", "14", "15", "20", "21"]


def test_deleting_a_tenant_drops_its_listeners_and_its_rq_queue(harness: Harness) -> None:
    created = harness.owner.create_tenant("short-lived")
    with AtomqClient(harness.url, created["api_key"]) as api:
        api.put_queue("in")
        api.put_queue("out")
        api.request("PUT", "/v1/listeners/l", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
        api.send_texts("in", ["never run"])
    harness.supervisor.round()
    queue = Queue(lk.rq_queue_name(created["id"]), connection=harness.rq)
    assert queue.count == 1
    harness.owner.delete_tenant(created["id"])
    pruning = Supervisor(harness.services.queues, harness.services.tenants.execution_tokens, harness.rq,
                         SupervisorConfig(api_url=harness.url, prune_interval_s=0), holder="pruner",
                         tenant_exists=harness.services.tenants.exists)
    pruning.round()
    assert created["id"].encode() not in harness.rq.smembers(lk.RQ_TENANTS_KEY)
    assert queue.count == 0
    assert created["id"] not in harness.services.listeners.tenants()


# -- waiting for a worker ---------------------------------------------------------------------


def test_spark_listeners_are_counted_for_the_nodes_that_start_spark_workers(harness: Harness) -> None:
    store = harness.services.listeners
    created = harness.owner.create_tenant("spark-count")
    count_key = lk.tenant_spark_listeners(created["id"])
    before = store.spark_listener_count()
    spark = {"queue": "in", "process": "forward", "engine": "spark", "settings": {"to": "out"}}
    with AtomqClient(harness.url, created["api_key"]) as api:
        api.put_queue("in")
        api.put_queue("out")
        api.request("PUT", "/v1/listeners/s1", spark)
        api.request("PUT", "/v1/listeners/s1", spark)  # a redeploy counts once
        api.request("PUT", "/v1/listeners/s2", spark)
        api.request("PUT", "/v1/listeners/f1", {**spark, "engine": "fork"})
        assert (int(harness.rq.get(count_key)), store.spark_listener_count()) == (2, before + 2)
        api.request("PUT", "/v1/listeners/s2", {**spark, "engine": "fork"})  # spark -> fork
        api.request("DELETE", "/v1/listeners/s1")
        api.request("DELETE", "/v1/listeners/f1")
        assert (int(harness.rq.get(count_key)), store.spark_listener_count()) == (0, before)
        api.request("PUT", "/v1/listeners/s2", spark)  # fork -> spark
        assert store.spark_listener_count() == before + 1
    assert created["id"].encode() in harness.rq.smembers(lk.SPARK_LISTENER_TENANTS_KEY)
    harness.owner.delete_tenant(created["id"])
    assert store.spark_listener_count() == before
    # A deleted tenant never deploys again: the nodes stop reading its counter.
    assert created["id"].encode() not in harness.rq.smembers(lk.SPARK_LISTENER_TENANTS_KEY)


def test_a_listener_waits_while_no_worker_of_its_engine_is_alive_and_runs_once_one_is(
        harness: Harness, tenant: Tenant) -> None:
    from rq import Worker

    from atomq.workers import liveness

    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/f", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    api.request("PUT", "/v1/listeners/s", {"queue": "in", "process": "forward", "engine": "spark",
                                           "settings": {"to": "out"}})
    api.request("PUT", "/v1/listeners/p", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    api.request("POST", "/v1/listeners/p/pause")
    watching = Supervisor(harness.services.queues, harness.services.tenants.execution_tokens, harness.rq,
                          SupervisorConfig(api_url=harness.url, worker_liveness=True), holder="watcher",
                          tenant_exists=harness.services.tenants.exists)
    assert watching.liveness is not None
    watching.liveness.check_interval_s = 0

    def states() -> dict[str, tuple[str, str]]:
        watching.round()
        return {x["name"]: (x["state"], x["last_error"]) for x in api.listeners()}

    try:
        assert states() == {"f": ("waiting", liveness.FORK_MISSING), "s": ("waiting", liveness.SPARK_MISSING),
                            "p": ("paused", "")}
        # A node whose Spark worker cannot start says why, and its listeners say so too.
        problems = liveness.WorkerProblems(harness.services.queues.storage)
        problems.put("n_test", liveness.WorkerProblem("spark", "failed", "no Java runtime was found", time.time()))
        assert states()["s"] == ("waiting", "no Spark worker is running: no Java runtime was found")
        # A worker anywhere that heartbeats ends the wait.
        liveness.spark_heartbeat(harness.rq, "spark-test-worker")
        fork_worker = Worker([Queue(lk.rq_queue_name(tenant.id), connection=harness.rq)], connection=harness.rq,
                             name=f"fork-test-{tenant.id}")
        fork_worker.register_birth()
        assert states() == {"f": ("running", ""), "s": ("running", ""), "p": ("paused", "")}
        api.request("POST", "/v1/listeners/p/resume")
        assert states()["p"] == ("running", "")
        # ... and when the workers are gone it waits again, keeping what it was before.
        harness.services.queues.client.hset(lk.ListenerKeys(tenant.id, "f").stat,
                                            mapping={"state": "error", "last_error": "an execution failed"})
        fork_worker.register_death()
        liveness.spark_gone(harness.rq, "spark-test-worker")
        assert states()["f"] == ("waiting", liveness.FORK_MISSING)
        assert states()["s"] == ("waiting", "no Spark worker is running: no Java runtime was found")
        fork_worker.register_birth()
        assert states()["f"] == ("error", "an execution failed"), "its failure is not lost to the wait"
        fork_worker.register_death()
    finally:
        harness.services.queues.client.delete(lk.WORKER_PROBLEMS_KEY)
        harness.rq.delete(lk.SPARK_WORKERS_KEY)
        watching.release_all()


def test_a_listener_keeps_its_last_ten_failures_with_their_errors(qs: QueueServer) -> None:
    """What a listener's page lists: the newest first, the older ones gone, whatever the order
    within one millisecond."""
    store = ListenerStore(qs.storage)
    tenant = f"t_{secrets.token_hex(6)}"
    qs.put_queue(tenant, "in", "point_to_point")
    qs.send_batch(tenant, "in", [msg(f"m{i}") for i in range(12)])
    store.put(tenant, "picky", ListenerSpec(queue="in", process="forward", batch_size=1, settings={"to": "x"}))
    (executions, _), = store.schedule_all([ScheduleCall(tenant, "picky", store.get(tenant, "picky").spec,
                                                        k.TenantKeys(tenant).queue("in").destination(), "xf")], 60_000)
    assert len(executions) >= 12
    for i, scheduled in enumerate(executions[:12]):
        assert store.finish(tenant, "picky", scheduled, "failed", f"boom {i}")
    listener = store.get(tenant, "picky")
    assert listener.failures == 12
    assert [error for _, error in listener.recent_failures] == [f"boom {i}" for i in range(11, 1, -1)]
    assert all(at > 0 for at, _ in listener.recent_failures)


def test_a_worker_that_starts_is_seen_at_the_next_round_not_seconds_later(valkey) -> None:
    """Liveness is read again every 0.1 s while an engine has no worker (and every 2 s while it has
    one): in a node's first seconds its listeners read "waiting" no longer than a round after its
    workers start, not after they ran the listeners' executions. The clock is the test's."""
    from rq import Worker

    from atomq.platform.store.storage import Storage
    from atomq.workers import liveness

    rq = valkey.client(db=9)  # a registry of rq workers of this test's own
    now = [1000.0]
    watch = liveness.WorkerLiveness(rq, liveness.WorkerProblems(Storage(rq)), clock=lambda: now[0])
    try:
        assert watch.waiting_for("fork") == liveness.FORK_MISSING
        worker = Worker([Queue(lk.rq_queue_name("t_000000000abc"), connection=rq)], connection=rq, name="starting")
        worker.register_birth()
        now[0] += liveness.MISSING_RECHECK_S
        assert watch.waiting_for("fork") == ""
        worker.register_death()
        now[0] += liveness.CHECK_INTERVAL_S / 2
        assert watch.waiting_for("fork") == "", "while a worker lives, what was read stands for 2 s"
        now[0] += liveness.CHECK_INTERVAL_S / 2
        assert watch.waiting_for("fork") == liveness.FORK_MISSING
    finally:
        rq.flushdb()
        rq.close()
