"""The HTTP contract, every endpoint's happy path and errors.

Each test runs twice: through Flask's test client in this process (fast,
on the session's Valkey), and against a real ``atomq serve`` process over
HTTP (gunicorn, its own embedded Valkey), as a client would.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import marshmallow as ma
import pytest
import requests
from marshmallow import fields, validate

from atomq.api import create_app
from atomq.api.schemas.common import StringList
from atomq.api.services import LongPollLimiter, Services
from atomq.api.wire import render
from atomq.platform import QueueServer
from atomq.platform.models import ENVELOPE_FIELDS, Delivery, Envelope
from atomq.tenants import TenantStore
from support.queues import FAST
from support.served_node import ServeFactory
from support.waiting import wait_until

# (method, path, json body, headers, query) -> (status, json body or None, response headers)
Transport = Callable[[str, str, Any, dict[str, str], dict[str, Any]], tuple[int, Any, dict[str, str]]]


class Client:
    """Speaks JSON with one key; ``status`` asserts the answer's status, and every error's shape."""

    def __init__(self, transport: Transport, key: str | None, tenant: str | None = None) -> None:
        self.transport, self.key, self.tenant = transport, key, tenant
        self.headers: dict[str, str] = {}

    def __call__(self, method: str, path: str, body: Any = None, status: int | None = None,
                 **query: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        if self.tenant:
            headers["X-Atomq-Tenant"] = self.tenant
        code, answer, self.headers = self.transport(method, path, body, headers, query)
        if status is not None:
            assert code == status, (method, path, code, answer)
        if code >= 400:
            assert set(answer["error"]) == {"code", "message", "details"}, answer
        return answer


MAX_REQUEST_BYTES = 64 * 1024
LONGPOLLS_PER_TENANT = 2


def in_process(valkey: Any, owner_key: str) -> Iterator[Transport]:
    client = valkey.client()
    services = Services(queues=QueueServer(client, FAST), tenants=TenantStore(client, owner_key),
                        longpolls=LongPollLimiter(LONGPOLLS_PER_TENANT))
    http = create_app(services, {"MAX_CONTENT_LENGTH": MAX_REQUEST_BYTES}).test_client()

    def transport(method: str, path: str, body: Any, headers: dict[str, str],
                  query: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        r = http.open(path, method=method, json=body, headers=headers, query_string=query or None)
        return r.status_code, (r.get_json() if r.data else None), dict(r.headers)

    yield transport
    client.close()


def served(serve: ServeFactory) -> Iterator[Transport]:
    # One HTTP worker: settings changed through it hold at once (other workers re-read them within 2 s).
    node = serve("--max-request-bytes", str(MAX_REQUEST_BYTES), "--max-longpolls-per-tenant", str(LONGPOLLS_PER_TENANT),
                 http_workers=1)
    session = requests.Session()

    def transport(method: str, path: str, body: Any, headers: dict[str, str],
                  query: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        r = session.request(method, node.url + path, json=body, headers=headers, params=query or None, timeout=30)
        return r.status_code, (r.json() if r.content else None), dict(r.headers)

    try:
        yield transport
    finally:
        session.close()


@pytest.fixture(scope="module")
def owner_key(serve_for_module: ServeFactory) -> str:
    """The owner key of both transports: the served node's, which the in-process app is given too."""
    return serve_for_module.owner_key


@pytest.fixture(scope="module", params=["in_process", "served"])
def http(request: pytest.FixtureRequest, owner_key: str, serve_for_module: ServeFactory) -> Iterator[Transport]:
    if request.param == "in_process":
        transports = in_process(request.getfixturevalue("valkey"), owner_key)
    else:
        transports = served(serve_for_module)
    transport = next(transports)
    # The shared server settings rule every node: the fast schedule goes there.
    Client(transport, owner_key)("PATCH", "/v1/server", {"redelivery_delays_s": list(FAST.redelivery_delays_s)}, 200)
    yield transport
    next(transports, None)


@pytest.fixture
def owner(http, owner_key) -> Client:
    return Client(http, owner_key)


@pytest.fixture
def acme(owner, http) -> Iterator[Client]:
    """A fresh tenant's client."""
    created = owner("POST", "/v1/tenants", {"name": "acme"}, 201)
    yield Client(http, created["api_key"])
    owner("DELETE", f"/v1/tenants/{created['id']}", status=204)


@pytest.fixture
def other(owner, http) -> Iterator[Client]:
    created = owner("POST", "/v1/tenants", {"name": "other"}, 201)
    yield Client(http, created["api_key"])
    owner("DELETE", f"/v1/tenants/{created['id']}", status=204)


def send(c: Client, queue: str, *texts: str) -> list[str]:
    body = {"messages": [{"documents": [{"data": t}]} for t in texts]}
    return c("POST", f"/v1/queues/{queue}/messages", body, 201)["ids"]  # type: ignore[no-any-return]


# -- keys and the public endpoints ---------------------------------------------------------


def test_health_ready_and_openapi_need_no_key(http) -> None:
    anon = Client(http, None)
    assert anon("GET", "/v1/health", status=200) == {"status": "ok"}
    assert anon("GET", "/v1/ready", status=200) == {"status": "ready"}
    spec = anon("GET", "/openapi.json", status=200)
    for path in ("/v1/queues/{name}/messages", "/v1/queues/{name}/get", "/v1/tenants/{tenant_id}/keys",
                 "/v1/queues/{name}/dead-letters/resend"):
        assert path in spec["paths"], path
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_missing_unknown_and_misplaced_keys(http, acme) -> None:
    for key in (None, "nonsense", "aq_0123456789abcdef_wrong"):
        error = Client(http, key)("GET", "/v1/queues", status=401)["error"]
        assert error["code"] == "unauthorized"
    assert acme("GET", "/v1/tenants", status=403)["error"]["code"] == "forbidden"


def test_tenant_lifecycle_and_keys(owner, http) -> None:
    created = owner("POST", "/v1/tenants", {"name": "lifecycle", "rate_limit_per_minute": 5}, 201)
    tid = created["id"]
    assert created["api_key"].startswith("aq_") and created["disk_quota_bytes"] == 0
    assert created["spark_weight"] == 1
    assert tid in [t["id"] for t in owner("GET", "/v1/tenants", status=200)["tenants"]]
    assert owner("GET", f"/v1/tenants/{tid}", status=200)["rate_limit_per_minute"] == 5
    assert owner("PATCH", f"/v1/tenants/{tid}", {"disk_quota_bytes": 1000}, 200)["disk_quota_bytes"] == 1000
    patched = owner("PATCH", f"/v1/tenants/{tid}", {"spark_weight": 5}, 200)
    assert (patched["spark_weight"], patched["disk_quota_bytes"]) == (5, 1000)
    assert owner("GET", f"/v1/tenants/{tid}", status=200)["spark_weight"] == 5
    first = Client(http, created["api_key"])
    extra = owner("POST", f"/v1/tenants/{tid}/keys", status=201)
    second = Client(http, extra["api_key"])
    assert first("GET", "/v1/queues", status=200) == second("GET", "/v1/queues", status=200) == {"queues": [], "next": None}
    owner("DELETE", f"/v1/tenants/{tid}/keys/{extra['key_id']}", status=204)
    second("GET", "/v1/queues", status=401)
    first("GET", "/v1/queues", status=200)
    taken = owner("POST", "/v1/tenants", {"name": "lifecycle"}, 409)["error"]
    assert (taken["code"], taken["details"]) == ("name_taken", {"name": "lifecycle", "tenant": tid})
    assert [t["id"] for t in owner("GET", "/v1/tenants?name=lifecycle", status=200)["tenants"]] == [tid]
    assert owner("GET", "/v1/tenants?name=nobody", status=200) == {"tenants": [], "next": None}
    twin = owner("POST", "/v1/tenants", {"name": "lifecycle-2"}, 201)
    assert owner("PATCH", f"/v1/tenants/{twin['id']}", {"name": "lifecycle"}, 409)["error"]["code"] == "name_taken"
    owner("DELETE", f"/v1/tenants/{twin['id']}", status=204)
    owner("DELETE", f"/v1/tenants/{tid}", status=204)
    first("GET", "/v1/queues", status=401)
    assert owner("GET", f"/v1/tenants/{tid}", status=404)["error"]["code"] == "not_found"
    again = owner("POST", "/v1/tenants", {"name": "lifecycle"}, 201)
    owner("DELETE", f"/v1/tenants/{again['id']}", status=204)


def test_tenant_input_errors_name_the_field(owner) -> None:
    error = owner("POST", "/v1/tenants", {"rate_limit_per_minute": -1}, 400)["error"]
    assert error["code"] == "invalid_input"
    assert set(error["details"]["fields"]["json"]) == {"name", "rate_limit_per_minute"}
    assert owner("POST", "/v1/tenants", {"name": "x", "surprise": 1}, 400)["error"]["details"]["fields"]
    for weight in (0, 1001):
        error = owner("POST", "/v1/tenants", {"name": "x", "spark_weight": weight}, 400)["error"]
        assert set(error["details"]["fields"]["json"]) == {"spark_weight"}


# -- queues ---------------------------------------------------------------------------------


