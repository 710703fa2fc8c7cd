"""The hot path reads a tenant's key in its operation's script (``atomq.platform.store.carried_check``):
a message request is one round trip to the store where Flask's path makes two, on Valkey and on a
cluster,
and a key that fails is answered as Flask's path answers it, with nothing else done for it.
``tests/test_hot_path.py`` compares every answer of the two paths, key checks included, on Valkey."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.connection import AbstractConnection

from atomq.api import create_app
from atomq.api.hot_path import HOT_PATH
from atomq.api.key_checks import MAX_FAILED_KEY_CHECKS
from atomq.api.services import LongPollLimiter, Services
from atomq.platform import QueueServer
from atomq.tenants import TenantStore
from support.queues import FAST

OWNER_KEY = f"aq_owner_{secrets.token_urlsafe(32)}"
Q = "/v1/queues/orders"
SEND = {"messages": [{"documents": [{"data": "x"}]}]}
pytestmark = pytest.mark.parametrize("backend", ["valkey", "cluster"], indirect=True)
"""The app needs a store that answers INFO (its memory state), which fakeredis does not."""


class RoundTrips:
    """Counts what this thread sends to the store, a command or a pipeline at a time: each is one
    round trip (redis-py sends either with one ``send_packed_command``, cluster or not)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        thread = threading.get_ident()
        sent = AbstractConnection.send_packed_command

        def counted(connection: AbstractConnection, command: Any, check_health: bool = True) -> None:
            if threading.get_ident() == thread:  # not the node's background readers
                self.count += 1
            sent(connection, command, check_health)

        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)

    def of(self, call: Any) -> tuple[Any, int]:
        """What ``call()`` answers, and the round trips it made."""
        before = self.count
        answer = call()
        return answer, self.count - before


class Node:
    """One app on the backend's store, with the hot path on or off, a tenant with a queue and a
    topic's queue, and a second tenant with neither."""

    def __init__(self, client: redis.Redis, hot_path: bool) -> None:
        self.services = Services(queues=QueueServer(client, FAST), tenants=TenantStore(client, OWNER_KEY),
                                 longpolls=LongPollLimiter(2))
        app = create_app(self.services, {HOT_PATH: hot_path, MAX_FAILED_KEY_CHECKS: 3})
        self.http = app.test_client()
        suffix = secrets.token_hex(4)
        tenant, _, self.key = self.services.tenants.create(f"keys-{suffix}")
        other, _, self.other_key = self.services.tenants.create(f"keys-other-{suffix}")
        self.tenants = [tenant.id, other.id]
        queues = self.services.queues
        queues.put_queue(tenant.id, "orders", "point_to_point")
        queues.put_queue(tenant.id, "news", "point_to_point", topics=["news/>"])
        _, self.revoked = self.services.tenants.create_key(tenant.id)
        self.services.tenants.revoke_key(tenant.id, self.revoked.split("_")[1])

    def post(self, path: str, body: Any, key: str | None = None, address: str = "127.0.0.1") -> Any:
        return self.http.post(path, data=json.dumps(body), environ_base={"REMOTE_ADDR": address},
                              headers={"Authorization": f"Bearer {key or self.key}",
                                       "Content-Type": "application/json"})

    def close(self) -> None:
        for tenant in self.tenants:
            self.services.tenants.delete(tenant)


@pytest.fixture
def read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The figures a node reads again every few seconds (the settings, the tenant's limits, the memory
    state) read once: no request of a test reads them again, in its thread or in a thread of its own
    that could outlive the test's store client."""
    for setting in ("atomq.api.services.REFRESH_S", "atomq.platform.guards.server_settings.REFRESH_S",
                    "atomq.platform.watch.memory_state.READ_S"):
        monkeypatch.setattr(setting, 3600.0)


@pytest.fixture
def nodes(backend: redis.Redis, read_once: None) -> Iterator[tuple[Node, Node]]:
    """The hot path's node and Flask's, each its own services (its own throttle), on one store."""
    hot, flask = Node(backend, True), Node(backend, False)
    try:
        yield hot, flask
    finally:
        hot.close()
        flask.close()


