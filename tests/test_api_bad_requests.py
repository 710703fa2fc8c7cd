"""Whatever a client sends, the API answers in its error shape, never with a 500.

Bad numbers, deep nesting and malformed bodies get 400 naming the field,
never a stored value that comes back as invalid JSON; server settings are
bounded; a method a route does not take gets 405 with ``Allow`` and adds no
metrics series. Most cases run on the app in this process (fast, on real
Valkey); the 405 also against a served node (several gunicorn workers).
"""

from __future__ import annotations

import logging
import math
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from atomq import defaults
from atomq.api import create_app
from atomq.api.latency import KNOWN_METHODS, OTHER_METHOD
from atomq.api.services import LongPollLimiter, Services
from atomq.api.wire import strict_json
from atomq.errors import InvalidInput
from atomq.node import slow_clients
from atomq.platform import QueueServer
from atomq.platform.guards.server_settings import ServerSettings, ServerSettingsStore
from atomq.platform.queues.queue_settings import QueueSettings
from atomq.platform.store import keys as k
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.storage import Storage
from atomq.tenants import TenantStore
from support.in_process_app import OWNER_KEY, InProcessApp, error_of, send_body, strict_loads
from support.ports import free_port
from support.served_node import AtomqServe, ServeFactory
from support.waiting import wait_until


def named_fields(error: dict[str, Any]) -> set[str]:
    """The fields an invalid-input error names: its own field, or those of its schema's messages."""
    details = error["details"]
    if "field" in details:
        return {details["field"]}
    return {name for location in details.get("fields", {}).values() for name in location}


@pytest.fixture(scope="module")
def app(valkey: EmbeddedValkey) -> Iterator[InProcessApp]:
    with InProcessApp(valkey.client()) as app:
        yield app


# -- numbers JSON does not have, numbers out of range ----------------------------------------


NON_FINITE = [
    # (method, path, owner?, body text, the field the error names)
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x"}],"expires_at":NaN}]}', "messages.0.expires_at"),
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x"}],"expires_at":Infinity}]}', "messages.0.expires_at"),
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x"}],"expires_at":1e400}]}', "messages.0.expires_at"),
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x"}],"expires_at":1e999999}]}', "messages.0.expires_at"),
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x"}],"properties":{"p":NaN}}]}', "messages.0.properties.p"),
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x","properties":{"a":[1,-Infinity]}}]}]}',
     "messages.0.documents.0.properties.a.1"),
    ("POST", "/v1/queues/orders/messages", False,
     '{"messages":[{"documents":[{"data":"x"}],"properties":{"p":-1e400}}]}', "messages.0.properties.p"),
    ("PUT", "/v1/queues/fresh", False, '{"model":"point_to_point","ack_timeout_s":NaN}', "ack_timeout_s"),
    ("POST", "/v1/queues/orders/get", False, '{"max":Infinity}', "max"),
    ("POST", "/v1/queues/orders/extend", False, '{"ids":["1-0"],"seconds":NaN}', "seconds"),
    ("PUT", "/v1/listeners/l1", False,
     '{"queue":"orders","process":"p","settings":{"x":NaN}}', "settings.x"),
    ("PATCH", "/v1/server", True, '{"dedupe_window_s":NaN}', "dedupe_window_s"),
    ("PATCH", "/v1/server", True, '{"redelivery_delays_s":[1,Infinity]}', "redelivery_delays_s.1"),
    ("POST", "/v1/tenants", True, '{"name":"n","rate_limit_per_minute":NaN}', "rate_limit_per_minute"),
]


@pytest.mark.parametrize(("method", "path", "as_owner", "text", "field"), NON_FINITE,
                         ids=[f"{c[0]} {c[1]} {c[4]}" for c in NON_FINITE])
