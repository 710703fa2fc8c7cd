"""The hot path (``atomq.api.hot_path``) answers what Flask answers: the same request set, valid and
invalid, sent to an app with it and to one without (``HOT_PATH`` off), gets the same status, the same
bytes (ids, receipts and times aside) and the same headers; and msgspec's decoders of the settle and
get bodies take only what the schemas take, and load it as they do."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import marshmallow as ma
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Response

from atomq.api import create_app
from atomq.api.blueprint import MEMORY_STATE_HEADER
from atomq.api.hot_path import HOT_PATH, PlainAnswer, route_of
from atomq.api.key_checks import MAX_FAILED_KEY_CHECKS
from atomq.api.schemas.common import Selector
from atomq.api.schemas.messages import ExtendSchema, GetSchema, NackSchema, ReleaseSchema
from atomq.api.services import LongPollLimiter, Services
from atomq.api.wire import selections, strict_json
from atomq.errors import InvalidInput
from atomq.platform import QueueServer
from atomq.tenants import TenantStore
from support.queues import FAST

OWNER_KEY = f"aq_owner_{secrets.token_urlsafe(32)}"
SCHEMAS = {"get": GetSchema, "ack": Selector, "nack": NackSchema, "extend": ExtendSchema, "release": ReleaseSchema}
COMPARED_HEADERS = ("Content-Type", "Content-Length", "Retry-After", "X-Atomq-Memory-State", "Allow", "Connection",
                    "Location")
MESSAGE_ID = re.compile(rb"\d{13}-\d{12}")
TIMES = re.compile(rb'"(enqueued_at|delivered_at|deadline)":[0-9.e+-]+')
DOC = {"data": "x"}
RECEIPT = "1795461670403-000000000002~1"
MAX_GET = 50
"""Both sides' most messages a get may ask for: below the schema's bound, so a get of more passes the
body's decoding and is refused by the queue server, before any call to the store."""


class Side:
    """One app on the session's Valkey, with its own node id, tenant, queues and key."""

    def __init__(self, valkey: Any, name: str, hot_path: bool) -> None:
        self.client = valkey.client()
        self.services = Services(queues=QueueServer(self.client, replace(FAST, max_get=MAX_GET)),
                                 tenants=TenantStore(self.client, OWNER_KEY), longpolls=LongPollLimiter(2))
        self.app = create_app(self.services, {HOT_PATH: hot_path, MAX_FAILED_KEY_CHECKS: 3,
                                              "MAX_CONTENT_LENGTH": 64 * 1024})
        self.http = self.app.test_client()
        tenant, _, self.key = self.services.tenants.create(name)
        limited, _, self.limited_key = self.services.tenants.create(f"{name}-rl", rate_limit_per_minute=2)
        other, _, other_key = self.services.tenants.create(f"{name}-other")
        self.tenants = (tenant, limited, other)
        self.names = {tenant.id.encode(): b"<tenant>", name.encode(): b"<name>", limited.id.encode(): b"<limited>",
                      other.id.encode(): b"<other>", self.key.split("_")[1].encode(): b"<key id>"}
        _, revoked = self.services.tenants.create_key(tenant.id)
        self.services.tenants.revoke_key(tenant.id, revoked.split("_")[1])
        self.keys = {
            "tenant": self.key, "owner": OWNER_KEY, "limited": self.limited_key, "other": other_key, "revoked": revoked,
            "wrong secret": with_secret(self.key, secrets.token_urlsafe(32)),
            "limited, wrong secret": with_secret(self.limited_key, secrets.token_urlsafe(32)),
            # the tenant's id with the other tenant's key's random part and secret: no such key
            "forged": f"aq_{self.key[3:15]}{other_key[15:]}",
            "no such tenant": f"aq_{secrets.token_hex(14)}_{secrets.token_urlsafe(32)}",
        }
        queues = self.services.queues
        queues.put_queue(tenant.id, "orders", "point_to_point")
        queues.put_queue(tenant.id, "news", "publish_subscribe", topics=["news/>"])
        queues.put_subscriber(tenant.id, "news", "s1")
        queues.put_queue(limited.id, "orders", "point_to_point")
        self.token = self.services.tenants.execution_tokens.mint(tenant.id, "gone", "e_000000000000", 60)

    def call(self, case: dict[str, Any]) -> Any:
        headers = dict(case.get("headers", {}))
        key = case.get("key", "tenant")
        if key is not None:
            headers["Authorization"] = "Bearer " + {**self.keys, "token": self.token}.get(key, key)
        if case.get("tenant_header") == "id":
            headers["X-Atomq-Tenant"] = self.tenants[0].id
        elif case.get("tenant_header") == "name":
            headers["X-Atomq-Tenant"] = self.tenants[0].name
        elif "tenant_header" in case:
            headers["X-Atomq-Tenant"] = case["tenant_header"]
        content_type = case.get("content_type", "application/json")
        if content_type is not None:
            headers["Content-Type"] = content_type
        data = case["raw"] if "raw" in case else json.dumps(case["body"]) if "body" in case else None
        return self.http.open(case["path"], method=case.get("method", "POST"), data=data, headers=headers,
                              environ_base={"REMOTE_ADDR": case.get("address", "127.0.0.1")})

    def seen(self, response: Any) -> tuple[int, bytes, dict[str, str]]:
        """What a client sees, with what differs between two sides by nature (ids, times, the tenant) masked."""
        body = MESSAGE_ID.sub(b"<id>", TIMES.sub(rb'"\1":<time>', response.data))
        for real, mask in self.names.items():
            body = body.replace(real, mask)
        headers = {h: response.headers[h] for h in COMPARED_HEADERS if h in response.headers}
        if TIMES.search(response.data):  # a time's digits vary in number: the length must only be the body's
            headers["Content-Length"] = str(int(headers["Content-Length"]) == len(response.data))
        return response.status_code, body, headers

    def close(self) -> None:
        for tenant in self.tenants:
            self.services.tenants.delete(tenant.id)
        self.client.close()


