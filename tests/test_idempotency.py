"""A retried send stores once: the store client's own retries after a time-out, and a sender's retry
with the same Idempotency-Key, answer with what the first try stored.

The store is really paused (SIGSTOP of a Valkey this test started, or of the cluster master that
holds the test's tenant) while a send is on its way, so that its script waits in the store's input
and the client times out and sends it again: without the request's token each of those sends would
be stored once the store runs again.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.connection

from atomq.errors import Conflict, InvalidInput, OutcomeUnknown
from atomq.platform import QueueServer
from atomq.platform.store.connection import open_redis
from atomq.platform.store.embedded import EmbeddedValkey
from support.audit import assert_audit_clean
from support.in_process_app import InProcessApp, error_of, send_body, strict_loads
from support.ports import free_port
from support.queues import FAST, msg
from support.valkey_cluster import ValkeyCluster
from support.waiting import wait_until


def test_a_repeated_key_answers_the_first_send_and_stores_nothing_more(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point")
    batch = [msg("a"), msg("b", dedupe_id="d1"), msg("c")]
    first = qs.send_batch(tenant, "orders", batch, idempotency_key="order-17")
    again = qs.send_batch(tenant, "orders", batch, idempotency_key="order-17")
    assert again == first and len(first.ids) == 3
    assert [m.id for m in qs.browse(tenant, "orders").items] == first.ids
    other = qs.send_batch(tenant, "orders", batch[:1], idempotency_key="order-18")
    assert qs.get_queue(tenant, "orders").depth == 4 and other.ids[0] not in first.ids


def test_a_key_names_one_request_only(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point")
    qs.put_queue(tenant, "audit", "point_to_point")
    qs.send(tenant, "orders", [msg("a")], idempotency_key="k1")
    for queue, batch in (("orders", [msg("b")]), ("orders", [msg("a"), msg("a")]), ("audit", [msg("a")])):
        with pytest.raises(Conflict) as refused:
            qs.send(tenant, queue, batch, idempotency_key="k1")
        assert refused.value.code == "idempotency_key_reused"
    assert qs.get_queue(tenant, "orders").depth == 1 and qs.get_queue(tenant, "audit").depth == 0


@pytest.mark.parametrize("key", ["", "x" * 129, "caf\u00e9", "tab\there"])
def test_a_key_is_1_to_128_printable_ascii_characters(qs: QueueServer, tenant: str, key: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point")
    with pytest.raises(InvalidInput) as refused:
        qs.send(tenant, "orders", [msg("a")], idempotency_key=key)
    assert refused.value.details["field"] == "Idempotency-Key"
    assert qs.get_queue(tenant, "orders").depth == 0


def test_a_refused_send_leaves_its_key_free_for_the_retry(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point", max_messages=1)
    qs.send(tenant, "orders", [msg("first")])
    with pytest.raises(Exception) as refused:
        qs.send(tenant, "orders", [msg("a")], idempotency_key="k")
    assert getattr(refused.value, "code", "") == "queue_full"
    qs.ack(tenant, "orders", ids=[d.id for d in qs.get(tenant, "orders", max_messages=1)])
    ids = qs.send(tenant, "orders", [msg("a")], idempotency_key="k")
    assert qs.send(tenant, "orders", [msg("a")], idempotency_key="k") == ids
    assert [m.id for m in qs.browse(tenant, "orders").items] == ids


def test_a_publish_retried_with_its_key_stores_only_what_no_try_stored(qs: QueueServer, tenant: str) -> None:
    """The retry groups its messages otherwise than the first try (a queue attracting one of the
    topics came in between): what the first stored is still not stored again."""
    qs.put_queue(tenant, "eu", "point_to_point", topics=["orders/eu/>"])
    qs.put_queue(tenant, "us", "point_to_point", topics=["orders/us/>"])
    topics = ["orders/eu/1", "orders/us/2", "orders/eu/3"]
    batch = [msg("1"), msg("2"), msg("3")]
    first = qs.publish_many(tenant, topics, batch, idempotency_key="p1")
    qs.put_queue(tenant, "all", "point_to_point", topics=["orders/>"])
    again = qs.publish_many(tenant, topics, batch, idempotency_key="p1")
    assert again.ids == first.ids and None not in first.ids
    assert [m.id for m in qs.browse(tenant, "eu").items] == [first.ids[0], first.ids[2]]
    assert [m.id for m in qs.browse(tenant, "us").items] == [first.ids[1]]
    assert qs.get_queue(tenant, "all").depth == 0
    assert qs.publish(tenant, "orders/us/9", [msg("9")], idempotency_key="p2").queues == ["all", "us"]
    assert qs.publish(tenant, "orders/us/9", [msg("9")], idempotency_key="p2").queues == ["all", "us"]
    assert qs.get_queue(tenant, "all").depth == 1 and qs.get_queue(tenant, "us").depth == 2


def test_a_repeat_answers_the_copies_the_first_try_made_whatever_the_subscribers_are_now(
        qs: QueueServer, tenant: str) -> None:
    """A send or publish that reached a publish/subscribe queue without subscribers stored nowhere;
    repeated with its key after a subscriber came, it still answers so, and stores nothing for it."""
    qs.put_queue(tenant, "news", "publish_subscribe", topics=["news/>"])
    first = qs.send_batch(tenant, "news", [msg("a"), msg("b")], idempotency_key="n1")
    assert len(first.ids) == 2 and (first.destinations, first.copies) == (0, 0)
    published = qs.publish(tenant, "news/eu", [msg("c")], idempotency_key="n2")
    assert (published.queues, published.copies) == (["news"], 0)
    qs.put_subscriber(tenant, "news", "late")
    assert qs.send_batch(tenant, "news", [msg("a"), msg("b")], idempotency_key="n1") == first
    assert qs.publish(tenant, "news/eu", [msg("c")], idempotency_key="n2") == published
    assert qs.get_queue(tenant, "news").depth == 0, "the late subscriber got none of them"
    assert qs.send_batch(tenant, "news", [msg("d")], idempotency_key="n3").copies == 1
    assert qs.publish(tenant, "news/eu", [msg("e"), msg("f")], idempotency_key="n4").copies == 2


def test_a_keyed_send_counts_against_the_quota_while_its_key_is_kept(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "orders", "point_to_point")
    qs.send(tenant, "orders", [msg("a")])
    plain = qs.usage(tenant)["stored_bytes"]
    qs.send(tenant, "orders", [msg("a")], idempotency_key="k")
    assert qs.usage(tenant)["stored_bytes"] > 2 * plain


# The store paused under a send.


@pytest.fixture
def paused_store(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    """A Valkey of this test's own, which it pauses; continued whatever the test did, and then its
    tenants pass the audit."""
    server = EmbeddedValkey(tmp_path / "valkey", port=free_port())
    server.start()
    yield server
    assert server.pid is not None
    os.kill(server.pid, signal.SIGCONT)
    with server.client() as client:
        assert_audit_clean(client)
    server.stop()


class ScriptSends:
    """Counts the scripts the store's clients send (EVALSHA), and the commands sent after the first
    (a retry on a new connection starts with its handshake), across connections; with ``thread``
    set, only the commands that thread sends (no other thread's command passes for a retry)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.after_first = 0
        self.thread: threading.Thread | None = None
        original = redis.connection.AbstractConnection.send_packed_command

        def counted(conn: Any, command: Any, *args: Any, **kwargs: Any) -> None:
            if self.thread is not None and threading.current_thread() is not self.thread:
                original(conn, command, *args, **kwargs)
                return
            if self.count:
                self.after_first += 1
            data = command if isinstance(command, (bytes, str)) else b"".join(
                c if isinstance(c, bytes) else bytes(c) for c in command)
            if b"EVALSHA" in (data.encode() if isinstance(data, str) else data)[:64]:
                self.count += 1
            original(conn, command, *args, **kwargs)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)