def test_queue_create_update_list_get_delete(acme) -> None:
    created = acme("PUT", "/v1/queues/orders", {"model": "point_to_point"}, 201)
    assert created == {"name": "orders", "model": "point_to_point", "max_redeliveries": 6, "ack_timeout_s": 30.0,
                       "depth": 0, "in_flight": 0, "dead_letters": 0, "scheduled": 0, "message_ttl_s": 0.0,
                       "on_expire": "dead_letter", "topics": [], "last_value": False, "last_value_key": "",
                       "access": "non_exclusive", "consumers": [], "depth_by_priority": {},
                       "totals": dict.fromkeys(["sent", "delivered", "acked", "nacked", "dead_lettered", "expired",
                                                "superseded", "dropped"], 0),
                       "held_bytes": 0, "max_messages": 0, "max_bytes": 0, "max_message_bytes": 0,
                       "max_dead_letters": 0, "overflow": "reject_new", "overflow_to_dead_letters": False,
                       "durability": "async", "delayed": 0, "delay_s": 0.0, "ordering": "none",
                       "dead_letter_queue": ""}
    assert acme("PUT", "/v1/queues/orders", {"model": "point_to_point", "max_redeliveries": 2}, 200)[
        "max_redeliveries"] == 2
    kept = acme("PUT", "/v1/queues/orders", {"model": "point_to_point", "ack_timeout_s": 5}, 200)
    assert (kept["max_redeliveries"], kept["ack_timeout_s"]) == (2, 5), "a PUT keeps the settings it leaves out"
    send(acme, "orders", "a")
    assert acme("PUT", "/v1/queues/orders", {"model": "publish_subscribe"}, 409)["error"]["code"] == "conflict"
    assert [q["name"] for q in acme("GET", "/v1/queues", status=200)["queues"]] == ["orders"]
    assert acme("GET", "/v1/queues/orders", status=200)["depth"] == 1
    acme("DELETE", "/v1/queues/orders", status=204)
    acme("GET", "/v1/queues/orders", status=404)
    acme("DELETE", "/v1/queues/orders", status=404)
    acme("PUT", "/v1/queues/bad:name", {"model": "point_to_point"}, 400)
    acme("PUT", "/v1/queues/q", {"model": "fifo"}, 400)
    acme("PUT", "/v1/queues/q", {}, 400)


@pytest.mark.parametrize("name", [name for name, _ in ENVELOPE_FIELDS])
def test_a_delivery_shows_each_optional_envelope_field_that_is_set(name: str) -> None:
    envelope = Envelope(properties={}, expires_at=1.5, **{name: "set"})
    shown = render.message(Delivery(id="1-1", delivery_count=1, enqueued_at=0.001, envelope=envelope, documents=()))
    assert (shown[name], shown["expires_at"], shown["priority"]) == ("set", 1.5, envelope.priority)
    assert all(other == name or shown.get(other) is None for other, _ in ENVELOPE_FIELDS)


def test_send_get_ack_nack_extend(acme) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "max_redeliveries": 1}, 201)
    body = {"messages": [{"documents": [{"data": "text", "properties": {"f": "a.txt"}},
                                        {"data_base64": base64.b64encode(b"\x00\xff").decode()}],
                          "properties": {"k": "v"}, "dedupe_id": "once", "priority": 3}]}
    (msg_id,) = acme("POST", "/v1/queues/jobs/messages", body, 201)["ids"]
    assert acme("POST", "/v1/queues/jobs/messages", body, 201)["ids"] == [msg_id], "dedupe"
    (m,) = acme("POST", "/v1/queues/jobs/get", {"max": 5}, 200)["messages"]
    assert (m["id"], m["delivery_count"], m["redelivered"], m["properties"], m["priority"]) == (
        msg_id, 1, False, {"k": "v"}, 3)
    assert m["documents"][0] == {"id": f"{msg_id}.1", "data": "text", "properties": {"f": "a.txt"}}
    assert base64.b64decode(m["documents"][1]["data_base64"]) == b"\x00\xff"
    assert acme("POST", "/v1/queues/jobs/extend", {"receipts": [m["receipt"]], "seconds": 60}, 200) == {"extended": 1}
    assert acme("POST", "/v1/queues/jobs/nack", {"ids": [msg_id], "reason": "try again"}, 200) == {
        "requeued": 1, "dead_lettered": 0}
    assert acme("POST", "/v1/queues/jobs/ack", {"receipts": [m["receipt"]]}, 200) == {"acked": 0}, "stale"
    (again,) = acme("POST", "/v1/queues/jobs/get", {"wait_ms": 5000}, 200)["messages"]
    assert (again["delivery_count"], again["redelivered"]) == (2, True)
    assert acme("POST", "/v1/queues/jobs/nack", {"receipts": [again["receipt"]], "reason": "bad"}, 200) == {
        "requeued": 0, "dead_lettered": 1}
    (dead,) = acme("GET", "/v1/queues/jobs/dead-letters", status=200)["messages"]
    assert (dead["id"], dead["reason"], dead["failed_deliveries"]) == (msg_id, "bad", 2)
    assert acme("POST", "/v1/queues/jobs/dead-letters/resend", {"all": True}, 200) == {"resent": 1}
    (third,) = acme("POST", "/v1/queues/jobs/get", {}, 200)["messages"]
    assert acme("POST", "/v1/queues/jobs/ack", {"ids": [third["id"]]}, 200) == {"acked": 1}
    assert acme("GET", "/v1/queues/jobs", status=200)["depth"] == 0


def test_a_release_gives_deliveries_back_at_once_not_counted_as_failed(acme) -> None:
    acme("PUT", "/v1/queues/stuck", {"model": "point_to_point", "max_redeliveries": 1}, 201)
    ids = send(acme, "stuck", "a", "b", "c")
    taken = acme("POST", "/v1/queues/stuck/get", {"max": 3}, 200)["messages"]
    released = acme("POST", "/v1/queues/stuck/release", {"ids": [ids[0]]}, 200)
    assert released == {"released": 1}
    assert acme("POST", "/v1/queues/stuck/release", {"receipts": [taken[1]["receipt"]]}, 200) == {"released": 1}
    assert acme("POST", "/v1/queues/stuck/release", {"ids": ids[:2]}, 200) == {"released": 0}, "no longer in flight"
    again = acme("POST", "/v1/queues/stuck/get", {"max": 3}, 200)["messages"]
    assert [(m["id"], m["delivery_count"], m["redelivered"]) for m in again] == [
        (ids[0], 2, True), (ids[1], 2, True)], "back at once, the third still in flight"
    # One redelivery is allowed: had a release counted as a failed delivery, this nack would dead-letter.
    assert acme("POST", "/v1/queues/stuck/nack", {"ids": [ids[0]], "reason": "x"}, 200) == {
        "requeued": 1, "dead_lettered": 0}
    assert acme("POST", "/v1/queues/stuck/release", {"ids": ids, "consumer": "one"}, 400)["error"]["code"] == \
        "invalid_input"
    assert acme("POST", "/v1/queues/stuck/release", {}, 400)["error"]["details"]["fields"] == {
        "json": {"ids": ["give either ids or receipts"]}}
    assert acme("POST", "/v1/queues/nowhere/release", {"ids": ids}, 404)["error"]["code"] == "not_found"
    acme("PUT", "/v1/queues/feed", {"model": "publish_subscribe"}, 201)
    acme("PUT", "/v1/queues/feed/subscribers/audit", {}, 201)
    (fed,) = send(acme, "feed", "f")
    assert [m["id"] for m in acme("POST", "/v1/queues/feed/get", {"subscriber": "audit"}, 200)["messages"]] == [fed]
    assert acme("POST", "/v1/queues/feed/release", {"ids": [fed], "subscriber": "audit"}, 200) == {"released": 1}
    assert [(sub["name"], sub["depth"], sub["in_flight"]) for sub in acme("GET", "/v1/queues/feed", status=200)[
        "subscribers"]] == [("audit", 1, 0)]


def test_a_release_frees_an_exclusive_queues_delivery_whoever_holds_it_and_keeps_the_order(acme) -> None:
    acme("PUT", "/v1/queues/ordered", {"model": "point_to_point", "access": "exclusive"}, 201)
    ids = send(acme, "ordered", "m1", "m2", "m3")
    held = acme("POST", "/v1/queues/ordered/get", {"max": 2, "consumer": "gone"}, 200)["messages"]
    assert [m["id"] for m in held] == ids[:2]
    assert acme("POST", "/v1/queues/ordered/release", {"ids": [ids[0]]}, 200) == {"released": 1}
    again = acme("POST", "/v1/queues/ordered/get", {"max": 5, "consumer": "gone"}, 200)["messages"]
    assert [(m["id"], m["redelivered"]) for m in again] == [(ids[0], True), (ids[2], False)], \
        "m1 before m3, as sent"


