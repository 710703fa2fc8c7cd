"""Move tasks over the native HTTP API (``/v1/queues/{name}/moves``) through the Python client and
raw requests: a dead letter queue moved back to its sources or to another queue, exact counts, a
cancel that stops at once, 4xx in the one error shape for bad input, and tenants kept apart. On a
real Valkey; the maintenance is run by the test, a step at a time, as the node's loop runs it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from atomq.client import AtomqClient
from atomq.errors import Conflict, NotFound
from support.in_process_node import InProcessNode

OWNER = "owner-key-for-move-task-tests-0123456789"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    with InProcessNode(tmp_path_factory.mktemp("moves"), OWNER) as node:
        yield node


class Tenant:
    """A new tenant of the node: its id, a client with its key, and raw calls with that key."""

    def __init__(self, node: InProcessNode, name: str) -> None:
        made = node.owner.create_tenant(name)
        self.node, self.id, self.key = node, made["id"], made["api_key"]
        self.api = AtomqClient(node.url, self.key)

    def call(self, method: str, path: str, body: Any = None, **headers: str) -> requests.Response:
        return requests.request(method, self.node.url + path, json=body, timeout=30,
                                headers={"Authorization": f"Bearer {self.key}", **headers})

    def step(self) -> None:
        """One maintenance round of the tenant's due work, as the lease holder's loop runs it."""
        self.node.services.queues.maintain(self.id)


@pytest.fixture
def tenant(node: InProcessNode, request: pytest.FixtureRequest) -> Iterator[Tenant]:
    t = Tenant(node, re.sub(r"[^a-z0-9]", "-", request.node.name.lower())[:60])
    yield t
    t.api.close()
    node.owner.delete_tenant(t.id)


def error(response: requests.Response, status: int) -> dict[str, Any]:
    """The error of an answer that must have ``status``, in the one JSON shape."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]  # type: ignore[no-any-return]


def dead_lettered(t: Tenant, sources: dict[str, int]) -> dict[str, list[str]]:
    """Queue "dlq", and for each source queue (dead letters to "dlq", no redelivery) that many
    messages nacked into "dlq"; the ids by source."""
    t.api.put_queue("dlq")
    out = {}
    for name, n in sources.items():
        t.api.put_queue(name, max_redeliveries=0, dead_letter_queue="dlq")
        out[name] = t.api.send_texts(name, [f"{name}{i}" for i in range(n)])
        assert len(t.api.get(name, max_messages=n)) == n
        assert t.api.nack(name, ids=out[name])["dead_lettered"] == n
    assert t.api.queue("dlq")["depth"] == sum(sources.values())
    return out


def test_a_dead_letter_queue_moves_back_to_its_sources_exactly(tenant: Tenant) -> None:
    ids = dead_lettered(tenant, {"a": 3, "b": 2})
    task = tenant.api.start_move("dlq")
    assert re.fullmatch("[0-9a-f]{32}", task["id"])
    assert {k: v for k, v in task.items() if k not in ("id", "started_at")} == {
        "queue": "dlq", "destination": None, "max_per_second": None, "status": "running", "moved": 0,
        "to_move": 5, "failure": None}
    assert tenant.api.moves("dlq") == [task]
    tenant.step()
    done = tenant.api.move("dlq", task["id"])
    assert (done["status"], done["moved"], done["failure"]) == ("completed", 5, None)
    assert tenant.api.queue("dlq")["depth"] == 0
    for name, sent in ids.items():
        back = list(tenant.api.browse(name))
        assert sorted(m["id"] for m in back) == sorted(sent)
        assert all("dead_letter_source" not in m["properties"] for m in back), "the record of the move is gone"
    assert tenant.api.moves("dlq") == [done]


def test_a_rate_moves_that_many_a_step_and_a_cancel_stops_the_task_at_once(tenant: Tenant) -> None:
    dead_lettered(tenant, {"a": 5})
    tenant.api.put_queue("retry")
    task = tenant.api.start_move("dlq", destination="retry", max_per_second=2)
    assert (task["destination"], task["max_per_second"]) == ("retry", 2)
    tenant.step()
    assert tenant.api.move("dlq", task["id"])["moved"] == 2
    cancelled = tenant.api.cancel_move("dlq", task["id"])
    assert (cancelled["status"], cancelled["moved"]) == ("cancelled", 2)
    tenant.step()
    assert (tenant.api.queue("retry")["depth"], tenant.api.queue("dlq")["depth"]) == (2, 3), "nothing moved after"
    with pytest.raises(Conflict):
        tenant.api.cancel_move("dlq", task["id"])
    again = error(tenant.call("DELETE", f"/v1/queues/dlq/moves/{task['id']}"), 409)
    assert again["code"] == "conflict" and again["details"] == {"task": task["id"], "status": "cancelled"}
    # Once none runs, another may start; it moves the rest.
    rest = tenant.api.start_move("dlq", destination="retry")
    tenant.step()
    assert tenant.api.move("dlq", rest["id"])["moved"] == 3 and tenant.api.queue("retry")["depth"] == 5
    assert [t["id"] for t in tenant.api.moves("dlq")] == [rest["id"], task["id"]]


def test_a_message_without_a_source_fails_the_task_and_says_which(tenant: Tenant) -> None:
    tenant.api.put_queue("plain")
    [sent] = tenant.api.send_texts("plain", ["x"])
    task = tenant.api.start_move("plain")
    tenant.step()
    failed = tenant.api.move("plain", task["id"])
    assert (failed["status"], failed["moved"]) == ("failed", 0)
    assert failed["failure"]["reason"] == "no_source" and failed["failure"]["on"] == sent
    assert sent in failed["failure"]["message"]
    assert tenant.api.queue("plain")["depth"] == 1, "the message stays where it was"


