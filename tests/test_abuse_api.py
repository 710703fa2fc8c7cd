"""The HTTP boundary holds whatever a client sends.

Bad numbers, deep nesting and malformed bodies get 400 naming the field,
never a 500 and never a stored value that comes back as invalid JSON; server
settings are bounded; invented methods get 405 with ``Allow`` and add no
metrics series; the owner key is long and failed key checks are throttled;
a failing store is a 503 with ``Retry-After``. Most cases run on the app in
this process (fast, on real Valkey); what depends on the process model
(several gunicorn workers, ``atomq serve`` refusing to start) runs against a
served node.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError

from atomq.api import create_app, strict_json
from atomq.api.key_checks import MAX_FAILURES, WINDOW_S
from atomq.api.latency import KNOWN_METHODS, OTHER_METHOD
from atomq.api.services import LongPollLimiter, Services
from atomq.errors import InvalidInput
from atomq.node import MIN_OWNER_KEY_CHARS, OWNER_KEY_ENV, load_owner_key
from atomq.platform import QueueServer
from atomq.platform import keys as k
from atomq.platform.embedded import EmbeddedValkey
from atomq.platform.server_settings import ServerSettings, ServerSettingsStore
from atomq.platform.settings import QueueSettings
from atomq.platform.storage import Storage
from atomq.tenants import TenantStore
from support.ports import free_port
from support.processes import REPO
from support.queues import FAST
from support.served_node import AtomqServe, ServeFactory

OWNER_KEY = f"aq_owner_{secrets.token_urlsafe(32)}"


def strict_loads(text: str | bytes) -> Any:
    """JSON as a strict client reads it: NaN and Infinity are errors."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


class App:
    """The app in this process, on one Valkey, with a tenant and its queues."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.services = Services(queues=QueueServer(client, FAST), tenants=TenantStore(client, OWNER_KEY),
                                 longpolls=LongPollLimiter(2))
        self.app = create_app(self.services)
        self.http = self.app.test_client()
        tenant, _, self.key = self.services.tenants.create("abuse")
        self.tenant = tenant.id
        self.services.queues.put_queue(self.tenant, "orders", "point_to_point")
        self.services.queues.put_queue(self.tenant, "news", "publish_subscribe")

    def call(self, method: str, path: str, body: Any = None, *, raw: str | bytes | None = None,
             key: str | None = "tenant", content_type: str | None = "application/json",
             address: str = "127.0.0.1") -> Any:
        """The response; ``raw`` is sent as the body as it is, else ``body`` as JSON."""
        headers = {}
        if key is not None:
            headers["Authorization"] = f"Bearer {self.key if key == 'tenant' else key}"
        if content_type is not None:
            headers["Content-Type"] = content_type
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        return self.http.open(path, method=method, data=data, headers=headers,
                              environ_base={"REMOTE_ADDR": address})

    def owner(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.call(method, path, body, key=OWNER_KEY, **kwargs)

    def close(self) -> None:
        self.services.tenants.delete(self.tenant)


def error_of(response: Any, status: int) -> dict[str, Any]:
    """The error of a response that must have ``status``, in the one JSON shape, strictly parsed."""
    assert response.status_code == status, (response.status_code, response.data[:500])
    body = strict_loads(response.data)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]  # type: ignore[no-any-return]


def named_fields(error: dict[str, Any]) -> set[str]:
    """The fields an invalid-input error names: its own field, or those of its schema's messages."""
    details = error["details"]
    if "field" in details:
        return {details["field"]}
    return {name for location in details.get("fields", {}).values() for name in location}


@pytest.fixture(scope="module")
def app(valkey: EmbeddedValkey) -> Iterator[App]:
    client = valkey.client()
    app = App(client)
    yield app
    app.close()
    client.close()