def with_secret(api_key: str, secret: str) -> str:
    """``api_key``'s id with another secret: a key that names a key that exists, wrongly."""
    return f"aq_{api_key.split('_')[1]}_{secret}"


def send(**message: Any) -> dict[str, Any]:
    return {"messages": [{"documents": [DOC], **message}]}


Q = "/v1/queues/orders"
CASES: list[dict[str, Any]] = [
    # sends
    {"path": f"{Q}/messages", "body": send()},
    {"path": f"{Q}/messages", "body": send(properties={"k": [1, {"a": None}]}, priority=9, dedupe_id="d1")},
    {"path": f"{Q}/messages", "body": send(dedupe_id="d1")},
    {"path": f"{Q}/messages", "body": send(), "headers": {"Idempotency-Key": "same"}},
    {"path": f"{Q}/messages", "body": send(), "headers": {"Idempotency-Key": "same"}},
    {"path": f"{Q}/messages", "body": send(priority=1), "headers": {"Idempotency-Key": "same"}},
    {"path": f"{Q}/messages", "body": send(), "headers": {"Idempotency-Key": "x" * 129}},
    {"path": f"{Q}/messages", "raw": "not json"},
    {"path": f"{Q}/messages", "raw": ""},
    {"path": f"{Q}/messages", "raw": '{"messages": [{"documents": [{"data": "x"}], "expires_at": 1e400}]}'},
    {"path": f"{Q}/messages", "raw": '{"messages": [{"documents": [{"data": "\\ud800"}]}]}'},
    {"path": f"{Q}/messages", "raw": '{"messages": [{"documents": [{"data": "x"}], "properties": {"a": NaN}}]}'},
    {"path": f"{Q}/messages", "raw": json.dumps(send(properties={"a": json.loads("[" * 31 + "1" + "]" * 31)}))},
    {"path": f"{Q}/messages", "body": send(priority=10)},
    {"path": f"{Q}/messages", "body": send(unknown=1)},
    {"path": f"{Q}/messages", "body": {"messages": []}},
    {"path": f"{Q}/messages", "body": send(), "content_type": "text/plain"},
    {"path": f"{Q}/messages", "body": send(), "content_type": "application/json; charset=utf-8"},
    {"path": f"{Q}/messages", "body": send(), "content_type": None},
    {"path": f"{Q}/messages", "body": send(), "content_type": "application/merge-patch+json"},
    {"path": f"{Q}/messages", "raw": json.dumps(send(properties={"p": "x" * 70_000}))},
    {"path": "/v1/queues/missing/messages", "body": send()},
    {"path": "/v1/queues/bad name!/messages", "body": send()},
    {"path": f"/v1/queues/{'q' * 129}/messages", "body": send()},
    {"path": "/v1/queues/news/messages", "body": send()},
    {"path": f"{Q}/messages/", "body": send()},
    {"path": f"{Q}/messages", "method": "PUT", "body": send()},
    # keys, tenants, tokens
    {"path": f"{Q}/messages", "body": send(), "key": None},
    {"path": f"{Q}/messages", "body": send(), "key": "aq_abcdefgh_" + "x" * 40},
    {"path": f"{Q}/messages", "body": send(), "key": "short"},
    {"path": f"{Q}/messages", "body": send(), "key": "owner"},
    {"path": f"{Q}/messages", "body": send(), "key": "owner", "tenant_header": "id"},
    {"path": f"{Q}/messages", "body": send(), "key": "owner", "tenant_header": "name"},
    {"path": f"{Q}/messages", "body": send(), "key": "owner", "tenant_header": "t_000000000000"},
    {"path": f"{Q}/messages", "body": send(), "key": "owner", "tenant_header": "nobody"},
    {"path": f"{Q}/messages", "body": send(), "tenant_header": "nobody"},
    {"path": f"{Q}/messages", "body": send(), "key": "token"},
    {"path": f"{Q}/get", "body": {}, "key": "token"},
    *[{"path": f"{Q}/ack", "body": {"ids": ["x"]}, "key": "aq_abcdefgh_" + "y" * 40, "address": "10.0.0.9"}] * 4,
    {"path": f"{Q}/ack", "body": {"ids": ["x"]}, "address": "10.0.0.9"},
    # keys of the current form, whose check the hot path makes in the operation's own script; each
    # case from an address of its own, so that the throttle lets each key's check be made
    *[{"path": path, "body": body, "key": key, "address": f"10.1.{k}.{i}"}
      for k, key in enumerate(("wrong secret", "revoked", "forged", "no such tenant", "other"))
      for i, (path, body) in enumerate(((f"{Q}/messages", send()), (f"{Q}/get", {"max": 2}), (f"{Q}/get", {"wait_ms": 10}),
                         (f"{Q}/get", {"ack": {"receipts": [RECEIPT]}}), (f"{Q}/ack", {"receipts": [RECEIPT]}),
                         (f"{Q}/nack", {"ids": ["x"]}), (f"{Q}/extend", {"ids": ["x"]}),
                         (f"{Q}/extend", {"ids": ["x"], "seconds": 5}), (f"{Q}/release", {"ids": ["x"]}),
                         ("/v1/topics/news/eu/messages", send()), ("/v1/topics/nowhere/messages", send()),
                         ("/v1/topics/messages", {"messages": [{"documents": [DOC], "topic": "news/a"}]}),
                         ("/v1/queues/missing/messages", send()), ("/v1/queues/missing/get", {}),
                         (f"{Q}/get", {"max": MAX_GET + 1})))],
    {"path": f"{Q}/get", "body": {"max": MAX_GET + 1}},
    {"path": f"{Q}/messages", "body": send(), "key": "tenant", "tenant_header": "t_000000000000"},
    *[{"path": f"{Q}/messages", "body": send(), "key": "wrong secret", "address": "10.0.0.7"}] * 4,
    {"path": f"{Q}/messages", "body": send(), "address": "10.0.0.7"},
    # rate limits: a failed key takes no room in the tenant's window, which takes 2 sends a minute
    *[{"path": f"{Q}/messages", "body": send(), "key": "limited, wrong secret", "address": "10.0.0.6"}] * 2,
    *[{"path": f"{Q}/messages", "body": send(), "key": "limited"}] * 3,
    # get
    {"path": f"{Q}/get", "body": {"max": 2}},
    {"path": f"{Q}/get", "body": {}},
    {"path": f"{Q}/get", "raw": ""},
    {"path": f"{Q}/get", "body": {"max": 1}, "content_type": None},
    {"path": f"{Q}/get", "body": {"max": 0}},
    {"path": f"{Q}/get", "body": {"max": "2"}},
    {"path": f"{Q}/get", "body": {"max": 2.0}},
    {"path": f"{Q}/get", "body": {"max": None}},
    {"path": f"{Q}/get", "body": {"wait_ms": 20_001}},
    {"path": f"{Q}/get", "body": {"wait_ms": 10}},
    {"path": f"{Q}/get", "body": {"subscriber": "s1"}},
    {"path": "/v1/queues/news/get", "body": {"subscriber": "s1", "max": 5}},
    {"path": "/v1/queues/news/get", "body": {}},
    {"path": f"{Q}/get", "body": {"consumer": "bad name"}},
    {"path": f"{Q}/get", "body": {"ack": {}}},
    {"path": f"{Q}/get", "body": {"ack": {"receipts": [RECEIPT]}}},
    {"path": f"{Q}/get", "body": {"ack": {"receipts": ["bad"]}}},
    {"path": f"{Q}/get", "body": {"ack": None}},
    {"path": f"{Q}/get", "body": {"other": 1}},
    {"path": "/v1/queues/missing/get", "body": {}},
    # settles
    {"path": f"{Q}/ack", "body": {"receipts": [RECEIPT]}},
    {"path": f"{Q}/ack", "body": {"ids": ["x"], "consumer": "c1"}},
    {"path": f"{Q}/ack", "body": {}},
    {"path": f"{Q}/ack", "body": {"ids": [], "receipts": []}},
    {"path": f"{Q}/ack", "body": {"ids": [""]}},
    {"path": f"{Q}/ack", "body": {"ids": ["i" * 65]}},
    {"path": f"{Q}/ack", "body": {"ids": ["😀" * 64]}},
    {"path": f"{Q}/ack", "body": {"receipts": ["bad"]}},
    {"path": f"{Q}/ack", "body": {"receipts": [RECEIPT + "\n"]}},
    {"path": f"{Q}/ack", "body": {"ids": [1]}},
    {"path": f"{Q}/ack", "body": {"ids": "x"}},
    {"path": f"{Q}/ack", "body": {"ids": ["x"], "subscriber": "s1"}},
    {"path": f"{Q}/ack", "raw": '{"ids": ["x"], "ids": [5]}'},
    {"path": f"{Q}/ack", "raw": '{"ids": ["\\ud800"]}'},
    {"path": f"{Q}/ack", "raw": '[]'},
    {"path": f"{Q}/nack", "body": {"receipts": [RECEIPT], "reason": "broken"}},
    {"path": f"{Q}/nack", "body": {"ids": ["x"], "reason": "r" * 4097}},
    {"path": f"{Q}/nack", "body": {"ids": ["x"], "reason": None}},
    {"path": f"{Q}/extend", "body": {"ids": ["x"], "seconds": 5}},
    {"path": f"{Q}/extend", "body": {"ids": ["x"]}},
    {"path": f"{Q}/extend", "body": {"ids": ["x"], "seconds": 0}},
    {"path": f"{Q}/extend", "body": {"ids": ["x"], "seconds": 86_401}},
    {"path": f"{Q}/extend", "body": {"ids": ["x"], "seconds": True}},
    {"path": f"{Q}/extend", "raw": '{"ids": ["x"], "seconds": 1e400}'},
    {"path": f"{Q}/release", "body": {"receipts": [RECEIPT]}},
    {"path": f"{Q}/release", "body": {"ids": ["x"], "consumer": "c1"}},
    # topics
    {"path": "/v1/topics/news/eu/messages", "body": send()},
    {"path": "/v1/topics/nowhere/messages", "body": send()},
    {"path": "/v1/topics/news//eu/messages", "body": send()},
    {"path": "/v1/topics/news/*/messages", "body": send()},
    {"path": "/v1/topics/messages/messages", "body": send()},
    {"path": "/v1/topics/news/eu/messages", "body": {"messages": [{"documents": []}]}},
    {"path": "/v1/topics/messages", "body": {"messages": [{"documents": [DOC], "topic": "news/a"},
                                                          {"documents": [DOC], "topic": "other"}]}},
    {"path": "/v1/topics/messages", "body": {"messages": [{"documents": [DOC], "topic": "a//b"}]}},
    {"path": "/v1/topics/messages", "body": send()},
]