def test_a_get_acks_the_previous_batch_in_the_same_request(acme) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point"}, 201)
    acme("POST", "/v1/queues/jobs/messages", {"messages": [{"documents": [{"data": f"m{i}"}]} for i in range(5)]}, 201)
    first = acme("POST", "/v1/queues/jobs/get", {"max": 3}, 200)
    assert "acked" not in first, "a get given nothing to ack does not say it acked"
    receipts = [m["receipt"] for m in first["messages"]]
    second = acme("POST", "/v1/queues/jobs/get", {"max": 3, "ack": {"receipts": receipts}}, 200)
    assert second["acked"] == 3
    assert [m["documents"][0]["data"] for m in second["messages"]] == ["m3", "m4"]
    last = acme("POST", "/v1/queues/jobs/get", {"ack": {"ids": [m["id"] for m in second["messages"]]}}, 200)
    assert last == {"messages": [], "acked": 2}
    assert acme("POST", "/v1/queues/jobs/get", {"ack": {"receipts": receipts}}, 200)["acked"] == 0, "stale receipts"
    queue = acme("GET", "/v1/queues/jobs", status=200)
    assert (queue["depth"], queue["in_flight"], queue["totals"]["acked"]) == (0, 0, 5)
    for bad, field in (({"ack": {}}, "ids"), ({"ack": {"ids": ["a"], "receipts": receipts[:1]}}, "ids"),
                       ({"ack": {"receipts": ["a~01"]}}, "receipts"), ({"ack": {"subscriber": "s"}}, "subscriber"),
                       ({"ack": ["a~1"]}, "_schema")):
        error = acme("POST", "/v1/queues/jobs/get", bad, 400)["error"]
        assert list(error["details"]["fields"]["json"]["ack"]) == [field], error


@pytest.mark.parametrize("value", [
    [], ["a~1", "b~22"], ["a~1"] * 3, ["a~01"], ["a~1", 7], [None], "a~1", {"a": 1}, ["a~1", "", "b~0"],
    [["a~1"]], ["a~1", "x" * 70],
])
def test_a_list_of_ids_or_receipts_reads_as_fields_list_reads_it(value: Any) -> None:
    """StringList skips the per-item field on the hot path: the same values and the same errors."""
    def schema(field_type: type) -> ma.Schema:
        item = fields.String(validate=[validate.Regexp(r"^[^~]+~[1-9][0-9]*$"), validate.Length(1, 64)])
        return ma.Schema.from_dict({"r": field_type(item, validate=validate.Length(max=2))})()

    def outcome(s: ma.Schema) -> Any:
        try:
            return s.load({"r": value})
        except ma.ValidationError as exc:
            return exc.messages
    assert outcome(schema(StringList)) == outcome(schema(fields.List))


def test_send_and_get_errors(acme) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point"}, 201)
    missing = acme("POST", "/v1/queues/missing/messages", {"messages": [{"documents": [{"data": "x"}]}]}, 404)
    assert missing["error"]["details"] == {"queue": "missing"}
    error = acme("POST", "/v1/queues/jobs/messages", {"messages": [{"documents": [{"data": 1}]}]}, 400)["error"]
    assert error["details"] == {"field": "messages.0.documents.0.data"}
    acme("POST", "/v1/queues/jobs/messages", {"messages": []}, 400)
    acme("POST", "/v1/queues/jobs/get", {"max": 0}, 400)
    acme("POST", "/v1/queues/jobs/get", {"wait_ms": 20_001}, 400)
    acme("POST", "/v1/queues/jobs/ack", {}, 400)
    acme("POST", "/v1/queues/jobs/ack", {"ids": ["a"], "receipts": ["b"]}, 400)
    acme("DELETE", "/v1/queues/jobs/messages", {}, 400)
    big = {"messages": [{"documents": [{"data": "x" * 70_000}]}]}
    assert acme("POST", "/v1/queues/jobs/messages", big, 413)["error"]["code"] == "too_large"
    assert acme("GET", "/v1/queues/jobs", status=200)["depth"] == 0, "a refused send stores nothing"


def test_browse_delete_and_dead_letter_management(acme) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "max_redeliveries": 0}, 201)
    ids = send(acme, "jobs", *[f"m{i}" for i in range(5)])
    page = acme("GET", "/v1/queues/jobs/messages", status=200, limit=3)
    assert [m["id"] for m in page["messages"]] == ids[:3] and page["next"]
    rest = acme("GET", "/v1/queues/jobs/messages", status=200, limit=3, after=page["next"])
    assert [m["id"] for m in rest["messages"]] == ids[3:] and rest["next"] is None
    assert {m["state"] for m in rest["messages"]} == {"ready"}
    got = acme("POST", "/v1/queues/jobs/get", {"max": 2}, 200)["messages"]
    acme("POST", "/v1/queues/jobs/nack", {"ids": [m["id"] for m in got]}, 200)
    assert acme("DELETE", "/v1/queues/jobs/messages", {"ids": [ids[2]]}, 200) == {"deleted": 1}
    assert acme("DELETE", "/v1/queues/jobs/dead-letters", {"ids": [ids[0]]}, 200) == {"deleted": 1}
    assert acme("POST", "/v1/queues/jobs/dead-letters/resend", {"ids": [ids[1]]}, 200) == {"resent": 1}
    assert acme("DELETE", "/v1/queues/jobs/messages", {"all": True}, 200) == {"deleted": 3}
    assert acme("GET", "/v1/queues/jobs", status=200)["depth"] == 0
    acme("GET", "/v1/queues/jobs/messages", status=400, limit=0)


def test_browse_by_state_names_who_holds_each_delivery_and_since_when(acme, owner, other) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "ack_timeout_s": 30}, 201)
    ids = send(acme, "jobs", *[f"m{i}" for i in range(5)])
    acme("POST", "/v1/queues/jobs/get", {"max": 1, "consumer": "worker-1"}, 200)
    acme("POST", "/v1/queues/jobs/get", {"max": 1}, 200)
    tenant = owner("GET", "/v1/tenants?name=acme", status=200)["tenants"][0]["id"]
    as_acme = Client(acme.transport, owner.key, tenant=tenant)
    as_acme("POST", "/v1/queues/jobs/get", {"max": 1}, 200)
    page = acme("GET", "/v1/queues/jobs/messages", status=200, state="in_flight", limit=2)
    rest = acme("GET", "/v1/queues/jobs/messages", status=200, state="in_flight", limit=2, after=page["next"])
    held = page["messages"] + rest["messages"]
    key_id = acme.key.removeprefix("aq_").split("_", 1)[0]
    assert [(m["id"], m["state"], m["holder"]) for m in held] == [
        (ids[0], "in_flight", "worker-1"), (ids[1], "in_flight", f"key:{key_id}"), (ids[2], "in_flight", "owner")]
    assert rest["next"] is None
    assert all(m["enqueued_at"] <= m["delivered_at"] < m["deadline"] for m in held)
    ready = acme("GET", "/v1/queues/jobs/messages", status=200, state="ready")["messages"]
    assert [(m["id"], "holder" in m) for m in ready] == [(ids[3], False), (ids[4], False)]
    assert acme("GET", "/v1/queues/jobs/messages", status=200, state="scheduled") == {"messages": [], "next": None}
    error = acme("GET", "/v1/queues/jobs/messages", status=400, state="dead")["error"]
    assert error["code"] == "invalid_input" and "state" in str(error["details"])
    assert "ready" in str(error) and "in_flight" in str(error) and "scheduled" in str(error)
    acme("POST", "/v1/queues/jobs/release", {"ids": [ids[0]]}, 200)
    acme("POST", "/v1/queues/jobs/ack", {"ids": [ids[1]]}, 200)
    left = acme("GET", "/v1/queues/jobs/messages", status=200, state="in_flight")["messages"]
    assert [m["id"] for m in left] == [ids[2]]
    other_id = owner("GET", "/v1/tenants?name=other", status=200)["tenants"][0]["id"]
    as_other = Client(acme.transport, owner.key, tenant=other_id)
    assert as_other("GET", "/v1/queues/jobs/messages", status=404, state="in_flight")["error"]["code"] == "not_found"
    other("PUT", "/v1/queues/jobs", {"model": "point_to_point"}, 201)
    assert as_other("GET", "/v1/queues/jobs/messages", status=200, state="in_flight") == {"messages": [], "next": None}


def test_publish_subscribe_over_http(acme) -> None:
    acme("PUT", "/v1/queues/news", {"model": "publish_subscribe"}, 201)
    acme("PUT", "/v1/queues/news/subscribers/a", status=201)
    acme("PUT", "/v1/queues/news/subscribers/a", status=200)
    assert acme("POST", "/v1/queues/news/get", {"subscriber": "b"}, 200) == {"messages": []}
    (msg_id,) = send(acme, "news", "hello")
    info = acme("GET", "/v1/queues/news", status=200)
    assert [(s["name"], s["depth"]) for s in info["subscribers"]] == [("a", 1), ("b", 1)]
    (m,) = acme("POST", "/v1/queues/news/get", {"subscriber": "a"}, 200)["messages"]
    assert m["id"] == msg_id
    assert acme("POST", "/v1/queues/news/ack", {"ids": [msg_id], "subscriber": "a"}, 200) == {"acked": 1}
    acme("POST", "/v1/queues/news/get", {}, 400)
    acme("DELETE", "/v1/queues/news/subscribers/b", status=204)
    acme("DELETE", "/v1/queues/news/subscribers/b", status=404)
    assert [s["name"] for s in acme("GET", "/v1/queues/news", status=200)["subscribers"]] == ["a"]


def test_a_publish_past_the_chunk_bound_is_stored_whole_and_answered_once(acme) -> None:
    """4 queues x 1,000 messages: 4,000 copies, past ``send_journal.CHUNK_COPIES``, so stored in
    steps (the served node's own constant); the answer comes once every copy is made."""
    for q in ("b1", "b2", "b3", "b4"):
        acme("PUT", f"/v1/queues/{q}", {"model": "point_to_point", "topics": ["bulk/>"]}, 201)
    body = {"messages": [{"documents": [{"data": f"m{i}"}]} for i in range(1000)]}
    published = acme("POST", "/v1/topics/bulk/1/messages", body, 201)
    assert published["copies"] == 4000 and published["queues"] == ["b1", "b2", "b3", "b4"]
    for q in ("b1", "b2", "b3", "b4"):
        assert acme("GET", f"/v1/queues/{q}", status=200)["depth"] == 1000
    page = acme("GET", "/v1/queues/b4/messages", status=200, limit=1000)["messages"]
    assert [m["id"] for m in page] == published["ids"], "every copy, in the request's order"