def test_nan_infinity_and_overflowing_numbers_get_400_naming_the_field(
        app: InProcessApp, method: str, path: str, as_owner: bool, text: str, field: str) -> None:
    response = app.call(method, path, raw=text, key=OWNER_KEY if as_owner else "tenant")
    error = error_of(response, 400)
    assert error["code"] == "invalid_input"
    assert error["details"]["field"] == field, error


def test_nothing_with_nan_is_stored(app: InProcessApp) -> None:
    for text in ('{"messages":[{"documents":[{"data":"x"}],"properties":{"p":NaN}}]}',
                 '{"messages":[{"documents":[{"data":"x","properties":{"p":Infinity}}]}]}',
                 '{"messages":[{"documents":[{"data":"x"}],"expires_at":NaN}]}'):
        error_of(app.call("POST", "/v1/queues/orders/messages", raw=text), 400)
    browsed = app.call("GET", "/v1/queues/orders/messages")
    assert browsed.status_code == 200
    assert strict_loads(browsed.data)["messages"] == []


def test_a_nan_stored_by_an_older_version_goes_out_as_null(app: InProcessApp) -> None:
    """Every answer is strict JSON, even over data that an older version let in."""
    (message_id,) = app.call("POST", "/v1/queues/orders/messages", send_body(properties={"p": 1.5})).get_json()["ids"]
    envelopes = k.TenantKeys(app.tenant).queue("orders").destination().msg
    stored = app.client.hget(envelopes, message_id)
    assert stored is not None and b"1.5" in stored
    app.client.hset(envelopes, message_id, stored.replace(b"1.5", b"NaN"))
    try:
        browsed = app.call("GET", "/v1/queues/orders/messages")
        assert browsed.status_code == 200
        (message,) = strict_loads(browsed.data)["messages"]
        assert message["properties"] == {"p": None}
    finally:
        app.call("DELETE", "/v1/queues/orders/messages", {"all": True})


def test_strict_dumps_writes_no_nan() -> None:
    assert strict_json.dumps({"a": [math.nan, math.inf, -math.inf, 1.5]}) == '{"a": [null, null, null, 1.5]}'


OUT_OF_RANGE = [
    # (method, path, owner?, body, the field the error names)
    ("POST", "/v1/queues/orders/messages", False, send_body(expires_at=1e300), "messages.0.expires_at"),
    ("POST", "/v1/queues/orders/messages", False, send_body(expires_at=-1), "messages.0.expires_at"),
    ("POST", "/v1/queues/orders/messages", False, send_body(expires_at=10**30), "messages.0.expires_at"),
    ("POST", "/v1/tenants", True, {"name": "n", "rate_limit_per_minute": 2**60}, "rate_limit_per_minute"),
    ("POST", "/v1/tenants", True, {"name": "n", "disk_quota_bytes": 10**30}, "disk_quota_bytes"),
    ("PATCH", "/v1/server", True, {"document_retention_s": 1e306}, "document_retention_s"),
    ("PATCH", "/v1/server", True, {"document_retention_s": 11 * 365 * 86400}, "document_retention_s"),
    ("PATCH", "/v1/server", True, {"dedupe_window_s": 8 * 86400}, "dedupe_window_s"),
    # Under a millisecond the send script's markers would expire in 0 ms, an error for every send.
    ("PATCH", "/v1/server", True, {"dedupe_window_s": 0.0004}, "dedupe_window_s"),
    ("PATCH", "/v1/server", True, {"rate_limit_window_s": 86401}, "rate_limit_window_s"),
    ("PATCH", "/v1/server", True, {"incoming_rate_limit_per_minute": 2**53 + 1}, "incoming_rate_limit_per_minute"),
    ("PATCH", "/v1/server", True, {"max_disk_bytes": 10**20}, "max_disk_bytes"),
    ("PATCH", "/v1/server", True, {"redelivery_delays_s": [1, 86401]}, "redelivery_delays_s"),
    ("PATCH", "/v1/server", True, {"redelivery_delays_s": [1] * 101}, "redelivery_delays_s"),
]