@pytest.fixture(scope="module")
def sides(valkey) -> Iterator[tuple[Side, Side]]:
    hot, flask = Side(valkey, "hot-path", True), Side(valkey, "flask-fo", False)
    try:
        yield hot, flask
    finally:
        hot.close()
        flask.close()


def test_the_hot_path_answers_as_flask_does(sides: tuple[Side, Side]) -> None:
    hot, flask = sides
    for i, case in enumerate(CASES):
        got, want = hot.seen(hot.call(case)), flask.seen(flask.call(case))
        if "Retry-After" in want[2]:  # the seconds left of a window, read a moment apart
            assert abs(int(got[2].pop("Retry-After")) - int(want[2].pop("Retry-After"))) <= 1, (i, case)
        assert got == want, (i, case)


def test_every_path_served_here_is_the_route_flask_has_for_it(sides: tuple[Side, Side]) -> None:
    hot, _ = sides
    urls = hot.app.url_map.bind("localhost")
    paths = {case["path"] for case in CASES} | {"/v1/queues/messages/messages", "/v1/queues/get/ack",
                                                "/v1/topics/a/b/c/messages", "/v1/topics/a/messages/messages"}
    served = 0
    for path in paths:
        found = route_of(path)
        if found is not None:
            endpoint, args = urls.match(path, "POST")
            assert (endpoint, list(args.values())) == (found[0].endpoint, [found[1]] if found[1] else []), path
            served += 1
    assert served >= 8


