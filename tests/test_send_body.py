"""The hand-written send validator agrees with SendSchema, the contract it stands in for, and with
PublishManySchema for a publish of each message to its own topic."""

from __future__ import annotations

import base64

import marshmallow as ma
import pytest

from atomq.api.schemas.messages import PublishManySchema, SendSchema
from atomq.api.wire.send_body import parse_publish_many, parse_send
from atomq.errors import InvalidInput

DOC = {"data": "x"}
VALID = [
    {"messages": [{"documents": [DOC]}]},
    {"messages": [{"documents": [DOC, {"data_base64": base64.b64encode(b"\x00\x01").decode()}]}]},
    {"messages": [{"documents": [{"data": "", "properties": {"k": "v", "n": 1}}], "properties": {"a": [1]},
                   "dedupe_id": "d" * 256, "priority": 9, "expires_at": 1.5, "traceparent": "00-1-2-01"}]},
    {"messages": [{"documents": [DOC], "priority": 0, "expires_at": 17}] * 3},
    {"messages": [{"documents": [DOC], "group": "g" * 128}, {"documents": [DOC], "group": "!~|,\\\""},
                  {"documents": [DOC], "group": None}]},
    {"messages": [{"documents": [DOC], "delay_s": 0}, {"documents": [DOC], "delay_s": None}], "delay_s": 86_400},
    {"messages": [{"documents": [DOC], "delay_s": 0.5}], "delay_s": None},
]
INVALID = [
    [],
    "text",
    {},
    {"messages": []},
    {"messages": "x"},
    {"messages": [{}]},
    {"messages": [{"documents": []}]},
    {"messages": [{"documents": [{}]}]},
    {"messages": [{"documents": [{"data": "x", "data_base64": "eA=="}]}]},
    {"messages": [{"documents": [{"data": 5}]}]},
    {"messages": [{"documents": [{"data_base64": "not base64!"}]}]},
    {"messages": [{"documents": [{"data": "x", "extra": 1}]}]},
    {"messages": [{"documents": [{"data": "x", "properties": []}]}]},
    {"messages": [{"documents": [DOC], "properties": "p"}]},
    {"messages": [{"documents": [DOC], "dedupe_id": ""}]},
    {"messages": [{"documents": [DOC], "dedupe_id": "d" * 257}]},
    {"messages": [{"documents": [DOC], "priority": 10}]},
    {"messages": [{"documents": [DOC], "priority": "1"}]},
    {"messages": [{"documents": [DOC], "priority": True}]},
    {"messages": [{"documents": [DOC], "priority": 1.0}]},
    {"messages": [{"documents": [DOC], "expires_at": "soon"}]},
    {"messages": [{"documents": [DOC], "traceparent": "t" * 257}]},
    {"messages": [{"documents": [DOC], "group": ""}]},
    {"messages": [{"documents": [DOC], "group": "g" * 129}]},
    {"messages": [{"documents": [DOC], "group": "a b"}]},
    {"messages": [{"documents": [DOC], "group": "a\n"}]},
    {"messages": [{"documents": [DOC], "group": "é"}]},
    {"messages": [{"documents": [DOC], "group": 7}]},
    {"messages": [{"documents": [DOC], "unknown": 1}]},
    {"messages": [{"documents": [DOC]}], "more": 1},
    {"messages": [{"documents": [DOC], "delay_s": -1}]},
    {"messages": [{"documents": [DOC], "delay_s": 86_401}]},
    {"messages": [{"documents": [DOC]}], "delay_s": "5"},
    {"messages": [{"documents": [DOC]}], "delay_s": True},
    {"messages": [{"documents": [DOC]}, "not an object"]},
]


def schema_accepts(body: object) -> bool:
    try:
        SendSchema().load(body)  # type: ignore[arg-type]
    except ma.ValidationError:
        return False
    return True


@pytest.mark.parametrize("body", VALID)
def test_both_accept_valid_bodies(body: object) -> None:
    assert schema_accepts(body)
    messages = parse_send(body)
    assert len(messages) == len(body["messages"])  # type: ignore[index]


@pytest.mark.parametrize("body", INVALID)
def test_both_refuse_invalid_bodies(body: object) -> None:
    assert not schema_accepts(body)
    with pytest.raises(InvalidInput) as err:
        parse_send(body)
    assert err.value.details["field"]


def test_the_validator_keeps_content_and_names_the_failing_field() -> None:
    (m,) = parse_send({"messages": [{"documents": [{"data_base64": "AAE="}, {"data": "t"}],
                                     "properties": {"k": "v"}, "dedupe_id": "d"}]})
    assert [d.data for d in m.documents] == [b"\x00\x01", "t"]
    assert (m.properties, m.dedupe_id) == ({"k": "v"}, "d")
    with pytest.raises(InvalidInput) as err:
        parse_send({"messages": [{"documents": [DOC]}, {"documents": [DOC, {"data": 1}]}]})
    assert err.value.details == {"field": "messages.1.documents.1.data"}
    own, given = parse_send({"messages": [{"documents": [DOC], "delay_s": 0}, {"documents": [DOC]}], "delay_s": 30})
    assert (own.delay_s, given.delay_s) == (0, 30), "the body's delay_s for a message that gives none"


def with_topics(body: object, topic: object = "orders/eu/1") -> object:
    """``body`` with ``topic`` in each of its messages that is an object (a publish to many topics)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return body
    return {**body, "messages": [{**m, "topic": topic} if isinstance(m, dict) else m for m in body["messages"]]}


def publish_schema_accepts(body: object) -> bool:
    try:
        PublishManySchema().load(body)  # type: ignore[arg-type]
    except ma.ValidationError:
        return False
    return True


@pytest.mark.parametrize("body", VALID)
def test_both_accept_valid_bodies_of_a_publish_to_many_topics(body: object) -> None:
    publish = with_topics(body)
    assert publish_schema_accepts(publish)
    topics, messages = parse_publish_many(publish)
    assert topics == ["orders/eu/1"] * len(messages) == ["orders/eu/1"] * len(body["messages"])  # type: ignore[index]


@pytest.mark.parametrize("body", INVALID + [with_topics(b, t) for b in VALID[:1] for t in ("a/*", "", 7, None, "x" * 251)]
                         + VALID[:1])
def test_both_refuse_invalid_bodies_of_a_publish_to_many_topics(body: object) -> None:
    publish = with_topics(body) if body in INVALID else body
    assert not publish_schema_accepts(publish)
    with pytest.raises(InvalidInput) as err:
        parse_publish_many(publish)
    assert err.value.details["field"]