def test_a_message_request_is_one_round_trip_to_the_store(nodes: tuple[Node, Node],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def requests(node: Node) -> Iterator[tuple[str, Any]]:
        """Each message route's request, made when the next is asked for."""
        yield "send", lambda: node.post(f"{Q}/messages", {"messages": [{"documents": [{"data": "x"}]}] * 10})
        got: list[dict[str, Any]] = []
        yield "get", lambda: got.extend(node.post(f"{Q}/get", {"max": 10}).get_json()["messages"]) or got
        yield "extend", lambda: node.post(f"{Q}/extend", {"receipts": [got[0]["receipt"]], "seconds": 30})
        yield "nack", lambda: node.post(f"{Q}/nack", {"receipts": [got[1]["receipt"]], "reason": "r"})
        yield "release", lambda: node.post(f"{Q}/release", {"receipts": [got[2]["receipt"]]})
        yield "ack", lambda: node.post(f"{Q}/ack", {"receipts": [m["receipt"] for m in got[3:]]})
        yield "get and ack", lambda: node.post(f"{Q}/get", {"max": 10, "ack": {"receipts": [got[0]["receipt"]]}})
        yield "publish", lambda: node.post("/v1/topics/news/eu/messages", SEND)
        yield "publish to topics", lambda: node.post("/v1/topics/messages", {"messages": [
            {"documents": [{"data": "x"}], "topic": "news/a"}, {"documents": [{"data": "y"}], "topic": "news/b"}]})

    hot, flask = nodes
    for node in (hot, flask):  # once to read what a node keeps (routes, settings, memory state)
        for _, request in requests(node):
            request()
    trips = RoundTrips(monkeypatch)
    counted: dict[str, dict[str, int]] = {"hot": {}, "flask": {}}
    for side, node in (("hot", hot), ("flask", flask)):
        for what, request in requests(node):
            answer, counted[side][what] = trips.of(request)
            assert answer if isinstance(answer, list) else answer.status_code < 300, (side, what, answer)
    assert set(counted["hot"].values()) == {1}, counted
    assert set(counted["flask"].values()) == {2}, counted  # the key's own read, then the operation's


def test_a_key_that_fails_is_answered_as_flask_answers_it(nodes: tuple[Node, Node]) -> None:
    def answers(node: Node) -> list[tuple[int, str | None]]:
        wrong = f"aq_{node.key.split('_')[1]}_{secrets.token_urlsafe(32)}"
        forged = f"aq_{node.key[3:15]}{node.other_key[15:]}"  # the tenant's id, another key's secret
        nobody = f"aq_{secrets.token_hex(14)}_{secrets.token_urlsafe(32)}"
        made = []
        for key in (wrong, node.revoked, forged, nobody, node.other_key):
            for path, body in ((f"{Q}/messages", SEND), (f"{Q}/get", {"max": 5}), (f"{Q}/get", {"wait_ms": 5}),
                               (f"{Q}/ack", {"ids": ["x"]}), (f"{Q}/get", {"ack": {"ids": ["x"]}}),
                               ("/v1/topics/news/eu/messages", SEND), ("/v1/queues/missing/get", {})):
                response = node.post(path, body, key=key, address=secrets.token_hex(4))
                made.append((response.status_code, (response.get_json().get("error") or {}).get("code")))
        for _ in range(4):  # the throttle counts the failures of one key id from one address
            response = node.post(f"{Q}/messages", SEND, key=wrong, address="10.1.0.1")
            made.append((response.status_code, response.get_json()["error"]["code"]))
        response = node.post(f"{Q}/messages", SEND, address="10.1.0.1")  # the key id is refused there, right or not
        made.append((response.status_code, response.get_json()["error"]["code"]))
        made.append((node.post(f"{Q}/messages", SEND, address="10.1.0.2").status_code, None))
        return made

    hot, flask = nodes
    seen = answers(hot)
    assert seen == answers(flask)
    assert seen[:7] == [(401, "unauthorized")] * 7
    assert seen[-6:] == [(401, "unauthorized")] * 3 + [(429, "rate_limited")] * 2 + [(201, None)]
    # The other tenant's key acts for its own tenant, which has no queue and no queue for the topic.
    assert seen[4 * 7:5 * 7] == [(404, "not_found")] * 5 + [(201, None), (404, "not_found")]
    for node in (hot, flask):  # of what was sent, only the right key's send reached the tenant's queue
        got = node.post(f"{Q}/get", {"max": 10}).get_json()["messages"]
        assert len(got) == 1


def test_a_failed_key_takes_no_room_in_its_tenants_window(backend: redis.Redis, read_once: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A send to a tenant with a rate limit calls the store for its window before its script: the key
    is read alone first, as Flask's path reads it, and a failed one reaches no window."""
    node = Node(backend, True)
    try:
        node.services.tenants.update(node.tenants[0], rate_limit_per_minute=2)
        assert node.post(f"{Q}/messages", SEND).status_code == 201
        wrong = f"aq_{node.key.split('_')[1]}_{secrets.token_urlsafe(32)}"
        trips = RoundTrips(monkeypatch)
        for _ in range(2):
            response, n = trips.of(lambda: node.post(f"{Q}/messages", SEND, key=wrong))
            assert (response.status_code, n) == (401, 2)  # the key's read, then the count of its failure
        assert [node.post(f"{Q}/messages", SEND).status_code for _ in range(2)] == [201, 429]
    finally:
        node.close()