def schema_load(kind: str, body: bytes) -> dict[str, Any] | None:
    """What Flask's parser makes of ``body``: the app's strict JSON, then the schema; None when it refuses."""
    try:
        return SCHEMAS[kind]().load(strict_json.parse(body))  # type: ignore[no-any-return]
    except (ma.ValidationError, InvalidInput, ValueError):
        return None


NAMES = st.sampled_from(["c1", "s1", "bad name", "", "a" * 128, "a" * 129, "é"])
IDS = st.lists(st.sampled_from(["x", "", "i" * 64, "i" * 65, "😀", 5, None]), max_size=3)
RECEIPTS = st.lists(st.sampled_from([RECEIPT, "bad", RECEIPT + "\n", "1-1~0", 7]), max_size=3)
NUMBERS = st.one_of(st.integers(-5, 30_000), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                    st.none(), st.text(max_size=2))
SELECTION = st.fixed_dictionaries({}, optional={"ids": IDS, "receipts": RECEIPTS, "other": st.just(1)})
BODIES = st.fixed_dictionaries({}, optional={
    "ids": IDS, "receipts": RECEIPTS, "subscriber": NAMES, "consumer": NAMES, "max": NUMBERS, "wait_ms": NUMBERS,
    "seconds": NUMBERS, "reason": st.one_of(st.text(max_size=3), st.none(), st.just("r" * 4097)),
    "ack": st.one_of(SELECTION, st.none(), st.just([])), "other": st.just(1)})