def test_a_tenant_never_sees_another_tenants_data(acme, other, owner) -> None:
    acme("PUT", "/v1/queues/secret", {"model": "point_to_point"}, 201)
    acme("PUT", "/v1/queues/feed", {"model": "publish_subscribe"}, 201)
    acme("PUT", "/v1/queues/feed/subscribers/sub", status=201)
    (msg_id,) = send(acme, "secret", "acme's secret")
    send(acme, "feed", "acme's feed")
    for method, path, body in (
        ("GET", "/v1/queues/secret", None),
        ("POST", "/v1/queues/secret/get", {}),
        ("POST", "/v1/queues/secret/ack", {"ids": [msg_id]}),
        ("POST", "/v1/queues/secret/ack", {"receipts": [f"{msg_id}~1"]}),
        ("POST", "/v1/queues/secret/nack", {"ids": [msg_id]}),
        ("POST", "/v1/queues/secret/extend", {"ids": [msg_id]}),
        ("GET", "/v1/queues/secret/messages", None),
        ("DELETE", "/v1/queues/secret/messages", {"ids": [msg_id]}),
        ("DELETE", "/v1/queues/secret/messages", {"all": True}),
        ("GET", "/v1/queues/secret/dead-letters", None),
        ("GET", "/v1/queues/secret/dead-letters/reasons", None),
        ("POST", "/v1/queues/secret/dead-letters/resend", {"all": True}),
        ("DELETE", "/v1/queues/secret/dead-letters", {"ids": [msg_id]}),
        ("POST", "/v1/queues/secret/messages", {"messages": [{"documents": [{"data": "x"}]}]}),
        ("POST", "/v1/queues/feed/get", {"subscriber": "sub"}),
        ("GET", "/v1/queues/feed/messages?subscriber=sub", None),
        ("PUT", "/v1/queues/feed/subscribers/sub", None),
        ("DELETE", "/v1/queues/feed/subscribers/sub", None),
        ("DELETE", "/v1/queues/secret", None),
    ):
        assert other(method, path, body, 404)["error"]["code"] == "not_found", (method, path)
    assert other("GET", "/v1/queues", status=200) == {"queues": [], "next": None}
    other("PUT", "/v1/queues/secret", {"model": "point_to_point"}, 201)
    assert other("POST", "/v1/queues/secret/ack", {"ids": [msg_id]}, 200) == {"acked": 0}
    assert other("POST", "/v1/queues/secret/get", {}, 200) == {"messages": []}
    (m,) = acme("POST", "/v1/queues/secret/get", {}, 200)["messages"]
    assert m["documents"][0]["data"] == "acme's secret"
    (f,) = acme("POST", "/v1/queues/feed/get", {"subscriber": "sub"}, 200)["messages"]
    assert f["documents"][0]["data"] == "acme's feed"