def send_body(**message: Any) -> dict[str, Any]:
    return {"messages": [{"documents": [{"data": "x"}], **message}]}


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
        app: App, method: str, path: str, as_owner: bool, text: str, field: str) -> None:
    response = app.call(method, path, raw=text, key=OWNER_KEY if as_owner else "tenant")
    error = error_of(response, 400)
    assert error["code"] == "invalid_input"
    assert error["details"]["field"] == field, error


def test_nothing_with_nan_is_stored(app: App) -> None:
    for text in ('{"messages":[{"documents":[{"data":"x"}],"properties":{"p":NaN}}]}',
                 '{"messages":[{"documents":[{"data":"x","properties":{"p":Infinity}}]}]}',
                 '{"messages":[{"documents":[{"data":"x"}],"expires_at":NaN}]}'):
        error_of(app.call("POST", "/v1/queues/orders/messages", raw=text), 400)
    browsed = app.call("GET", "/v1/queues/orders/messages")
    assert browsed.status_code == 200
    assert strict_loads(browsed.data)["messages"] == []


def test_a_nan_stored_by_an_older_version_goes_out_as_null(app: App) -> None:
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
        app: App, method: str, path: str, as_owner: bool, body: Any, field: str) -> None:
    error = error_of(app.call(method, path, body, key=OWNER_KEY if as_owner else "tenant"), 400)
    assert error["code"] == "invalid_input"
    assert named_fields(error) == {field}, error


def test_the_bounds_are_the_settings_own(app: App) -> None:
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


def test_bodies_deeper_than_32_levels_get_400(app: App) -> None:
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
def test_a_send_names_the_text_that_holds_a_lone_surrogate(app: App, raw: bytes, field: str) -> None:
    """The send checks its texts itself (it skips the scan of the whole body other calls get)."""
    assert error_of(app.call("POST", "/v1/queues/orders/messages", raw=raw), 400)["details"]["field"] == field


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "[{" * 50_000 + "}]" * 50_000],
                         ids=["arrays", "objects", "closed"])
@pytest.mark.parametrize(("method", "path", "as_owner"), [
    ("POST", "/v1/queues/orders/messages", False), ("PUT", "/v1/queues/deep", False),
    ("POST", "/v1/queues/orders/ack", False), ("POST", "/v1/tenants", True), ("PATCH", "/v1/server", True)])
def test_a_body_nested_100000_deep_gets_400(app: App, text: str, method: str, path: str, as_owner: bool) -> None:
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
def test_no_malformed_body_gets_a_500(app: App, method: str, path: str, as_owner: bool) -> None:
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


def test_a_body_that_is_not_json_names_the_body(app: App) -> None:
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
def test_a_method_the_route_does_not_take_gets_405_with_allow(app: App, method: str, path: str,
                                                              allowed: set[str], keyed: bool) -> None:
    response = app.call(method, path, key="tenant" if keyed else None)
    assert error_of(response, 405)["code"] == "method_not_allowed"
    assert {m.strip() for m in response.headers["Allow"].split(",")} == allowed


@pytest.mark.parametrize("path", ["/v1/server", "/v1/tenants", "/v1/queues", "/metrics"])
def test_options_names_the_methods_to_anyone(app: App, path: str) -> None:
    response = app.call("OPTIONS", path, key=None)
    assert response.status_code == 200 and "GET" in response.headers["Allow"]


def test_invented_methods_add_no_metrics_series(app: App) -> None:
    latency = app.app.extensions["atomq_latency"]
    for i in range(200):
        assert app.call(f"X{i:03d}", "/v1/queues").status_code == 405
        assert app.call(f"Y|{i}", "/nowhere", key=None).status_code in (404, 405)
    latency.flush()
    methods = {field.decode().split("|")[1] for field in app.client.hkeys(k.REQUEST_LATENCY_KEY)}
    assert OTHER_METHOD in methods
    assert methods <= KNOWN_METHODS | {OTHER_METHOD}, methods - KNOWN_METHODS


