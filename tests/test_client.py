"""atomq.client against a real atomq serve: every call, and errors as atomq's own classes."""

from __future__ import annotations

import base64
import logging
import socket
import threading
from collections.abc import Iterator

import certifi
import pytest
import urllib3

from atomq.client import AtomqClient, BatchingSender, Target, wire
from atomq.client.transport import Transport, ca_options, proxy_for
from atomq.errors import Conflict, InvalidInput, NotFound, RateLimited, StorageError, Unauthorized
from support.served_node import AtomqServe, ServeFactory


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    node = serve_for_module(http_workers=1)
    with AtomqClient(node.url, node.owner_key) as owner:
        owner.update_server(redelivery_delays_s=[0.05])
    return node


@pytest.fixture
def owner(node) -> Iterator[AtomqClient]:
    with AtomqClient(node.url, node.owner_key) as client:
        yield client


def test_a_tenant_works_its_queue_through_the_client(node, owner) -> None:
    tenant = owner.create_tenant("client-user", rate_limit_per_minute=100)
    assert tenant["id"] in [t["id"] for t in owner.tenants()]
    with AtomqClient(node.url, tenant["api_key"]) as c:
        assert c.put_queue("jobs", max_redeliveries=0)["model"] == "point_to_point"
        ids = c.send_texts("jobs", ["a", "b", "c"])
        assert [m["id"] for m in c.browse("jobs", limit=2)] == ids
        got = c.get("jobs", max_messages=2, wait_ms=1000)
        assert [m["documents"][0]["data"] for m in got] == ["a", "b"]
        assert c.extend("jobs", receipts=[got[0]["receipt"]], seconds=30) == 1
        assert c.ack("jobs", receipts=[got[0]["receipt"]]) == 1
        assert c.nack("jobs", ids=[got[1]["id"]], reason="bad") == {"requeued": 0, "dead_lettered": 1}
        assert [m["reason"] for m in c.dead_letters("jobs")] == ["bad"]
        assert c.resend_dead_letters("jobs") == 1
        assert c.delete_messages("jobs", ids=[ids[2]]) == 1
        assert c.queue("jobs")["depth"] == 1
        assert c.delete_messages("jobs") == 1 and c.delete_dead_letters("jobs") == 0
        c.send_texts("jobs", ["d", "e"])
        (d,) = c.get("jobs", max_messages=1)
        (e,) = c.get("jobs", ack_receipts=[d["receipt"]])  # the previous batch acked by the next get
        assert c.take("jobs", ack_ids=[e["id"]]) == {"messages": [], "acked": 1}
        assert c.queue("jobs")["totals"]["acked"] == 3
        c.put_queue("news", "publish_subscribe")
        c.put_subscriber("news", "s")
        c.send_texts("news", ["n"])
        assert [m["documents"][0]["data"] for m in c.get("news", subscriber="s")] == ["n"]
        c.delete_subscriber("news", "s")
        c.delete_queue("news")
        assert [q["name"] for q in c.queues()] == ["jobs"]
    owner.delete_tenant(tenant["id"])


def test_the_owner_acts_for_a_tenant_by_its_name_whatever_its_letters(node, owner) -> None:
    tenant = owner.create_tenant("Zoë's shop")
    try:
        with AtomqClient(node.url, node.owner_key, tenant="Zoë's shop") as acting:
            acting.put_queue("jobs")
        with AtomqClient(node.url, tenant["api_key"]) as own:
            assert [q["name"] for q in own.queues()] == ["jobs"]
        with pytest.raises(NotFound), AtomqClient(node.url, node.owner_key, tenant="Zoe's shop") as nobody:
            nobody.queues()
    finally:
        owner.delete_tenant(tenant["id"])