def test_the_owner_acts_for_a_tenant_with_the_header(owner, http) -> None:
    created = owner("POST", "/v1/tenants", {"name": "managed"}, 201)
    as_tenant = Client(http, owner.key, tenant=created["id"])
    as_tenant("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
    assert Client(http, created["api_key"])("GET", "/v1/queues/q", status=200)["name"] == "q"
    owner("GET", "/v1/queues", status=400)
    Client(http, owner.key, tenant="t_000000000000")("GET", "/v1/queues", status=404)
    owner("DELETE", f"/v1/tenants/{created['id']}", status=204)


def test_the_owner_names_the_tenant_it_acts_for_by_id_or_by_name(owner, http) -> None:
    created = owner("POST", "/v1/tenants", {"name": "managed-by-name"}, 201)
    try:
        by_name = Client(http, owner.key, tenant="managed-by-name")
        by_name("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        send(by_name, "q", "hello")
        assert Client(http, created["api_key"])("GET", "/v1/queues/q", status=200)["depth"] == 1, "the tenant's own"
        assert Client(http, owner.key, tenant=created["id"])("GET", "/v1/queues/q", status=200)["depth"] == 1
        unknown_id = Client(http, owner.key, tenant="t_000000000000")("GET", "/v1/queues", status=404)["error"]
        unknown_name = Client(http, owner.key, tenant="nobody-has-this-name")("GET", "/v1/queues", status=404)["error"]
        assert unknown_name["code"] == unknown_id["code"] == "not_found"
        assert unknown_name["details"] == {"tenant": "nobody-has-this-name"}
        owner("PATCH", f"/v1/tenants/{created['id']}", {"name": "Café Ünïcode"}, 200)
        Client(http, owner.key, tenant="managed-by-name")("GET", "/v1/queues/q", status=404)
        # A header's bytes read as Latin-1: the name goes as its UTF-8 (what curl sends), or as Latin-1.
        for sent in ("Café Ünïcode".encode().decode("latin-1"), "Café Ünïcode"):
            assert Client(http, owner.key, tenant=sent)("GET", "/v1/queues/q", status=200)["name"] == "q"
        # Bytes that read as two tenants' names, as UTF-8 and as Latin-1, are refused, not guessed.
        utf8 = owner("POST", "/v1/tenants", {"name": "é-twin"}, 201)
        latin1 = owner("POST", "/v1/tenants", {"name": "é-twin".encode().decode("latin-1")}, 201)
        try:
            both = Client(http, owner.key, tenant=latin1["name"])("GET", "/v1/queues", status=409)["error"]
            assert both["details"]["tenants"] == sorted([utf8["id"], latin1["id"]])
            assert Client(http, owner.key, tenant=latin1["id"])("GET", "/v1/queues", status=200)["queues"] == []
        finally:
            for twin in (utf8, latin1):
                owner("DELETE", f"/v1/tenants/{twin['id']}", status=204)
    finally:
        owner("DELETE", f"/v1/tenants/{created['id']}", status=204)


NAME_RULE = "names are 1 to 128 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"


@pytest.mark.parametrize(("method", "path", "body", "rule"), [
    ("POST", "/v1/queues/news/get", {"subscriber": "-late"}, f"subscriber {NAME_RULE}"),
    ("POST", "/v1/queues/jobs/get", {"consumer": "worker 1"}, f"consumer {NAME_RULE}"),
    ("POST", "/v1/queues/jobs/ack", {"ids": ["1-1"], "subscriber": "a:b"}, f"subscriber {NAME_RULE}"),
    ("GET", "/v1/queues/news/messages?subscriber=%7Bx%7D", None, f"subscriber {NAME_RULE}"),
    ("PUT", "/v1/listeners/fwd", {"queue": "jobs/eu", "process": "forward"}, f"queue {NAME_RULE}"),
    ("POST", "/v1/queues/jobs/ack", {"receipts": ["1795461670403-000000000002"]},
     "a receipt is spelled as a get wrote it: <message id>~<delivery count>"),
    ("PUT", "/v1/queues/jobs", {"model": "point_to_point", "topics": ["orders/>/eu"]},
     "a topic pattern is levels of letters, digits, '.', '_' and '-' joined by '/', where a level may also be '*'"),
    ("POST", "/v1/topics/orders/*/messages", {"messages": [{"documents": [{"data": "x"}]}]},
     "a topic is levels of letters, digits, '.', '_' and '-' joined by '/'"),
    ("POST", "/v1/topics/messages", {"messages": [{"topic": "orders//eu", "documents": [{"data": "x"}]}]},
     "a topic is levels of letters, digits, '.', '_' and '-' joined by '/'"),
], ids=["subscriber", "consumer", "ack subscriber", "browse subscriber", "listener queue", "receipt",
        "topic pattern", "topic in the path", "topic of a message"])
def test_a_name_topic_or_pattern_that_breaks_its_rule_is_told_the_rule(acme, method: str, path: str, body: Any,
                                                                       rule: str) -> None:
    """A refused name says what a name may be, not only that it did not match a pattern."""
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point"}, 201)
    acme("PUT", "/v1/queues/news", {"model": "publish_subscribe"}, 201)
    error = acme(method, path, body, 400)["error"]
    assert error["code"] == "invalid_input"
    told = json.dumps(error)
    assert rule in told, told
    assert "pattern." not in told, "not the validator's own words"


def test_unknown_routes_and_methods_answer_in_the_error_shape(acme) -> None:
    assert acme("GET", "/v1/nothing-here", status=404)["error"]["code"] == "not_found"
    assert acme("PATCH", "/v1/queues", status=405)["error"]["code"] == "method_not_allowed"


def test_server_state_and_settings(owner, acme) -> None:
    state = owner("GET", "/v1/server", status=200)
    assert state["memory_state"] in {"green", "yellow", "orange", "red"} and state["memory_bytes"] > 0
    assert state["node_id"].startswith("n_") and state["incoming_rate_limit_per_minute"] == 0
    assert state["redelivery_delays_s"] == [0.05, 0.1, 0.15], "this test app runs the fast schedule"
    acme("GET", "/v1/server", status=403)
    owner("PATCH", "/v1/server", {"redelivery_delays_s": []}, 400)
    owner("PATCH", "/v1/server", {"dedupe_window_s": 0}, 400)
    changed = owner("PATCH", "/v1/server", {"redelivery_delays_s": [2, 3], "incoming_rate_limit_per_minute": 50},
                    200)
    try:
        assert (changed["redelivery_delays_s"], changed["incoming_rate_limit_per_minute"]) == ([2, 3], 50)
        acme("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        (msg_id,) = send(acme, "q", "m")
        (m,) = acme("POST", "/v1/queues/q/get", {}, 200)["messages"]
        acme("POST", "/v1/queues/q/nack", {"ids": [msg_id]}, 200)
        (page,) = [acme("GET", "/v1/queues/q/messages", status=200)["messages"]]
        assert page[0]["state"] == "scheduled"
        assert acme("POST", "/v1/queues/q/get", {}, 200) == {"messages": []}, "2 s, the new first delay"
    finally:
        owner("PATCH", "/v1/server", {"redelivery_delays_s": [0.05, 0.1, 0.15], "incoming_rate_limit_per_minute": 0},
              200)


def test_the_tenant_rate_limit_counts_send_requests_only(owner, http) -> None:
    """With the default 60 s window: the fourth send of a tenant limited to 3 gets 429."""
    created = owner("POST", "/v1/tenants", {"name": "limited", "rate_limit_per_minute": 3}, 201)
    limited = Client(http, created["api_key"])
    try:
        limited("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        limited("POST", "/v1/queues/missing/messages", {"messages": [{"documents": [{"data": "x"}]}]}, 404)
        limited("POST", "/v1/queues/q/messages", {"messages": []}, 400)
        for _ in range(3):
            send(limited, "q", *["m"] * 50)  # one request counts once, however many messages
            limited("POST", "/v1/queues/q/get", {"max": 1}, 200)  # gets are not counted
        error = limited("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "x"}]}]}, 429)
        assert error["error"]["code"] == "rate_limited"
        retry_after = int(limited.headers["Retry-After"])
        assert 55 <= retry_after <= 60 and error["error"]["details"]["retry_after"] == retry_after
        assert limited("GET", "/v1/queues/q", status=200)["depth"] == 147, "the refused send stored nothing"
        limited("POST", "/v1/queues/q/ack", {"ids": ["x"]}, 200)
    finally:
        owner("DELETE", f"/v1/tenants/{created['id']}", status=204)


def test_disk_quota_refuses_a_send_whole_and_acks_give_bytes_back(owner, http) -> None:
    created = owner("POST", "/v1/tenants", {"name": "quota", "disk_quota_bytes": 3000}, 201)
    t = Client(http, created["api_key"])
    try:
        t("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
        assert owner("GET", f"/v1/tenants/{created['id']}", status=200)["stored_bytes"] == 0
        send(t, "q", "x" * 1000, "y" * 1000)
        usage = owner("GET", f"/v1/tenants/{created['id']}", status=200)
        # 1,000 bytes of document and the footprint's ~360 of bookkeeping each (atomq.platform.queues.footprint)
        assert usage["messages"] == 2 and 2000 < usage["stored_bytes"] < 2800
        error = t("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "z" * 1000}]}]}, 507)
        assert error["error"]["code"] == "quota_exceeded"
        assert error["error"]["details"]["limit"] == 3000 and error["error"]["details"]["used"] == usage["stored_bytes"]
        assert t("GET", "/v1/queues/q", status=200)["depth"] == 2, "nothing of the refused send was stored"
        got = t("POST", "/v1/queues/q/get", {"max": 1}, 200)["messages"]
        t("POST", "/v1/queues/q/ack", {"ids": [got[0]["id"]]}, 200)
        after = owner("GET", f"/v1/tenants/{created['id']}", status=200)
        assert after["messages"] == 1 and after["stored_bytes"] < 1400, "the acked message gave its bytes back"
        send(t, "q", "z" * 1000)
        assert owner("GET", "/v1/server", status=200)["message_store_bytes"] >= 2000
    finally:
        owner("DELETE", f"/v1/tenants/{created['id']}", status=204)


def test_the_limits_on_one_tenant_are_server_settings_every_node_applies(owner, acme) -> None:
    server = owner("GET", "/v1/server", status=200)
    assert {name: server[name] for name in ("max_documents_per_message", "max_documents_per_send",
                                            "max_reply_bytes", "max_queues_per_tenant")} == {
        "max_documents_per_message": 100, "max_documents_per_send": 10_000,
        "max_reply_bytes": 16 * 1024 * 1024, "max_queues_per_tenant": 1000}
    for bad in ({"max_queues_per_tenant": 0}, {"max_reply_bytes": 10}, {"max_documents_per_message": 1001}):
        error = owner("PATCH", "/v1/server", bad, 400)
        assert set(error["error"]["details"]["fields"]["json"]) == set(bad)
    acme("PUT", "/v1/queues/first", {"model": "point_to_point"}, 201)
    owner("PATCH", "/v1/server", {"max_queues_per_tenant": 1, "max_documents_per_message": 2}, 200)
    try:
        error = acme("PUT", "/v1/queues/second", {"model": "point_to_point"}, 409)
        assert error["error"]["code"] == "too_many_queues" and error["error"]["details"]["limit"] == 1
        three = {"messages": [{"documents": [{"data": "a"}, {"data": "b"}, {"data": "c"}]}]}
        assert acme("POST", "/v1/queues/first/messages", three, 413)["error"]["details"]["limit"] == 2
    finally:
        owner("PATCH", "/v1/server", {"max_queues_per_tenant": 1000, "max_documents_per_message": 100}, 200)
        acme("DELETE", "/v1/queues/first", status=204)


def test_the_server_disk_limit_refuses_sends_of_every_tenant(owner, acme) -> None:
    acme("PUT", "/v1/queues/q", {"model": "point_to_point"}, 201)
    owner("PATCH", "/v1/server", {"max_disk_bytes": 1}, 200)
    try:
        error = acme("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "x"}]}]}, 507)
        assert error["error"]["code"] == "server_full"
        assert error["error"]["details"]["scope"] == "server" and error["error"]["details"]["limit"] == 1
    finally:
        owner("PATCH", "/v1/server", {"max_disk_bytes": 0}, 200)
    send(acme, "q", "fits again")
    owner("PATCH", "/v1/server", {"max_messages": 1}, 200)
    try:
        # A node sums every tenant's counters every few seconds: the limit holds within that.
        answers: list[Any] = []

        def refused() -> bool:
            answers.append(acme("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "x"}]}]}))
            return "error" in answers[-1]

        wait_until(refused, 5, "the server's message limit")
        error = answers[-1]
        assert error["error"]["code"] == "server_full" and error["error"]["details"]["setting"] == "max_messages"
        assert owner("GET", "/v1/server", status=200)["stored_messages"] >= 1
    finally:
        owner("PATCH", "/v1/server", {"max_messages": 0}, 200)
    send(acme, "q", "fits again")


def test_a_sync_queue_answers_once_synced_and_503_not_durable_is_safe_to_retry(owner, acme) -> None:
    assert acme("PUT", "/v1/queues/ledger", {"model": "point_to_point", "durability": "sync"}, 201)[
        "durability"] == "sync"
    body = {"messages": [{"documents": [{"data": "entry"}], "dedupe_id": "entry-1"}]}
    owner("PATCH", "/v1/server", {"min_replicas": 1, "sync_timeout_ms": 1500}, 200)
    try:
        error = acme("POST", "/v1/queues/ledger/messages", body, 503)["error"]
        assert error["code"] == "not_durable" and acme.headers["Retry-After"]
        assert error["details"]["synced_replicas"] == 0 and error["details"]["min_replicas"] == 1
        stored = error["details"]["ids"]
    finally:
        owner("PATCH", "/v1/server", {"min_replicas": 0, "sync_timeout_ms": 2000}, 200)
    assert acme("POST", "/v1/queues/ledger/messages", body, 201)["ids"] == stored, "the retry answers the original"
    assert acme("GET", "/v1/queues/ledger", status=200)["depth"] == 1
    assert owner("GET", "/v1/server", status=200)["sync_timeout_ms"] == 2000
    assert acme("PUT", "/v1/queues/ledger", {"model": "point_to_point", "durability": "always"}, 400)


def test_dead_letters_move_to_the_queue_a_queue_names_and_no_other_tenants(acme, other) -> None:
    acme("PUT", "/v1/queues/parked", {"model": "point_to_point"}, 201)
    made = acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "max_redeliveries": 0,
                                           "dead_letter_queue": "parked"}, 201)
    assert made["dead_letter_queue"] == "parked"
    (msg_id,) = send(acme, "jobs", "work")
    acme("POST", "/v1/queues/jobs/get", {}, 200)
    assert acme("POST", "/v1/queues/jobs/nack", {"ids": [msg_id], "reason": "boom"}, 200) == {
        "requeued": 0, "dead_lettered": 1}
    (moved,) = acme("POST", "/v1/queues/parked/get", {}, 200)["messages"]
    assert (moved["id"], moved["delivery_count"], moved["properties"]) == (msg_id, 1, {
        "dead_letter_reason": "boom", "dead_letter_source": "jobs", "dead_letter_delivery_count": 1})
    assert acme("GET", "/v1/queues/jobs", status=200)["dead_letters"] == 0
    acme("PUT", "/v1/queues/feed", {"model": "publish_subscribe"}, 201)
    for target, status in (("jobs", 400), ("feed", 400), ("nowhere", 400), ("bad name!", 400)):
        error = acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "dead_letter_queue": target}, status)
        assert error["error"]["details"]["field"] == "dead_letter_queue", target
    other("PUT", "/v1/queues/theirs", {"model": "point_to_point"}, 201)
    error = acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "dead_letter_queue": "theirs"}, 400)
    assert "does not exist" in error["error"]["message"], "another tenant's queue is no queue of this one"
    cleared = acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "dead_letter_queue": ""}, 200)
    assert cleared["dead_letter_queue"] == ""


# -- destination limits (v1.1) -------------------------------------------------------------


def test_a_full_queue_refuses_a_send_whole_with_queue_full(acme) -> None:
    limits = {"max_messages": 2, "max_bytes": 10_000, "max_message_bytes": 200, "max_dead_letters": 5}
    created = acme("PUT", "/v1/queues/q", {"model": "point_to_point", **limits}, 201)
    assert {name: created[name] for name in limits} == limits
    assert (created["overflow"], created["overflow_to_dead_letters"], created["held_bytes"]) == ("reject_new",
                                                                                               False, 0)
    send(acme, "q", "a", "b")
    error = acme("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "c"}]}]}, 507)["error"]
    assert error["code"] == "queue_full"
    assert error["details"] == {"queue": "q", "limit": "max_messages", "max": 2, "count": 2, "overflow": "reject_new"}
    big = {"messages": [{"documents": [{"data": "x" * 300}]}]}
    assert acme("POST", "/v1/queues/q/messages", big, 413)["error"]["details"]["field"] == "messages.0"
    queue = acme("GET", "/v1/queues/q", status=200)
    assert queue["depth"] == 2 and queue["held_bytes"] == 2 * (len('1|{"v":1}') + 2)
    for bad in ({"max_messages": -1}, {"overflow": "drop_newest"}, {"max_bytes": 2**54},
                {"overflow_to_dead_letters": "yes"}):
        error = acme("PUT", "/v1/queues/q", {"model": "point_to_point", **bad}, 400)["error"]
        assert set(error["details"]["fields"]["json"]) == set(bad)


def test_a_dropping_queue_says_how_many_it_dropped_and_dead_letters_them(acme) -> None:
    acme("PUT", "/v1/queues/q", {"model": "point_to_point", "max_messages": 2, "overflow": "drop_oldest",
                                 "overflow_to_dead_letters": True}, 201)
    send(acme, "q", "a", "b")
    reply = acme("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "c"}]}]}, 201)
    assert reply["dropped"] == 1 and len(reply["ids"]) == 1
    (dead,) = acme("GET", "/v1/queues/q/dead-letters", status=200, reason="overflow")["messages"]
    assert (dead["documents"][0]["data"], dead["reason"]) == ("a", "overflow")
    totals = acme("GET", "/v1/queues/q", status=200)["totals"]
    assert totals["dropped"] == 1 and totals["dead_lettered"] == 1


def test_a_flow_control_queue_holds_a_send_until_room_frees_then_429(owner, acme, http) -> None:
    import threading

    acme("PUT", "/v1/queues/q", {"model": "point_to_point", "max_messages": 1, "overflow": "flow_control"}, 201)
    send(acme, "q", "a")
    owner("PATCH", "/v1/server", {"flow_control_wait_ms": 200}, 200)
    try:
        two = {"messages": [{"documents": [{"data": "b"}]}, {"documents": [{"data": "c"}]}]}
        error = acme("POST", "/v1/queues/q/messages", two, 507)["error"]  # never fits: not held
        assert error["code"] == "queue_full" and "alone is past it" in error["message"]
        error = acme("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "b"}]}]}, 429)
        assert error["error"]["code"] == "queue_full" and acme.headers["Retry-After"] == "1"
        owner("PATCH", "/v1/server", {"flow_control_wait_ms": 20_000}, 200)
        held = Client(http, acme.key)
        answers: list[Any] = []
        sender = threading.Thread(target=lambda: answers.append(
            held("POST", "/v1/queues/q/messages", {"messages": [{"documents": [{"data": "b"}]}]})))
        sender.start()
        sender.join(0.5)
        assert sender.is_alive(), "the send is held while the queue is full"
        (got,) = acme("POST", "/v1/queues/q/get", {"max": 1}, 200)["messages"]
        acme("POST", "/v1/queues/q/ack", {"ids": [got["id"]]}, 200)
        sender.join(10)
        assert not sender.is_alive() and len(answers[0]["ids"]) == 1, "stored once the ack made room"
        (b,) = acme("POST", "/v1/queues/q/get", {"max": 5}, 200)["messages"]
        assert b["documents"][0]["data"] == "b"
    finally:
        owner("PATCH", "/v1/server", {"flow_control_wait_ms": 5000}, 200)


def test_a_held_publish_answers_at_once_when_another_of_its_queues_refuses_for_good(owner, acme, http) -> None:
    """Held for a flow_control queue, a publish to many topics is tried again once room frees; a
    queue of its that rejects new messages then answers it (507), not the flow-control wait (429)."""
    import threading

    acme("PUT", "/v1/queues/slow", {"model": "point_to_point", "max_messages": 1, "overflow": "flow_control",
                                     "topics": ["slow/>"]}, 201)
    acme("PUT", "/v1/queues/strict", {"model": "point_to_point", "max_messages": 1, "topics": ["strict/>"]}, 201)
    send(acme, "slow", "a")
    send(acme, "strict", "x")
    owner("PATCH", "/v1/server", {"flow_control_wait_ms": 20_000}, 200)
    try:
        held = Client(http, acme.key)
        answers: list[Any] = []
        body = {"messages": [{"topic": "slow/1", "documents": [{"data": "b"}]},
                             {"topic": "strict/1", "documents": [{"data": "y"}]}]}
        sender = threading.Thread(target=lambda: answers.append(held("POST", "/v1/topics/messages", body, 507)))
        sender.start()
        sender.join(0.5)
        assert sender.is_alive(), "held while the flow_control queue is full"
        (got,) = acme("POST", "/v1/queues/slow/get", {"max": 1}, 200)["messages"]
        acme("POST", "/v1/queues/slow/ack", {"ids": [got["id"]]}, 200)
        sender.join(10)
        assert not sender.is_alive(), "answered once the strict queue refused, not at the end of the wait"
        error = answers[0]["error"]
        assert (error["code"], error["details"]["queue"], error["details"]["overflow"]) == (
            "queue_full", "strict", "reject_new")
        (stored,) = acme("POST", "/v1/queues/slow/get", {"max": 5}, 200)["messages"]
        assert error["details"]["ids"] == [stored["id"], None], "what was stored before the refusal"
    finally:
        owner("PATCH", "/v1/server", {"flow_control_wait_ms": 5000}, 200)


# -- topics, priorities, expiry (v1.1) ----------------------------------------------------


def test_a_publish_reaches_the_queues_whose_patterns_match(acme, other) -> None:
    acme("PUT", "/v1/queues/input", {"model": "point_to_point", "topics": ["boomi/test/>"]}, 201)
    acme("PUT", "/v1/queues/errors", {"model": "point_to_point", "topics": ["boomi/errors/echo-service/>"]}, 201)
    other("PUT", "/v1/queues/input", {"model": "point_to_point", "topics": [">"]}, 201)
    body = {"messages": [{"documents": [{"data": "x"}]}]}
    published = acme("POST", "/v1/topics/boomi/test/one/messages", body, 201)
    assert published["queues"] == ["input"] and len(published["ids"]) == 1
    (m,) = acme("POST", "/v1/queues/input/get", {"max": 5}, 200)["messages"]
    assert (m["id"], m["topic"]) == (published["ids"][0], "boomi/test/one")
    assert other("POST", "/v1/queues/input/get", {"max": 5}, 200)["messages"] == [], "another tenant's queue"
    nowhere = acme("POST", "/v1/topics/nowhere/messages", body, 201)
    assert (nowhere["ids"], nowhere["queues"], nowhere["copies"]) == ([], [], 0)
    assert acme("GET", "/v1/queues/input", status=200)["topics"] == ["boomi/test/>"]
    assert acme("POST", "/v1/topics/a/*/messages", body, 400)["error"]["details"]["field"] == "topic"
    refused = acme("PUT", "/v1/queues/input", {"model": "point_to_point", "topics": ["a/>/b"]}, 400)
    assert set(refused["error"]["details"]["fields"]["json"]) == {"topics"}, "the document's pattern refuses it"


def test_a_send_or_publish_that_stores_nothing_says_so(acme) -> None:
    acme("PUT", "/v1/queues/news", {"model": "publish_subscribe"}, 201)
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "topics": ["jobs/>"]}, 201)
    acme("PUT", "/v1/queues/alerts", {"model": "publish_subscribe", "topics": ["alerts/>"]}, 201)
    two = {"messages": [{"documents": [{"data": "a"}]}, {"documents": [{"data": "b"}]}]}

    lost = acme("POST", "/v1/queues/news/messages", two, 201)
    assert len(lost["ids"]) == 2 and lost["copies"] == 0
    (warning,) = lost["warnings"]
    assert (warning["code"], warning["queue"], warning["messages"]) == ("no_subscribers", "news", 2)
    assert "has no subscribers" in warning["message"] and "atomq subscribers add news" in warning["message"]
    assert acme("GET", "/v1/queues/news", status=200)["totals"]["sent"] == 2
    acme("PUT", "/v1/queues/news/subscribers/a", status=201)
    acme("PUT", "/v1/queues/news/subscribers/b", status=201)
    assert acme("POST", "/v1/queues/news/messages", two, 201)["copies"] == 4, "each message to each subscriber"
    assert [s["depth"] for s in acme("GET", "/v1/queues/news", status=200)["subscribers"]] == [2, 2]
    stored = acme("POST", "/v1/queues/jobs/messages", two, 201)
    assert (stored["copies"], stored["warnings"]) == (2, [])

    nowhere = acme("POST", "/v1/topics/nowhere/at/all/messages", two, 201)
    assert (nowhere["ids"], nowhere["queues"], nowhere["copies"]) == ([], [], 0)
    (warning,) = nowhere["warnings"]
    assert (warning["code"], warning["topic"], warning["messages"]) == ("no_queue_attracts_topic", "nowhere/at/all", 2)
    unheard = acme("POST", "/v1/topics/alerts/fire/messages", two, 201)
    assert (unheard["queues"], unheard["copies"], len(unheard["ids"])) == (["alerts"], 0, 2)
    (warning,) = unheard["warnings"]
    assert (warning["code"], warning["topic"], warning["queues"]) == ("no_subscribers", "alerts/fire", ["alerts"])

    def message(topic: str) -> dict[str, Any]:
        return {"topic": topic, "documents": [{"data": topic}]}

    body = {"messages": [message("jobs/1"), message("nowhere"), message("alerts/x"), message("nowhere")]}
    many = acme("POST", "/v1/topics/messages", body, 201)
    assert many["copies"] == 1 and many["ids"][1] is None and many["ids"][2] is not None
    assert [(w["code"], w["topic"], w["messages"]) for w in many["warnings"]] == [
        ("no_queue_attracts_topic", "nowhere", 2), ("no_subscribers", "alerts/x", 1)]


def test_one_request_publishes_each_message_to_its_own_topic(acme, other) -> None:
    acme("PUT", "/v1/queues/echo", {"model": "point_to_point", "topics": ["boomi/echo/>"]}, 201)
    acme("PUT", "/v1/queues/errors", {"model": "point_to_point", "topics": ["boomi/errors/>"], "max_messages": 1}, 201)
    other("PUT", "/v1/queues/all", {"model": "point_to_point", "topics": [">"]}, 201)

    def message(topic: str, text: str) -> dict[str, Any]:
        return {"topic": topic, "documents": [{"data": text}], "dedupe_id": text}

    body = {"messages": [message("boomi/echo/1", "a"), message("nowhere", "b"), message("boomi/errors/x", "c")]}
    published = acme("POST", "/v1/topics/messages", body, 201)
    assert published["topics"] == {"boomi/echo/1": ["echo"], "boomi/errors/x": ["errors"], "nowhere": []}
    assert published["ids"][1] is None and None not in (published["ids"][0], published["ids"][2])
    got = acme("POST", "/v1/queues/echo/get", {"max": 5}, 200)["messages"]
    assert [(m["id"], m["topic"]) for m in got] == [(published["ids"][0], "boomi/echo/1")]
    assert other("POST", "/v1/queues/all/get", {"max": 5}, 200)["messages"] == [], "another tenant's queue"
    # The errors queue is full: its message is refused, and the error names what was stored before.
    body = {"messages": [message("boomi/echo/2", "d"), message("boomi/errors/y", "e")]}
    refused = acme("POST", "/v1/topics/messages", body, 507)["error"]
    assert refused["code"] == "queue_full" and refused["details"]["ids"][1] is None
    (stored,) = acme("POST", "/v1/queues/echo/get", {"max": 5}, 200)["messages"]
    assert (stored["id"], stored["topic"]) == (refused["details"]["ids"][0], "boomi/echo/2")
    bad = {"messages": [message("boomi/echo/3", "f"), {"documents": [{"data": "g"}]}]}
    assert acme("POST", "/v1/topics/messages", bad, 400)["error"]["details"]["field"] == "messages.1.topic"
    assert acme("GET", "/v1/queues/echo", status=200)["depth"] == 0, "a bad request stores nothing"


def test_priorities_and_expiry_over_http(acme) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "message_ttl_s": 60, "on_expire": "discard"}, 201)
    body = {"messages": [{"documents": [{"data": "low"}], "priority": 1},
                         {"documents": [{"data": "plain"}]},
                         {"documents": [{"data": "high"}], "priority": 9, "ttl_s": 30}]}
    acme("POST", "/v1/queues/jobs/messages", body, 201)
    info = acme("GET", "/v1/queues/jobs", status=200)
    assert info["depth_by_priority"] == {"9": 1, "4": 1, "1": 1}
    assert (info["message_ttl_s"], info["on_expire"]) == (60, "discard")
    got = acme("POST", "/v1/queues/jobs/get", {"max": 3}, 200)["messages"]
    assert [(m["documents"][0]["data"], m["priority"]) for m in got] == [("high", 9), ("plain", 4), ("low", 1)]
    assert got[0]["expires_at"] - got[0]["enqueued_at"] == pytest.approx(30, abs=0.01), "ttl_s beats the queue's 60"
    bad = {"messages": [{"documents": [{"data": "x"}], "ttl_s": 0}]}
    assert acme("POST", "/v1/queues/jobs/messages", bad, 400)["error"]["details"]["field"] == "messages.0.ttl_s"


def test_delayed_delivery_over_http(acme) -> None:
    assert acme("PUT", "/v1/queues/later", {"model": "point_to_point", "delay_s": 60}, 201)["delay_s"] == 60
    body = {"messages": [{"documents": [{"data": "the send's second"}]},
                         {"documents": [{"data": "at once"}], "delay_s": 0},
                         {"documents": [{"data": "its own minute"}], "delay_s": 60}], "delay_s": 1}
    soon, now, minute = acme("POST", "/v1/queues/later/messages", body, 201)["ids"]
    (queue_default,) = send(acme, "later", "the queue's minute")
    info = acme("GET", "/v1/queues/later", status=200)
    assert (info["depth"], info["scheduled"], info["delayed"]) == (4, 3, 3)
    waiting = acme("GET", "/v1/queues/later/messages", status=200, state="scheduled")["messages"]
    assert {m["id"] for m in waiting} - {soon} == {minute, queue_default}, "the second's may be due already"
    for m in waiting:
        assert m["delivery_count"] == 0 and m["due_at"] > m["enqueued_at"]
    assert [m["id"] for m in acme("POST", "/v1/queues/later/get", {"max": 10}, 200)["messages"]] == [now]
    # A long poll returns when the second's message falls due.
    due = acme("POST", "/v1/queues/later/get", {"max": 10, "wait_ms": 20_000}, 200)["messages"]
    assert [(m["id"], m["delivery_count"]) for m in due] == [(soon, 1)]
    assert acme("GET", "/v1/queues/later", status=200)["delayed"] == 2
    acme("PUT", "/v1/queues/spread", {"model": "point_to_point", "topics": ["news/>"]}, 201)
    published = acme("POST", "/v1/topics/news/eu/messages", {"messages": [{"documents": [{"data": "n"}]}],
                                                              "delay_s": 60}, 201)
    assert published["queues"] == ["spread"] and acme("GET", "/v1/queues/spread", status=200)["delayed"] == 1
    for bad, field in (({"messages": [{"documents": [{"data": "x"}]}], "delay_s": -1}, "delay_s"),
                       ({"messages": [{"documents": [{"data": "x"}], "delay_s": "1"}]}, "messages.0.delay_s"),
                       ({"messages": [{"documents": [{"data": "x"}], "delay_s": 86_401}]}, "messages.0.delay_s")):
        assert acme("POST", "/v1/queues/later/messages", bad, 400)["error"]["details"]["field"] == field
    acme("PUT", "/v1/queues/ordered", {"model": "point_to_point", "access": "exclusive"}, 201)
    refused = acme("POST", "/v1/queues/ordered/messages", body, 400)["error"]
    assert (refused["code"], refused["details"]["field"]) == ("invalid_input", "delay_s")
    assert acme("PUT", "/v1/queues/ordered", {"model": "point_to_point", "delay_s": 5}, 400)["error"]["details"][
        "field"] == "delay_s"


def test_dead_letters_by_reason_over_http(acme) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "max_redeliveries": 0}, 201)
    past = time.time() - 1
    expired = acme("POST", "/v1/queues/jobs/messages", {"messages": [
        {"documents": [{"data": f"late {i}"}], "expires_at": past} for i in range(3)]}, 201)["ids"]
    nacked = send(acme, "jobs", "a", "b")
    got = acme("POST", "/v1/queues/jobs/get", {"max": 10}, 200)["messages"]
    assert [m["id"] for m in got] == nacked, "the expired are never delivered"
    acme("POST", "/v1/queues/jobs/nack", {"ids": nacked, "reason": "bad input"}, 200)
    assert acme("GET", "/v1/queues/jobs/dead-letters/reasons", status=200) == {
        "reasons": [{"reason": "expired", "count": 3}, {"reason": "bad input", "count": 2}],
        "counted": 5, "complete": True}
    page = acme("GET", "/v1/queues/jobs/dead-letters", status=200, reason="expired", limit=2)
    assert [m["id"] for m in page["messages"]] == expired[:2] and page["next"]
    rest = acme("GET", "/v1/queues/jobs/dead-letters", status=200, reason="expired", after=page["next"])
    assert [(m["id"], m["reason"]) for m in rest["messages"]] == [(expired[2], "expired")]
    for body in ({"reason": "expired", "all": True}, {"reason": ""}, {"reason": "expired", "ids": [nacked[0]]}):
        assert acme("POST", "/v1/queues/jobs/dead-letters/resend", body, 400)["error"]["code"] == "invalid_input"
    acme("GET", "/v1/queues/jobs/dead-letters", status=400, reason="")
    assert acme("POST", "/v1/queues/jobs/dead-letters/resend", {"reason": "expired"}, 200) == {"resent": 3}
    assert acme("DELETE", "/v1/queues/jobs/dead-letters", {"reason": "bad input"}, 200) == {"deleted": 2}
    assert acme("GET", "/v1/queues/jobs", status=200)["dead_letters"] == 0
    again = acme("POST", "/v1/queues/jobs/get", {"max": 10}, 200)["messages"]
    assert [m["id"] for m in again] == expired and all("expires_at" not in m for m in again)