@given(kind=st.sampled_from(sorted(SCHEMAS)), body=BODIES)
@settings(max_examples=400, deadline=None)
def test_msgspec_takes_only_what_the_schema_takes_and_loads_it_alike(kind: str, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    fast = selections.decode(kind, raw)
    if fast is not None:
        assert fast == schema_load(kind, raw), (kind, body)


@pytest.mark.parametrize("kind, body", [
    ("get", {}), ("get", {"max": 100, "wait_ms": 1000, "consumer": "c", "ack": {"receipts": [RECEIPT] * 3}}),
    ("ack", {"receipts": [RECEIPT]}), ("ack", {"ids": ["x"], "subscriber": "s1", "consumer": "c"}),
    ("nack", {"ids": ["x"], "reason": "why"}), ("extend", {"receipts": [RECEIPT], "seconds": 2.5}),
    ("release", {"ids": ["x"], "subscriber": "s1"}),
])
def test_msgspec_takes_the_bodies_clients_send(kind: str, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    assert selections.decode(kind, raw) == schema_load(kind, raw) is not None


def test_the_requests_clients_make_are_served_without_flask(sides: tuple[Side, Side]) -> None:
    hot, _ = sides
    handed: list[str] = []
    front = hot.app.wsgi_app
    flask = front.flask  # type: ignore[attr-defined]

    def counted(environ: dict[str, Any], start_response: Any) -> Any:
        handed.append(environ["PATH_INFO"])
        return flask(environ, start_response)

    front.flask = counted  # type: ignore[attr-defined]
    try:
        for case in [{"path": f"{Q}/messages", "body": send()}, {"path": f"{Q}/get", "body": {"max": 1}},
                     {"path": f"{Q}/ack", "body": {"receipts": [RECEIPT]}}, {"path": f"{Q}/messages", "body": send(),
                                                                             "key": "owner", "tenant_header": "name"},
                     {"path": "/v1/topics/news/eu/messages", "body": send()}, {"path": f"{Q}/messages", "key": None,
                                                                               "body": send()}]:
            hot.call(case)
        assert handed == []
        hot.call({"path": f"{Q}/ack", "body": {}})
        assert handed == [f"{Q}/ack"]
    finally:
        front.flask = flask  # type: ignore[attr-defined]


def raw_answer(side: Side, case: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """What the app hands the server for ``case``: the status line, every header in its order, the body."""
    headers = {"Authorization": f"Bearer {side.key}", "Content-Type": "application/json", **case.get("headers", {})}
    environ = EnvironBuilder(path=case["path"], method="POST", data=json.dumps(case["body"]), headers=headers,
                             environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_environ()
    started: list[Any] = []
    chunks = side.app(environ, lambda status, headers, exc_info=None: started.append((status, list(headers))))
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return started[0][0], started[0][1], body


@pytest.mark.parametrize("case", [
    {"path": f"{Q}/ack", "body": {"receipts": [RECEIPT]}},
    {"path": f"{Q}/release", "body": {"ids": ["x"]}},
    {"path": "/v1/queues/empty/get", "body": {"max": 1}},
    {"path": f"{Q}/messages", "body": send(properties={"é": "😀"})},
    {"path": "/v1/topics/nowhere/messages", "body": send()},
    {"path": f"{Q}/messages", "body": {"messages": []}},
], ids=["ack", "release", "get", "send", "publish", "refused"])
def test_the_hot_path_writes_the_bytes_flask_writes(sides: tuple[Side, Side], case: dict[str, Any]) -> None:
    """Byte for byte, the status line and every header in order (``PlainAnswer`` in place of werkzeug's
    ``Response``), the body with its ids masked."""
    hot, flask = sides
    for side in sides:
        side.services.queues.put_queue(side.tenants[0].id, "empty", "point_to_point")
    (got_status, got_headers, got_body), (want_status, want_headers, want_body) = (
        raw_answer(hot, case), raw_answer(flask, case))
    masked = [MESSAGE_ID.sub(b"<id>", body).replace(b"hot-path", b"<name>").replace(b"flask-fo", b"<name>")
              for body in (got_body, want_body)]
    assert (got_status, masked[0]) == (want_status, masked[1])
    assert [name for name, _ in got_headers] == [name for name, _ in want_headers]
    assert dict(got_headers)["Content-Length"] == str(len(got_body))
    assert ({k: v for k, v in got_headers if k != "Content-Length"}
            == {k: v for k, v in want_headers if k != "Content-Length"})


@pytest.mark.parametrize("status, body", [(200, b'{"messages":[]}'), (201, '{"ids":["é"]}'.encode()), (200, b"")])
def test_a_plain_answer_is_what_werkzeugs_response_writes(status: int, body: bytes) -> None:
    want = Response(body, status=status, mimetype="application/json")
    want.headers[MEMORY_STATE_HEADER] = "high"
    got = PlainAnswer(status, body)
    got.headers.append((MEMORY_STATE_HEADER, "high"))
    seen: list[Any] = []
    environ = EnvironBuilder(method="POST").get_environ()
    want_body = b"".join(want(environ, lambda s, h, exc_info=None: seen.append((s, list(h)))))
    got_body = b"".join(got(environ, lambda s, h, exc_info=None: seen.append((s, list(h)))))
    assert seen[0] == seen[1] and want_body == got_body == body