def test_the_batching_sender_counts_what_was_stored_nowhere_and_warns_once_a_place(
        node, owner, caplog: pytest.LogCaptureFixture) -> None:
    tenant = owner.create_tenant("batching")
    try:
        with AtomqClient(node.url, tenant["api_key"]) as c:
            c.put_queue("news", "publish_subscribe")
            c.put_queue("jobs")
            sender = BatchingSender(c, max_documents=2)
            with caplog.at_level(logging.WARNING, logger="atomq.client.batching"):
                for i in range(5):
                    sender.add("news", wire.message([wire.document(f"n{i}")]))
                    sender.add("jobs", wire.message([wire.document(f"j{i}")]))
                    sender.add(Target("nowhere/x", topic=True), wire.message([wire.document(f"p{i}")]))
                sender.flush()
            assert (sender.requests, sender.stored_nowhere) == (9, 10)
            warned = [r.getMessage() for r in caplog.records if r.name == "atomq.client.batching"]
            assert len(warned) == 2, warned
            assert any("queue news" in w for w in warned) and any("topic nowhere/x" in w for w in warned)
            assert c.queue("jobs")["depth"] == 5
    finally:
        owner.delete_tenant(tenant["id"])


def test_a_delay_reaches_sends_publishes_and_the_batching_sender(node, owner) -> None:
    tenant = owner.create_tenant("delays")
    try:
        with AtomqClient(node.url, tenant["api_key"]) as c:
            assert c.put_queue("later", delay_s=600, topics=["news/>"])["delay_s"] == 600
            c.send("later", [wire.message([wire.document("queue's")])])
            c.send("later", [wire.message([wire.document("send's")])], delay_s=300)
            (now,) = c.send("later", [wire.message([wire.document("own: none")], delay_s=0)], delay_s=300)
            c.publish("news/eu", [wire.message([wire.document("published")])], delay_s=900)
            c.publish_many([{**wire.message([wire.document("many")]), "topic": "news/us"}], delay_s=900)
            sender = BatchingSender(c)
            sender.add("later", wire.message([wire.document("batched")]), delay_s=120)
            sender.add(Target("news/x", topic=True), wire.message([wire.document("batched topic")]), delay_s=120)
            sender.add("later", wire.message([wire.document("batched, at once")]), delay_s=0)
            sender.flush()
            got = c.get("later", max_messages=10)
            assert [m["id"] for m in got[:1]] + [m["documents"][0]["data"] for m in got[1:]] == [
                now, "batched, at once"]
            queue = c.queue("later")
            assert (queue["depth"], queue["in_flight"], queue["delayed"]) == (6, 2, 6)
            due = {m["documents"][0]["data"]: round(m["due_at"] - m["enqueued_at"])
                   for m in c.browse("later", state="scheduled")}
            assert due == {"queue's": 600, "send's": 300, "published": 900, "many": 900, "batched": 120,
                           "batched topic": 120}
    finally:
        owner.delete_tenant(tenant["id"])


def test_errors_come_back_as_atomq_errors(node, owner) -> None:
    tenant = owner.create_tenant("erring", rate_limit_per_minute=1)
    with AtomqClient(node.url, tenant["api_key"]) as c:
        with pytest.raises(NotFound) as missing:
            c.queue("nope")
        assert missing.value.code == "not_found" and missing.value.details == {"queue": "nope"}
        with pytest.raises(InvalidInput):
            c.put_queue("q", "fifo")
        c.put_queue("q")
        c.send_texts("q", ["one"])
        with pytest.raises(RateLimited) as limited:
            c.send_texts("q", ["two"])
        assert 1 <= limited.value.retry_after <= 60
    with pytest.raises(Unauthorized), AtomqClient(node.url, "aq_nobody_x") as stranger:
        stranger.queues()
    owner.delete_tenant(tenant["id"])