def test_a_page_that_holds_the_last_item_has_no_next(acme, owner) -> None:
    acme("PUT", "/v1/queues/jobs", {"model": "point_to_point", "max_redeliveries": 0}, 201)
    first = send(acme, "jobs", *[f"m{i}" for i in range(5)])
    acme("POST", "/v1/queues/jobs/get", {"max": 5}, 200)
    acme("POST", "/v1/queues/jobs/release", {"ids": first[:2]}, 200)
    acme("POST", "/v1/queues/jobs/nack", {"ids": first[2:], "reason": "bad input"}, 200)
    later = send(acme, "jobs", "n1", "n2")  # queued, dead, queued: each view skips the other's

    def pages(path: str, limit: int, **query: Any) -> list[tuple[list[str], bool]]:
        out, after = [], None
        while True:
            page = acme("GET", path, status=200, limit=limit, after=after, **query)
            out.append(([m["id"] for m in page["messages"]], page["next"] is not None))
            if (after := page["next"]) is None:
                return out

    queued = first[:2] + later
    assert pages("/v1/queues/jobs/messages", 4) == [(queued, False)], "one page of all four, nothing next"
    assert pages("/v1/queues/jobs/messages", 2) == [(queued[:2], True), (queued[2:], False)]
    assert pages("/v1/queues/jobs/messages", 5) == [(queued, False)]
    for query in ({}, {"reason": "bad input"}):
        assert pages("/v1/queues/jobs/dead-letters", 3, **query) == [(first[2:], False)], query
        assert pages("/v1/queues/jobs/dead-letters", 2, **query) == [(first[2:4], True), (first[4:], False)], query
    assert pages("/v1/queues/jobs/dead-letters", 3, reason="expired") == [([], False)]

    acme("PUT", "/v1/queues/other", {"model": "point_to_point"}, 201)
    for name in ("a", "b"):
        acme("PUT", f"/v1/listeners/{name}", {"queue": "jobs", "process": "forward", "settings": {"to": "other"}}, 201)
    assert acme("GET", "/v1/queues", status=200, limit=2)["next"] is None
    assert acme("GET", "/v1/queues", status=200, limit=1)["next"] == "jobs"
    assert acme("GET", "/v1/listeners", status=200, limit=2)["next"] is None
    assert acme("GET", "/v1/listeners", status=200, limit=1)["next"] is not None
    tenants = owner("GET", "/v1/tenants", status=200, limit=1000)
    assert tenants["next"] is None
    exact = owner("GET", "/v1/tenants", status=200, limit=len(tenants["tenants"]))
    assert (exact["tenants"], exact["next"]) == (tenants["tenants"], None)