# -- keys -------------------------------------------------------------------------------------


def test_a_short_owner_key_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OWNER_KEY_ENV, "admin")
    with pytest.raises(InvalidInput) as refused:
        load_owner_key(tmp_path)
    assert "at least 32" in refused.value.message and "secrets.token_urlsafe(32)" in refused.value.message
    monkeypatch.setenv(OWNER_KEY_ENV, "k" * MIN_OWNER_KEY_CHARS)
    assert load_owner_key(tmp_path) == ("k" * MIN_OWNER_KEY_CHARS, None)

    monkeypatch.delenv(OWNER_KEY_ENV)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made, path = load_owner_key(fresh)  # a generated key is long enough, and read back the same
    assert len(made) >= MIN_OWNER_KEY_CHARS and path == fresh / "owner.key"
    assert load_owner_key(fresh) == (made, path)
    (tmp_path / "owner.key").write_text("hunter2\n")
    with pytest.raises(InvalidInput, match="at least 32"):
        load_owner_key(tmp_path)


def test_atomq_serve_refuses_a_short_owner_key(tmp_path: Path) -> None:
    env = {**{k_: v for k_, v in os.environ.items() if not k_.startswith("ATOMQ_")}, OWNER_KEY_ENV: "admin"}
    done = subprocess.run([sys.executable, "-m", "atomq", "serve", "--data-dir", str(tmp_path / "data"),
                           "--port", str(free_port())], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "at least 32" in done.stderr and "secrets.token_urlsafe(32)" in done.stderr, done.stderr
    assert not (tmp_path / "data" / "valkey" / "valkey.pid").exists()


def test_failed_key_checks_are_throttled_per_address(app: App) -> None:
    attacker, neighbour, regular, keyless = "10.9.0.1", "10.9.0.2", "10.9.0.3", "10.9.0.4"
    # A request without a key guesses nothing: it is refused, not counted.
    for _ in range(2 * MAX_FAILURES):
        error_of(app.call("GET", "/v1/queues", key=None, address=keyless), 401)
    assert app.call("GET", "/v1/queues", address=keyless).status_code == 200
    for i in range(MAX_FAILURES):
        error_of(app.call("GET", "/v1/queues", key=f"aq_0123456789abcdef_guess{i}", address=attacker), 401)
    # Refused before the key is looked at: a right guess gets the same 429.
    for key in ("aq_0123456789abcdef_guess", app.key, OWNER_KEY, None):
        response = app.call("GET", "/v1/queues", key=key, address=attacker)
        assert error_of(response, 429)["code"] == "rate_limited"
        assert 1 <= int(response.headers["Retry-After"]) <= WINDOW_S
    assert app.call("GET", "/v1/queues", address=neighbour).status_code == 200
    for _ in range(3 * MAX_FAILURES):
        assert app.call("GET", "/v1/queues", address=regular).status_code == 200
    # The window expires on its own: no key is left behind for good.
    ttl = app.client.ttl(k.failed_key_checks(app.services.node_id, attacker))
    assert 0 < ttl <= WINDOW_S


# -- a failing store --------------------------------------------------------------------------


@pytest.fixture
def private_store(tmp_path: Path) -> Iterator[tuple[EmbeddedValkey, App]]:
    """A Valkey of this test's own, which it may stop, and the app on it."""
    server = EmbeddedValkey(tmp_path / "valkey", port=free_port())
    server.start()
    client = server.client()
    app = App(client)
    yield server, app
    client.close()
    if server.pid is not None:
        server.stop()


def assert_unavailable(response: Any) -> None:
    error = error_of(response, 503)
    assert error["code"] == "storage_unavailable", error
    assert int(response.headers["Retry-After"]) >= 1


def test_a_stopped_store_answers_503_with_retry_after(private_store: tuple[EmbeddedValkey, App]) -> None:
    server, app = private_store
    assert app.call("POST", "/v1/queues/orders/messages", send_body()).status_code == 201
    server.stop()
    assert_unavailable(app.call("GET", "/v1/queues"))
    assert_unavailable(app.call("POST", "/v1/queues/orders/messages", send_body()))
    assert_unavailable(app.call("POST", "/v1/queues/orders/get", {"max": 1}))
    assert_unavailable(app.call("GET", "/v1/queues", key="aq_0123456789abcdef_wrong"))
    assert_unavailable(app.owner("GET", "/v1/tenants"))
    assert_unavailable(app.owner("GET", "/v1/server"))


@pytest.mark.parametrize("exc", [RedisClusterException("no slots"), SlotNotCoveredError("slot 7 is not covered"),
                                 ClusterDownError("CLUSTERDOWN"), ConnectionResetError("reset by peer"),
                                 TimeoutError("timed out")], ids=lambda e: type(e).__name__)
def test_store_exceptions_from_the_cluster_client_are_503(private_store: tuple[EmbeddedValkey, App],
                                                         monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    _, app = private_store

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    # Where atomq translates: the key check's read of the key table.
    monkeypatch.setattr(app.client, "hget", fail)
    assert_unavailable(app.call("GET", "/v1/queues"))
    monkeypatch.undo()
    # Where nothing translates: an exception raised straight out of a view's code.
    monkeypatch.setattr(app.services.queues, "list_queues", fail)
    assert_unavailable(app.call("GET", "/v1/queues"))


# -- a served node: several worker processes, gunicorn in front -------------------------------


@pytest.fixture
def served(serve: ServeFactory) -> AtomqServe:
    """A node per test: the throttle test leaves its address refused for a minute."""
    return serve(http_workers=2)


def test_served_invented_methods_get_405_with_allow(served: AtomqServe) -> None:
    for method in ("FOO", "PROPFIND", "BREW"):
        response = requests.request(method, served.url + "/v1/queues", timeout=10)
        assert response.status_code == 405, (method, response.status_code, response.text)
        assert set(response.json()["error"]) == {"code", "message", "details"}
        assert "GET" in response.headers["Allow"]


def test_served_failed_key_checks_are_counted_across_workers(served: AtomqServe) -> None:
    """Each request on a new connection, so both workers answer some; the count is the node's.
    A worker learns an address is over the limit when it counts one of its failures, so past
    the limit each worker lets at most one more guess through; then every guess gets 429
    (a throttled address guesses no faster). A key that works costs no store call, so a
    worker that has counted none of the address's failures still lets it in."""
    with served.owner() as owner:
        tenant = owner("POST", "/v1/tenants", {"name": "throttled"}, 201)
    for i in range(MAX_FAILURES):
        answer = requests.get(served.url + "/v1/queues", headers={"Authorization": f"Bearer wrong{i}"}, timeout=10)
        assert answer.status_code == 401
    # Until six 429s in a row: a worker that has not yet answered one of these (the second
    # worker may start answering late) lets one more guess through, once.
    late: list[int] = []
    while late[-6:] != [429] * 6:
        assert len(late) < 60, late
        answer = requests.get(served.url + "/v1/queues", headers={"Authorization": f"Bearer late{len(late)}"},
                              timeout=10)
        late.append(answer.status_code)
    assert late.count(401) <= served.http_workers and set(late) <= {401, 429}, late
    assert answer.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(answer.headers["Retry-After"]) <= WINDOW_S
    works = requests.get(served.url + "/v1/queues", headers={"Authorization": f"Bearer {tenant['api_key']}"},
                         timeout=10)
    assert works.status_code in (200, 429), "refused only by a worker that counted a failure of this address"
    with served.redis() as client:
        (counter,) = client.keys(f"{k.PREFIX}:keyfail:*:127.0.0.1")
        assert MAX_FAILURES <= int(client.get(counter)) <= MAX_FAILURES + served.http_workers