@pytest.mark.parametrize(("body", "field"), [
    ({"max_per_second": 0}, "max_per_second"), ({"max_per_second": 501}, "max_per_second"),
    ({"max_per_second": "2"}, "max_per_second"), ({"max_per_second": 2.5}, "max_per_second"),
    ({"destination": "bad name"}, "destination"), ({"rate": 2}, "rate"),
])
def test_bad_input_is_400_naming_the_field(tenant: Tenant, body: dict[str, Any], field: str) -> None:
    tenant.api.put_queue("dlq")
    err = error(tenant.call("POST", "/v1/queues/dlq/moves", body), 400)
    assert err["code"] == "invalid_input" and field in str(err["details"]) + err["message"], err
    assert tenant.api.moves("dlq") == [], "nothing started"


def test_what_cannot_be_moved_is_refused_in_the_one_error_shape(tenant: Tenant) -> None:
    dead_lettered(tenant, {"a": 1})
    tenant.api.put_queue("fanout", "publish_subscribe")
    assert error(tenant.call("POST", "/v1/queues/nowhere/moves", {}), 404)["code"] == "not_found"
    assert error(tenant.call("GET", "/v1/queues/nowhere/moves"), 404)["code"] == "not_found"
    assert "nowhere" in error(tenant.call("POST", "/v1/queues/dlq/moves", {"destination": "nowhere"}), 404)["message"]
    assert error(tenant.call("POST", "/v1/queues/dlq/moves", {"destination": "dlq"}), 400)["details"] == {
        "field": "destination"}
    assert "publish/subscribe" in error(tenant.call("POST", "/v1/queues/fanout/moves", {}), 400)["message"]
    assert "publish/subscribe" in error(tenant.call("POST", "/v1/queues/dlq/moves", {"destination": "fanout"}),
                                        400)["message"]
    first = tenant.api.start_move("dlq", max_per_second=1)
    busy = error(tenant.call("POST", "/v1/queues/dlq/moves", {"destination": "a"}), 409)
    assert busy["code"] == "conflict" and busy["details"]["task"] == first["id"]
    assert "cancel it" in busy["message"]
    assert error(tenant.call("DELETE", "/v1/queues/dlq/moves/" + "0" * 32), 404)["code"] == "not_found"
    assert error(tenant.call("DELETE", "/v1/queues/dlq/moves/not-a-task"), 400)["details"] == {"field": "task"}
    assert error(tenant.call("GET", "/v1/queues/dlq/moves?limit=11"), 400)["code"] == "invalid_input"
    assert [t["status"] for t in tenant.api.moves("dlq")] == ["running"], "the refusals changed nothing"


def test_a_tenant_neither_sees_nor_cancels_another_tenants_task(node: InProcessNode, tenant: Tenant) -> None:
    dead_lettered(tenant, {"a": 2})
    tenant.api.put_queue("other")
    task = tenant.api.start_move("dlq", max_per_second=1)
    other = Tenant(node, "moves-neighbour")
    try:
        other.api.put_queue("dlq")
        assert other.api.moves("dlq") == []
        path = f"/v1/queues/dlq/moves/{task['id']}"
        for method in ("GET", "DELETE"):
            assert error(other.call(method, path), 404)["code"] == "not_found"
        with AtomqClient(node.url, OWNER, tenant=other.id) as owner_as_other:
            with pytest.raises(NotFound):
                owner_as_other.cancel_move("dlq", task["id"])
        # Within the tenant a task is found only under its own queue.
        assert error(tenant.call("DELETE", f"/v1/queues/other/moves/{task['id']}"), 404)["code"] == "not_found"
        assert tenant.api.move("dlq", task["id"])["status"] == "running"
        tenant.step()
        assert tenant.api.move("dlq", task["id"])["moved"] == 1, "it went on"
        second = tenant.api.cancel_move("dlq", task["id"])
        assert second["status"] == "cancelled"
    finally:
        other.api.close()
        node.owner.delete_tenant(other.id)


def test_the_list_pages_newest_first(tenant: Tenant) -> None:
    tenant.api.put_queue("dlq")
    tenant.api.put_queue("retry")
    started = []
    for _ in range(3):
        started.append(tenant.api.start_move("dlq", destination="retry")["id"])
        tenant.step()  # an empty queue: the first step completes it
    first = tenant.call("GET", "/v1/queues/dlq/moves?limit=2").json()
    assert [t["id"] for t in first["moves"]] == started[:0:-1] and first["next"] == started[1]
    rest = tenant.call("GET", f"/v1/queues/dlq/moves?limit=2&after={first['next']}").json()
    assert [t["id"] for t in rest["moves"]] == [started[0]] and rest["next"] is None
    assert [t["status"] for t in tenant.api.moves("dlq")] == ["completed"] * 3


def test_the_openapi_document_describes_the_routes(node: InProcessNode) -> None:
    paths = requests.get(f"{node.url}/openapi.json", timeout=30).json()["paths"]
    assert set(paths["/v1/queues/{name}/moves"]) >= {"get", "post"}
    assert set(paths["/v1/queues/{name}/moves/{task}"]) >= {"get", "delete"}
    post = paths["/v1/queues/{name}/moves"]["post"]
    assert {"201", "400", "404", "409"} <= set(post["responses"])