def paused_while(pid: int, sends: ScriptSends, call: Callable[[], Any], at: tuple[Any, str] | None = None) -> Any:
    """Runs ``call`` with the store (process ``pid``) stopped until the client has sent its script
    and, that try timed out, begun another on a new connection; then lets the store go on, which
    runs the first try's script waiting in its input, and the retry's. With ``at`` (a ``Storage``
    and a script's name), the store stops just as that script is run: the reads before it answer."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except Exception as exc:  # handed to the test
            result["error"] = exc

    sends.count = sends.after_first = 0
    if at is None:
        os.kill(pid, signal.SIGSTOP)
    else:
        storage, script = at
        original = storage.run

        def stopping(name: str, *args: Any, **kwargs: Any) -> Any:
            if name == script:
                storage.run = original
                os.kill(pid, signal.SIGSTOP)
            return original(name, *args, **kwargs)

        storage.run = stopping
    worker = threading.Thread(target=run)
    sends.thread = worker
    try:
        worker.start()
        wait_until(lambda: sends.after_first > 0, 20, "the client to try again after a time-out")
    finally:
        os.kill(pid, signal.SIGCONT)
    worker.join(30)
    assert not worker.is_alive()
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_the_store_clients_retry_after_a_time_out_stores_a_send_once(
        paused_store: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """redis-py's default retry (as ``EmbeddedValkey.client()`` and ``open_redis`` make it) sends the
    script again on a new connection; the store runs both once it goes on."""
    client = paused_store.client(socket_timeout=0.2)
    qs = QueueServer(client, FAST)
    qs.put_queue("t_000000000001", "orders", "point_to_point")
    first = qs.send("t_000000000001", "orders", [msg("first")])  # the node knows the queue's route
    sends = ScriptSends(monkeypatch)
    batch = [msg(f"m{i}") for i in range(50)]
    assert paused_store.pid is not None
    ids = paused_while(paused_store.pid, sends, lambda: qs.send("t_000000000001", "orders", batch))
    assert sends.count >= 2 and len(ids) == 50  # sent again, stored once
    assert [m.id for m in qs.browse("t_000000000001", "orders", limit=100).items] == first + ids
    client.close()


def test_a_publish_to_many_topics_is_stored_once_through_the_clients_retries(
        paused_store: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    client = paused_store.client(socket_timeout=0.2)
    qs = QueueServer(client, FAST)
    tenant = "t_000000000002"
    for q in range(5):
        qs.put_queue(tenant, f"q{q}", "point_to_point", topics=[f"fan/{q}/>", "fan/all"])
    topics = [f"fan/{i % 5}/x" for i in range(40)] + ["fan/all"] * 10
    qs.publish_many(tenant, topics, [msg("warm")] * 50, idempotency_key="routes")  # the node knows the routes
    for q in range(5):
        qs.delete_messages(tenant, f"q{q}", all=True)
    sends = ScriptSends(monkeypatch)
    assert paused_store.pid is not None
    done = paused_while(paused_store.pid, sends,
                        lambda: qs.publish_many(tenant, topics, [msg(str(i)) for i in range(50)]))
    assert None not in done.ids
    for q in range(5):
        held = [m.id for m in qs.browse(tenant, f"q{q}", limit=100).items]
        assert held == [done.ids[i] for i in range(40) if i % 5 == q] + done.ids[40:]


def check_get_and_settle_once(qs: QueueServer, tenant: str, pid: int, sends: ScriptSends) -> None:
    """A get, an ack, a nack and a resend each sent again by the store's client after a time-out:
    the get answers the deliveries it made (none counts a delivery nobody got), and each settles
    what it names once and answers as it did."""
    qs.put_queue(tenant, "orders", "point_to_point", max_redeliveries=0)
    ids = qs.send(tenant, "orders", [msg(str(i)) for i in range(6)])
    # Each call reads its queue's dead letter target before its script: the store stops just as the
    # script is run.
    got = paused_while(pid, sends, lambda: qs.get(tenant, "orders", max_messages=4), at=(qs.storage, "get"))
    assert sends.count >= 2
    assert [d.id for d in got] == ids[:4] and [d.delivery_count for d in got] == [1] * 4
    info = qs.get_queue(tenant, "orders")
    assert (info.depth, info.in_flight) == (2, 4)
    assert paused_while(pid, sends, lambda: qs.ack(tenant, "orders", receipts=[d.receipt for d in got[:2]]),
                        at=(qs.storage, "settle")) == 2
    nacked = paused_while(pid, sends, lambda: qs.nack(tenant, "orders", receipts=[d.receipt for d in got[2:]],
                                                      reason="bad"), at=(qs.storage, "settle"))
    assert (nacked.requeued, nacked.dead_lettered) == (0, 2)
    assert paused_while(pid, sends, lambda: qs.resend_dead_letters(tenant, "orders", ids=ids[2:4]),
                        at=(qs.storage, "manage")) == 2
    info = qs.get_queue(tenant, "orders")
    assert (info.depth, info.in_flight, info.dead_letters) == (4, 0, 0)
    rest = qs.get(tenant, "orders", max_messages=10)
    assert sorted(d.id for d in rest) == sorted(ids[2:]) and qs.ack(tenant, "orders", ids=[d.id for d in rest]) == 4
    assert qs.get_queue(tenant, "orders").depth == 0


def test_a_get_an_ack_a_nack_and_a_resend_sent_again_by_the_stores_client_act_once(
        paused_store: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    client = paused_store.client(socket_timeout=0.2)
    qs = QueueServer(client, FAST)
    assert paused_store.pid is not None
    check_get_and_settle_once(qs, "t_000000000004", paused_store.pid, ScriptSends(monkeypatch))
    client.close()


def close_cluster_client(client: Any) -> None:
    """Closes a cluster client whose calls timed out: redis-py's cluster client, reading the slots
    again after a time-out, drops the connections it held without closing them. They are collected
    here, not in whichever test runs when the collector next runs (where their ResourceWarning
    would fail that test)."""
    client.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def test_a_get_and_settles_on_the_cluster_act_once_through_the_clients_retries(
        valkey_cluster: ValkeyCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    tenant = valkey_cluster.tenant_on(2)
    client = open_redis(valkey_cluster.url, socket_timeout=0.2)
    qs = QueueServer(client, FAST)
    try:
        check_get_and_settle_once(qs, tenant, valkey_cluster.master_pid_of(tenant), ScriptSends(monkeypatch))
    finally:
        qs.delete_queue(tenant, "orders")
        close_cluster_client(client)


def test_a_send_on_the_cluster_is_stored_once_through_the_clients_retries(
        valkey_cluster: ValkeyCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master of the tenant's slot is paused for well under the cluster's node time-out."""
    tenant = valkey_cluster.tenant_on(1)
    client = open_redis(valkey_cluster.url, socket_timeout=0.2)
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "orders", "point_to_point")
    first = qs.send(tenant, "orders", [msg("first")])  # the node knows the queue's route
    sends = ScriptSends(monkeypatch)
    batch = [msg(f"m{i}") for i in range(20)]
    ids = paused_while(valkey_cluster.master_pid_of(tenant), sends, lambda: qs.send(tenant, "orders", batch))
    assert [m.id for m in qs.browse(tenant, "orders", limit=100).items] == first + ids and len(ids) == 20
    qs.delete_queue(tenant, "orders")
    close_cluster_client(client)