@pytest.mark.parametrize(("method", "path", "as_owner", "body", "field"), OUT_OF_RANGE,
                         ids=[f"{c[0]} {c[1]} {c[4]}" for c in OUT_OF_RANGE])
def test_numbers_out_of_a_fields_range_get_400_naming_it(
        app: InProcessApp, method: str, path: str, as_owner: bool, body: Any, field: str) -> None:
    error = error_of(app.call(method, path, body, key=OWNER_KEY if as_owner else "tenant"), 400)
    assert error["code"] == "invalid_input"
    assert named_fields(error) == {field}, error


def test_the_bounds_are_the_settings_own(app: InProcessApp) -> None:
    """The library refuses what the API refuses: no path around the schema reaches the store."""
    store = ServerSettingsStore(app.services.queues.storage)
    for change in ({"document_retention_s": 1e306}, {"dedupe_window_s": math.inf},
                   {"rate_limit_window_s": math.nan}, {"max_disk_bytes": 2**64},
                   {"redelivery_delays_s": [math.nan]}):
        with pytest.raises(InvalidInput) as refused:
            store.update(**change)
        assert refused.value.details["field"] == next(iter(change))
    for queue_change in ({"document_retention_s": 1e306}, {"dedupe_window_s": math.nan},
                         {"redelivery_delays_s": (1.0, 1e20)}, {"redelivery_delays_s": (1.0,) * 101}):
        with pytest.raises(InvalidInput):
            QueueSettings(**queue_change)  # type: ignore[arg-type]
    limits = ServerSettings(document_retention_s=10 * 365 * 86400, dedupe_window_s=7 * 86400,
                            rate_limit_window_s=86400, redelivery_delays_s=(86400.0,) * 100,
                            incoming_rate_limit_per_minute=2**53, max_disk_bytes=2**53)
    assert limits.queue_settings(QueueSettings()).document_retention_s == 10 * 365 * 86400