def test_management_commands_print_tables_and_json(node) -> None:
    import json

    from click.testing import CliRunner

    from atomq.cli import main

    runner = CliRunner()
    env = {"ATOMQ_URL": node.url, "ATOMQ_KEY": node.owner_key}

    def run(*args: str, key: str | None = None, stdin: str | None = None) -> str:
        result = runner.invoke(main, list(args), env={**env, **({"ATOMQ_KEY": key} if key else {})}, input=stdin)
        assert result.exit_code == 0, result.output
        return result.output

    created = json.loads(run("tenants", "create", "cli-user", "--json"))
    key = created["api_key"]
    assert created["id"] in run("tenants", "list")
    assert "NAME" in run("queues", "create", "jobs", "--max-redeliveries", "0", key=key)
    ids = json.loads(run("send", "jobs", "--json", key=key, stdin="first\nsecond\n"))["ids"]
    assert len(ids) == 2
    table = run("queues", "list", key=key)
    assert table.splitlines()[0].split() == ["NAME", "MODEL", "DEPTH", "IN", "FLIGHT", "DEAD"]
    assert table.splitlines()[1].split() == ["jobs", "point_to_point", "2", "0", "0"]
    got = json.loads(run("get", "jobs", "--max", "1", "--json", key=key))
    assert [m["documents"][0]["data"] for m in got] == ["first"]
    with AtomqClient(node.url, key) as c:
        c.nack("jobs", ids=[got[0]["id"]], reason="nope")
    assert "nope" in run("dead-letters", "list", "jobs", key=key)
    assert json.loads(run("dead-letters", "resend", "jobs", "--json", key=key)) == {"resent": 1}
    assert "second" in run("get", "jobs", "--max", "5", "--ack", key=key)
    failed = runner.invoke(main, ["queues", "delete", "missing"], env={**env, "ATOMQ_KEY": key})
    assert failed.exit_code == 1 and "not_found" in failed.output
    run("tenants", "delete", created["id"], "--yes")


def test_calls_share_one_keep_alive_connection(node, owner) -> None:
    for _ in range(5):
        owner.server()
    pool = owner._transport._pools.connection_from_url(node.url)
    assert (pool.num_connections, pool.num_requests) == (1, 5)


def test_a_request_the_node_may_have_seen_is_sent_again_only_as_a_send_under_its_key() -> None:
    """A node that takes a request and drops the connection: a send is tried ``send_tries`` times,
    each under the same Idempotency-Key (the node stores it once), then an error that says the node
    could not be reached; any other request is sent once."""
    seen: list[bytes] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def drop_each() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    seen.append(conn.recv(65536))

        threading.Thread(target=drop_each, daemon=True).start()
        with AtomqClient(f"http://127.0.0.1:{port}", "aq_x", timeout=5) as c:
            with pytest.raises(StorageError) as broken:
                c.send_texts("q", ["once"])
            assert broken.value.code == "unreachable"
            with pytest.raises(StorageError):
                c.queues()
    assert [request.split(b" ", 2)[:2] for request in seen] == [[b"POST", b"/v1/queues/q/messages"]] * 3 + [
        [b"GET", b"/v1/queues"]]
    keys = {line for request in seen[:3] for line in request.split(b"\r\n") if line.lower().startswith(b"idempotency-key:")}
    assert len(keys) == 1


def test_an_unreachable_node_and_a_body_json_cannot_hold() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: the connection is refused
    with AtomqClient(f"http://127.0.0.1:{port}", "aq_x", timeout=5) as c:
        with pytest.raises(StorageError) as refused:
            c.queues()
        assert refused.value.code == "unreachable" and f"127.0.0.1:{port}" in str(refused.value)
        with pytest.raises(ValueError):
            c.send("q", [{"documents": [{"data": "x"}], "properties": {"score": float("nan")}}])