def test_a_lost_answer_is_outcome_unknown_and_the_keyed_retry_answers_what_was_stored(
        paused_store: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without retries in the store's client, the time-out reaches the sender as 503
    outcome_unknown; the script ran once the store went on, and the retry with the same key
    answers its ids. The store is paused just before the send's script goes out (the key check and
    the rate limit before it answered)."""
    client = paused_store.client(socket_timeout=0.2, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    app = InProcessApp(client)
    headers = {"Idempotency-Key": "order-2026-11-27-0001"}
    body = {"messages": [{"documents": [{"data": f"line {i}"}]} for i in range(10)]}
    storage = app.services.queues.storage
    run = storage.run
    assert paused_store.pid is not None
    pid = paused_store.pid

    def paused_send(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "send":
            os.kill(pid, signal.SIGSTOP)
        return run(name, *args, **kwargs)

    monkeypatch.setattr(storage, "run", paused_send)
    try:
        lost = app.call("POST", "/v1/queues/orders/messages", body, headers=headers)
    finally:
        os.kill(pid, signal.SIGCONT)
        monkeypatch.undo()
    error = error_of(lost, 503)
    assert error["code"] == "outcome_unknown" and error["details"]["idempotency_key"] == headers["Idempotency-Key"]
    assert int(lost.headers["Retry-After"]) >= 1
    queues = app.services.queues
    wait_until(lambda: queues.get_queue(app.tenant, "orders").depth == 10, 10, "the paused send to be stored")
    again = app.call("POST", "/v1/queues/orders/messages", body, headers=headers)
    assert again.status_code == 201, again.data
    assert strict_loads(again.data)["ids"] == [m.id for m in queues.browse(app.tenant, "orders").items]
    assert queues.get_queue(app.tenant, "orders").depth == 10
    other = app.call("POST", "/v1/queues/orders/messages", send_body(), headers=headers)
    assert error_of(other, 409)["code"] == "idempotency_key_reused"
    for bad in ("", "x" * 129, "line\x7f"):
        refused = app.call("POST", "/v1/queues/orders/messages", body, headers={"Idempotency-Key": bad})
        assert error_of(refused, 400)["details"]["field"] == "Idempotency-Key"
    client.close()


def test_a_send_without_a_key_whose_answer_is_lost_says_so(paused_store: EmbeddedValkey) -> None:
    client = paused_store.client(socket_timeout=0.2, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    qs = QueueServer(client, FAST)
    qs.put_queue("t_000000000003", "orders", "point_to_point")
    qs.send("t_000000000003", "orders", [msg("first")])  # the node knows the queue's route
    assert paused_store.pid is not None
    os.kill(paused_store.pid, signal.SIGSTOP)
    try:
        with pytest.raises(OutcomeUnknown) as lost:
            qs.send("t_000000000003", "orders", [msg("a")])
    finally:
        os.kill(paused_store.pid, signal.SIGCONT)
    assert lost.value.details["idempotency_key"] is None and "Idempotency-Key" in lost.value.message
    client.close()