def test_a_stored_setting_out_of_range_takes_its_default(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An older version could store ``1e306``: the loader neither crashes nor applies it."""
    server = EmbeddedValkey(tmp_path / "valkey", port=free_port())
    server.start()
    client = server.client()
    try:
        client.hset(k.SERVER_SETTINGS_KEY, mapping={
            "document_retention_s": "1e306", "dedupe_window_s": "NaN", "redelivery_delays_s": "[1, 1e300]",
            "rate_limit_window_s": '"soon"', "incoming_rate_limit_per_minute": "{", "max_disk_bytes": "5000"})
        with caplog.at_level(logging.WARNING, logger="atomq.settings"):
            loaded = ServerSettingsStore(Storage(client)).load()
        defaults = ServerSettings()
        assert loaded == ServerSettings(max_disk_bytes=5000)
        assert loaded.document_retention_s == defaults.document_retention_s
        logged = caplog.text
        for name in ("document_retention_s", "dedupe_window_s", "redelivery_delays_s", "rate_limit_window_s",
                     "incoming_rate_limit_per_minute"):
            assert name in logged, name
        # And the API answers with the defaults, not a 500.
        services = Services(queues=QueueServer(client), tenants=TenantStore(client, OWNER_KEY),
                            longpolls=LongPollLimiter(2))
        answer = create_app(services).test_client().get("/v1/server", headers={"Authorization": f"Bearer {OWNER_KEY}"})
        assert answer.status_code == 200, answer.data
        assert answer.get_json()["document_retention_s"] == defaults.document_retention_s
    finally:
        client.close()
        server.stop()


# -- nesting and malformed bodies -------------------------------------------------------------


def nested_properties(depth: int) -> str:
    """A send body whose arrays and objects nest exactly ``depth`` deep (its properties hold the most)."""
    inner = "1"
    for _ in range(depth - 3):
        inner = '{"a":' + inner + "}"
    return '{"messages":[{"documents":[{"data":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\""}],' \
           '"properties":' + inner + "}]}"


def test_bodies_deeper_than_32_levels_get_400(app: InProcessApp) -> None:
    assert app.call("POST", "/v1/queues/orders/messages", raw=nested_properties(32)).status_code == 201
    error = error_of(app.call("POST", "/v1/queues/orders/messages", raw=nested_properties(33)), 400)
    assert error["details"]["field"] == "messages.0.properties", "the send names where its body nests"
    app.call("DELETE", "/v1/queues/orders/messages", {"all": True})


@pytest.mark.parametrize(("raw", "field"), [
    (b'{"messages":[{"documents":[{"data":"\\ud800"}]}]}', "messages.0.documents.0.data"),
    (b'{"messages":[{"documents":[{"data":"x"}],"properties":{"k":["\\udfff"]}}]}', "messages.0.properties.k.0"),
    (b'{"messages":[{"documents":[{"data":"x","properties":{"\\ud800":1}}]}]}', "messages.0.documents.0.properties.<key>"),
    (b'{"messages":[{"documents":[{"data":"x"}],"dedupe_id":"\\ud800"}]}', "messages.0.dedupe_id"),
])
def test_a_send_names_the_text_that_holds_a_lone_surrogate(app: InProcessApp, raw: bytes, field: str) -> None:
    """The send checks its texts itself (it skips the scan of the whole body other calls get)."""
    assert error_of(app.call("POST", "/v1/queues/orders/messages", raw=raw), 400)["details"]["field"] == field


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "[{" * 50_000 + "}]" * 50_000],
                         ids=["arrays", "objects", "closed"])
@pytest.mark.parametrize(("method", "path", "as_owner"), [
    ("POST", "/v1/queues/orders/messages", False), ("PUT", "/v1/queues/deep", False),
    ("POST", "/v1/queues/orders/ack", False), ("POST", "/v1/tenants", True), ("PATCH", "/v1/server", True)])
def test_a_body_nested_100000_deep_gets_400(app: InProcessApp, text: str, method: str, path: str, as_owner: bool) -> None:
    error = error_of(app.call(method, path, raw=text, key=OWNER_KEY if as_owner else "tenant"), 400)
    assert error["details"]["field"] == "body"


MALFORMED = [
    b"", b"{", b'{"messages":[{"documents":[{"data":"x"}]', b"null", b"[]", b"42", b'"text"', b"true",
    b"\xff\xfe\x00{", b'{"messages":[{"documents":[{"data":"\xc3\x28"}]}]}',
    b'{"messages":[{"documents":[{"data":"\\ud800"}]}]}', b'{"\\udfff":1}',
    b'{"max":1e999999}', b'{"max":' + b"9" * 5000 + b"}", b'{"max":-0.0}', b'{"ids":[1e400]}',
    b'{"messages":[{"documents":[{"data":"x"}],"expires_at":' + b"1" * 400 + b"}]}",
    b"\x00" * 64, b"{}" * 10, b'{"a":1,"a":2}', b"[" * 40 + b"]" * 40, b'"\\',
]


ENDPOINTS = [
    ("POST", "/v1/queues/orders/messages", False), ("POST", "/v1/queues/orders/get", False),
    ("POST", "/v1/queues/orders/ack", False), ("POST", "/v1/queues/orders/nack", False),
    ("POST", "/v1/queues/orders/extend", False), ("DELETE", "/v1/queues/orders/messages", False),
    ("PUT", "/v1/queues/malformed", False), ("PUT", "/v1/listeners/malformed", False),
    ("POST", "/v1/queues/orders/streams/c/open", False), ("POST", "/v1/queues/orders/streams/c/batches/1", False),
    ("POST", "/v1/queues/news/dead-letters/resend", False),
    ("POST", "/v1/tenants", True), ("PATCH", "/v1/server", True),
]


@pytest.mark.parametrize(("method", "path", "as_owner"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
def test_no_malformed_body_gets_a_500(app: InProcessApp, method: str, path: str, as_owner: bool) -> None:
    key = OWNER_KEY if as_owner else "tenant"
    for content_type in ("application/json", "text/plain", None):
        for raw in MALFORMED:
            response = app.call(method, path, raw=raw, key=key, content_type=content_type)
            assert response.status_code < 500, (content_type, raw[:60], response.status_code, response.data[:300])
            if response.status_code >= 400:
                error_of(response, response.status_code)
            else:
                strict_loads(response.data)
    for queue in ("orders", "news"):
        app.call("DELETE", f"/v1/queues/{queue}/messages", {"all": True, **({"subscriber": "s"} if queue == "news"
                                                                            else {})})
    app.call("DELETE", "/v1/queues/malformed")


def test_a_body_that_is_not_json_names_the_body(app: InProcessApp) -> None:
    for raw in (b"{", b"\xff", b""):
        error = error_of(app.call("POST", "/v1/queues/orders/messages", raw=raw), 400)
        assert error["details"]["field"] == "body"
    error = error_of(app.call("PUT", "/v1/queues/x", raw=b"\xff"), 400)
    assert error["details"]["field"] == "body"


# -- methods ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("FOO", "/v1/queues", {"GET", "HEAD", "OPTIONS"}),
    ("DELETE", "/v1/queues", {"GET", "HEAD", "OPTIONS"}),
    ("PATCH", "/v1/queues/orders/get", {"POST", "OPTIONS"}),
    ("FROB", "/v1/queues/orders/messages", {"GET", "HEAD", "POST", "DELETE", "OPTIONS"}),
])
@pytest.mark.parametrize("keyed", [True, False], ids=["key", "no key"])
def test_a_method_the_route_does_not_take_gets_405_with_allow(app: InProcessApp, method: str, path: str,
                                                              allowed: set[str], keyed: bool) -> None:
    response = app.call(method, path, key="tenant" if keyed else None)
    assert error_of(response, 405)["code"] == "method_not_allowed"
    assert {m.strip() for m in response.headers["Allow"].split(",")} == allowed


@pytest.mark.parametrize("path", ["/v1/server", "/v1/tenants", "/v1/queues", "/metrics"])
def test_options_names_the_methods_to_anyone(app: InProcessApp, path: str) -> None:
    response = app.call("OPTIONS", path, key=None)
    assert response.status_code == 200 and "GET" in response.headers["Allow"]


def test_invented_methods_add_no_metrics_series(app: InProcessApp) -> None:
    latency = app.app.extensions["atomq_latency"]
    for i in range(200):
        assert app.call(f"X{i:03d}", "/v1/queues").status_code == 405
        assert app.call(f"Y|{i}", "/nowhere", key=None).status_code in (404, 405)
    latency.flush()
    methods = {field.decode().split("|")[1] for field in app.client.hkeys(k.REQUEST_LATENCY_KEY)}
    assert OTHER_METHOD in methods
    assert methods <= KNOWN_METHODS | {OTHER_METHOD}, methods - KNOWN_METHODS


# -- a served node: several worker processes, gunicorn in front -------------------------------


@pytest.fixture
def served(serve: ServeFactory) -> AtomqServe:
    """A node of its own: several HTTP workers, gunicorn in front."""
    return serve(http_workers=2)


def test_served_invented_methods_get_405_with_allow(served: AtomqServe) -> None:
    for method in ("FOO", "PROPFIND", "BREW"):
        response = requests.request(method, served.url + "/v1/queues", timeout=10)
        assert response.status_code == 405, (method, response.status_code, response.text)
        assert set(response.json()["error"]) == {"code", "message", "details"}
        assert "GET" in response.headers["Allow"]


def test_served_chunked_bodies_over_the_limit_get_413(served: AtomqServe) -> None:
    """No Content-Length: the node reads up to its limit; a byte past it is a 413, not a cut body
    handed to the JSON parser (which answered 400 "not valid JSON")."""
    owner = {"Authorization": f"Bearer {served.owner_key}"}
    tenant = requests.post(served.url + "/v1/tenants", json={"name": "chunky"}, headers=owner, timeout=10).json()
    headers = {"Authorization": f"Bearer {tenant['api_key']}", "Content-Type": "application/json"}
    made = requests.put(served.url + "/v1/queues/big", json={"model": "point_to_point"}, headers=headers, timeout=10)
    assert made.status_code in (200, 201), made.text

    def chunks(size: int) -> Iterator[bytes]:
        yield b'{"messages": [{"documents": [{"data": "'
        for _ in range(size // 65536):
            yield b"x" * 65536
        yield b'"}]}]}'

    over = requests.post(served.url + "/v1/queues/big/messages", data=chunks(11 * 1024 * 1024), headers=headers,
                         timeout=30)
    assert over.status_code == 413 and over.json()["error"]["code"] == "too_large", over.text[:300]
    under = requests.post(served.url + "/v1/queues/big/messages", data=chunks(65536), headers=headers, timeout=30)
    assert under.status_code == 201, under.text[:300]


@pytest.mark.parametrize("path", ["/v1/topics//a/messages", "/v1/topics/a//b/messages", "/v1/topics/a/b//messages"])
def test_an_empty_level_in_a_topic_path_gets_400(app: InProcessApp, path: str) -> None:
    """Not a 308 to the path with the slashes merged, which is another topic."""
    error = error_of(app.call("POST", path, send_body()), 400)
    assert error["details"]["field"] == "topic"


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /v1/que ues HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /v1/queues HTTP/1.1\r\nHost: x\r\nX-Bad: a\rb\r\n\r\n", 400),
    (b"POST /v1/queues/a/messages HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
    (b"GET /v1/queues?" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
], ids=["space in the path", "CR in a header", "negative length", "URI too long"])
def test_served_refusals_of_the_http_server_itself_have_the_error_shape(
        served: AtomqServe, request_bytes: bytes, status: int) -> None:
    """gunicorn refuses these before the app sees them; its own HTML page became the JSON shape."""
    host, _, port = served.url.removeprefix("http://").partition(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request_bytes)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(status).encode(), answer[:300]
    assert b"content-type: application/json" in head.lower()
    error = strict_loads(body)["error"]
    assert set(error) == {"code", "message", "details"} and error["code"] in ("invalid_input", "uri_too_long")


def _pages(call: Any, path: str, member: str, limit: int) -> list[list[str]]:
    """Every page of a list, each as its items' names (ids for tenants)."""
    pages, after = [], None
    while True:
        query = f"?limit={limit}" + (f"&after={after}" if after else "")
        answer = call("GET", path + query)
        assert answer.status_code == 200, answer.data
        body = strict_loads(answer.data)
        pages.append([item.get("name") if member != "tenants" else item["id"] for item in body[member]])
        after = body["next"]
        if after is None:
            return pages


def test_every_list_takes_limit_and_after_and_answers_next(app: InProcessApp) -> None:
    made = [strict_loads(app.owner("POST", "/v1/tenants", {"name": f"lister-{i}"}).data) for i in range(3)]
    tenants = [t["id"] for t in made]

    def call(method: str, path: str, body: Any = None) -> Any:
        return app.call(method, path, body, key=made[0]["api_key"])

    try:
        for name in ("c", "a", "e", "b"):
            assert call("PUT", f"/v1/queues/{name}", {"model": "point_to_point"}).status_code == 201
        assert _pages(call, "/v1/queues", "queues", 3) == [["a", "b", "c"], ["e"]]
        assert _pages(call, "/v1/queues", "queues", 2) == [["a", "b"], ["c", "e"]]
        assert _pages(call, "/v1/queues", "queues", 1000) == [["a", "b", "c", "e"]]
        for name in ("l2", "l1", "l3"):
            deployed = call("PUT", f"/v1/listeners/{name}", {"queue": "a", "process": "forward",
                                                              "settings": {"to": "b"}})
            assert deployed.status_code == 201, deployed.data
        assert _pages(call, "/v1/listeners", "listeners", 2) == [["l1", "l2"], ["l3"]]
        listed = [t for page in _pages(app.owner, "/v1/tenants", "tenants", 2) for t in page]
        assert [t for t in listed if t in tenants] == tenants, "oldest first, each once"
        for bad in ("limit=0", "limit=1001", "after="):
            error_of(call("GET", f"/v1/queues?{bad}"), 400)
    finally:
        for tenant in tenants:
            app.owner("DELETE", f"/v1/tenants/{tenant}")


def test_served_slow_clients_hold_no_thread_the_tenants_need(served: AtomqServe) -> None:
    """More connections than the node has threads send their heads a line a second and never a
    key: a tenant's sends are still answered (each within the client's usual time-out), since a
    thread takes a request only once its head is in."""
    owner = {"Authorization": f"Bearer {served.owner_key}"}
    tenant = requests.post(served.url + "/v1/tenants", json={"name": "bystander"}, headers=owner, timeout=10).json()
    headers = {"Authorization": f"Bearer {tenant['api_key']}"}
    assert requests.put(served.url + "/v1/queues/q", json={"model": "point_to_point"}, headers=headers,
                        timeout=10).status_code == 201
    host, _, port = served.url.removeprefix("http://").partition(":")
    slow = [socket.create_connection((host, int(port)), timeout=10)
            for _ in range(2 * defaults.THREADS * served.http_workers)]
    stop = threading.Event()

    def trickle() -> None:
        for conn in slow:
            conn.sendall(b"GET /v1/queues HTTP/1.1\r\nHost: x\r\n")
        while not stop.wait(0.5):
            for conn in slow:
                try:
                    conn.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    trickler = threading.Thread(target=trickle)
    trickler.start()
    try:
        with requests.Session() as session:
            for i in range(20):
                sent = session.post(served.url + "/v1/queues/q/messages", headers=headers, timeout=10,
                                    json={"messages": [{"documents": [{"data": str(i)}]}]})
                assert sent.status_code == 201, sent.text
    finally:
        stop.set()
        trickler.join()
        for conn in slow:
            conn.close()
    assert requests.get(served.url + "/v1/queues/q", headers=headers, timeout=10).json()["depth"] == 20


def test_served_connections_of_one_address_are_bounded_and_free_again_once_closed(serve: ServeFactory) -> None:
    """An address past its bound gets a 503 in the error shape for its next connection; another address
    is served; the idle connections the node times out free their address's room."""
    served = serve(http_workers=1)
    host, _, port = served.url.removeprefix("http://").partition(":")

    def health(source: str, request: bool = True) -> bytes:
        with socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0)) as conn:
            if request:  # a refused connection is answered as it is taken: it sends nothing, so it reads it all
                conn.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
            return answer

    idle = [socket.create_connection((host, int(port)), timeout=10)
            for _ in range(slow_clients.MAX_CONNECTIONS_PER_ADDRESS)]
    try:
        refused = health("127.0.0.1", request=False)
        head, _, body = refused.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), refused[:200]
        assert strict_loads(body)["error"]["code"] == "too_many_connections"
        assert health("127.0.0.2").startswith(b"HTTP/1.1 200")
        # The node closes connections that send nothing within its keep-alive time; their room comes back.

        def served_again() -> bool:
            try:
                return health("127.0.0.1").startswith(b"HTTP/1.1 200")
            except OSError:  # still refused: the refusal may reset a connection that sent its request
                return False

        wait_until(served_again, 30, "the idle connections to be closed")
    finally:
        for conn in idle:
            conn.close()