def test_the_proxy_the_environment_names_is_used_but_for_hosts_no_proxy_names(monkeypatch) -> None:
    for name in ("http_proxy", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1,10.0.0.0/8,queues.internal:8080")
    assert proxy_for("http://queues.example:8080") == "http://proxy.example:3128", "no scheme: http://"
    assert proxy_for("http://127.0.0.1:8080") is None
    assert proxy_for("http://10.1.2.3:8080") is None, "a CIDR entry of NO_PROXY"
    assert proxy_for("http://queues.internal:8080") is None, "a host:port entry of NO_PROXY"
    assert proxy_for("https://queues.example") is None, "no HTTPS_PROXY: https goes direct"
    monkeypatch.setenv("ALL_PROXY", "http://ops%40corp:s3cret@gateway.example:8080")
    assert proxy_for("https://queues.example") == "http://ops%40corp:s3cret@gateway.example:8080"
    through = Transport("https://queues.example")._pools
    assert isinstance(through, urllib3.ProxyManager) and through.proxy_headers == {
        "proxy-authorization": "Basic " + base64.b64encode(b"ops@corp:s3cret").decode()}
    monkeypatch.setenv("ALL_PROXY", "socks5://gateway.example:1080")  # PySocks is not installed here
    with pytest.raises(StorageError, match="proxy cannot be used"), AtomqClient("https://queues.example") as c:
        c.queues()


def test_the_ca_bundle_or_directory_the_environment_names(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    assert ca_options() == {"ca_certs": certifi.where()}
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path))
    assert ca_options() == {"ca_cert_dir": str(tmp_path)}
    pools = Transport("https://queues.example")._pools
    assert pools.connection_pool_kw["ca_cert_dir"] == str(tmp_path)


def test_headers_of_the_callers_own_replace_the_clients_whatever_their_case() -> None:
    seen: list[bytes] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()

        def answer_once() -> None:
            conn, _ = server.accept()
            with conn:
                seen.append(conn.recv(65536))
                conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=answer_once, daemon=True).start()
        with AtomqClient(f"http://127.0.0.1:{server.getsockname()[1]}", "aq_first") as c:
            c.headers.update({"authorization": "Bearer aq_second", "traceparent": "00-ab-cd-01"})
            assert c.request("POST", "/v1/queues/q/ack", {"ids": ["1-1"]}) is None
    head = seen[0].split(b"\r\n\r\n", 1)[0].lower()
    assert head.count(b"authorization:") == 1 and b"authorization: bearer aq_second" in head
    assert b"content-type: application/json" in head and b"traceparent: 00-ab-cd-01" in head


class AnswerLosingProxy:
    """A loopback HTTP proxy in front of the node that forwards each request and its answer, but
    drops the answer of the first send (the node stored it; the client hears nothing), as a load
    balancer cut off mid-answer does."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.dropped = 0
        self.keys: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    @staticmethod
    def _message(stream: socket.socket) -> bytes:
        """One HTTP message (head and a Content-Length body) read off ``stream``; b"" at its end."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = stream.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += stream.recv(65536)
        return head + b"\r\n\r\n" + body

    def _relay(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(self.target) as upstream:
            while request := self._message(conn):
                upstream.sendall(request)
                answer = self._message(upstream)
                head = request.split(b"\r\n\r\n", 1)[0].decode()
                if head.startswith("POST") and "/messages" in head.split("\r\n")[0]:
                    self.keys.append(next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                                          if line.lower().startswith("idempotency-key:")))
                    if not self.dropped:
                        self.dropped += 1
                        return
                conn.sendall(answer)

    def close(self) -> None:
        self.listener.close()


def test_a_send_whose_answer_was_lost_is_tried_again_and_stored_once(node, owner) -> None:
    tenant = owner.create_tenant("lost-answers")
    proxy = AnswerLosingProxy(node.url)
    try:
        with AtomqClient(node.url, tenant["api_key"]) as direct, AtomqClient(proxy.url, tenant["api_key"]) as c:
            direct.put_queue("orders", topics=["orders/>"])
            ids = c.send_texts("orders", ["a", "b", "c"])
            assert proxy.dropped == 1 and len(proxy.keys) == 2 and proxy.keys[0] == proxy.keys[1]
            assert [m["id"] for m in direct.browse("orders")] == ids
            published = c.publish("orders/x", [{"documents": [{"data": "p"}]}], idempotency_key="pub-1")
            assert published == direct.publish("orders/x", [{"documents": [{"data": "p"}]}], idempotency_key="pub-1")
            assert published["queues"] == ["orders"]
            with pytest.raises(Conflict) as reused:
                direct.send("orders", [{"documents": [{"data": "p"}]}], idempotency_key="pub-1")
            assert reused.value.code == "idempotency_key_reused"
            assert direct.queue("orders")["depth"] == 4
    finally:
        proxy.close()
        owner.delete_tenant(tenant["id"])