def test_a_last_value_queue_over_http(acme) -> None:
    body = {"model": "point_to_point", "last_value": True, "last_value_key": "service"}
    created = acme("PUT", "/v1/queues/checkpoints", body, 201)
    assert (created["last_value"], created["last_value_key"]) == (True, "service")

    def checkpoint(service: str, offset: int) -> dict[str, Any]:
        return {"documents": [{"data": str(offset)}], "properties": {"service": service}}

    acme("POST", "/v1/queues/checkpoints/messages",
         {"messages": [checkpoint("echo", 1), checkpoint("sum", 1), checkpoint("echo", 2)]}, 201)
    (in_flight,) = acme("POST", "/v1/queues/checkpoints/get", {"max": 1}, 200)["messages"]
    assert in_flight["documents"][0]["data"] == "1" and in_flight["properties"] == {"service": "sum"}
    acme("POST", "/v1/queues/checkpoints/messages", {"messages": [checkpoint("sum", 2)]}, 201)
    browsed = acme("GET", "/v1/queues/checkpoints/messages", status=200)["messages"]
    assert [(m["properties"]["service"], m["documents"][0]["data"], m["state"]) for m in browsed] == [
        ("sum", "1", "in_flight"), ("echo", "2", "ready"), ("sum", "2", "ready")]
    assert acme("POST", "/v1/queues/checkpoints/nack", {"receipts": [in_flight["receipt"]]}, 200) == {
        "requeued": 0, "dead_lettered": 0}, "superseded while in flight: dropped, not redelivered"
    info = acme("GET", "/v1/queues/checkpoints", status=200)
    assert (info["depth"], info["in_flight"], info["totals"]["superseded"]) == (2, 0, 2)
    refused = acme("PUT", "/v1/queues/feed", {"model": "publish_subscribe", "last_value": True}, 400)
    assert refused["error"]["details"]["field"] == "last_value"
    acme("PUT", "/v1/queues/checkpoints", {"model": "point_to_point", "last_value": "yes"}, 400)


def test_a_queue_ordered_by_group_over_http(acme) -> None:
    created = acme("PUT", "/v1/queues/payments", {"model": "point_to_point", "ordering": "group"}, 201)
    assert created["ordering"] == "group"
    body = {"messages": [{"documents": [{"data": d}], "group": g}
                         for d, g in (("open", "acct|17"), ("debit", "acct|17"), ("open", "acct-42"))]}
    ids = acme("POST", "/v1/queues/payments/messages", body, 201)["ids"]
    got = acme("POST", "/v1/queues/payments/get", {"max": 10}, 200)["messages"]
    assert [(m["id"], m["group"]) for m in got] == [(ids[0], "acct|17"), (ids[2], "acct-42")]
    browsed = acme("GET", "/v1/queues/payments/messages", status=200)["messages"]
    assert [(m["state"], m["group"]) for m in browsed] == [("in_flight", "acct|17"), ("ready", "acct|17"),
                                                          ("in_flight", "acct-42")]
    assert acme("GET", "/v1/queues/payments", status=200)["depth"] == 1
    acme("POST", "/v1/queues/payments/ack", {"receipts": [got[0]["receipt"]]}, 200)
    assert [m["id"] for m in acme("POST", "/v1/queues/payments/get", {"max": 10}, 200)["messages"]] == [ids[1]]
    bad = acme("POST", "/v1/queues/payments/messages", {"messages": [{"documents": [{"data": "x"}], "group": "a b"}]},
               400)
    assert bad["error"]["details"]["field"] == "messages.0.group"
    assert acme("PUT", "/v1/queues/payments", {"model": "point_to_point", "ordering": "fifo"}, 400)
    assert acme("PUT", "/v1/queues/payments", {"model": "point_to_point", "ordering": "none"}, 200)["ordering"] == \
        "none"


def test_an_exclusive_queue_over_http(acme) -> None:
    created = acme("PUT", "/v1/queues/input", {"model": "point_to_point", "access": "exclusive"}, 201)
    assert (created["access"], created["consumers"]) == ("exclusive", [])
    ids = send(acme, "input", "m1", "m2", "m3")
    active = acme("POST", "/v1/queues/input/get", {"max": 2, "consumer": "one"}, 200)
    assert active["active"] is True and [m["id"] for m in active["messages"]] == ids[:2]
    assert acme("POST", "/v1/queues/input/get", {"max": 5, "consumer": "two"}, 200) == {
        "messages": [], "active": False}
    first, second = (m["receipt"] for m in active["messages"])
    assert acme("POST", "/v1/queues/input/ack", {"receipts": [first], "consumer": "two"}, 200) == {"acked": 0}
    assert acme("POST", "/v1/queues/input/nack", {"receipts": [first], "consumer": "one"}, 200) == {
        "requeued": 1, "dead_lettered": 0}
    assert acme("POST", "/v1/queues/input/get", {"max": 5, "consumer": "one"}, 200)["messages"] == [], \
        "m3 waits behind m1's redelivery"
    assert acme("POST", "/v1/queues/input/extend", {"receipts": [second], "consumer": "one"}, 200) == {"extended": 1}
    info = acme("GET", "/v1/queues/input", status=200)
    assert [(c["name"], c["active"]) for c in info["consumers"]] == [("one", True), ("two", False)]
    error = acme("POST", "/v1/queues/input/get", {"max": 1}, 400)["error"]
    assert error["details"]["field"] == "consumer"
    acme("POST", "/v1/queues/input/get", {"consumer": "bad name"}, 400)
    refused = acme("PUT", "/v1/queues/feed", {"model": "publish_subscribe", "access": "exclusive"}, 400)
    assert refused["error"]["details"]["field"] == "access"
    shared = acme("POST", "/v1/queues/input2/get", {"consumer": "x"}, 404)
    assert shared["error"]["code"] == "not_found"
