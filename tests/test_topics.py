"""Topics: the patterns queues attract them with, and a publish stored in every matched queue or in none.

The matcher is pure logic, checked against a regular expression per pattern;
the publishes run on the real Valkey and on fakeredis (the ``qs`` fixture).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomq.errors import InvalidInput, QuotaExceeded
from atomq.platform import QueueServer
from atomq.platform.topics import PATTERN_PATTERN, TOPIC_PATTERN, TopicMatcher, check_pattern, check_patterns, check_topic
from support.audit import assert_audit_clean
from support.queues import browse_all, msg

P2P, PUBSUB = "point_to_point", "publish_subscribe"


def test_the_contracts_examples_match_as_it_says() -> None:
    m = TopicMatcher({"gt": ["a/>"], "star": ["orders/*/eu"], "pre": ["ab*"], "all": [">"], "exact": ["a"]})
    assert m.match("a") == ["all", "exact"], "'a/>' needs one more level"
    assert m.match("a/b") == ["all", "gt"]
    assert m.match("a/b/c") == ["all", "gt"]
    assert m.match("orders/7/eu") == ["all", "star"]
    assert m.match("orders/7/us") == ["all"]
    assert m.match("orders/7/eu/x") == ["all"], "'*' is exactly one level"
    assert m.match("ab") == ["all", "pre"] and m.match("abc") == ["all", "pre"]
    assert m.match("ax") == ["all"] and m.match("ab/c") == ["all"]


def test_a_queue_matched_by_several_patterns_is_named_once() -> None:
    m = TopicMatcher({"q": ["boomi/test/>", "boomi/*/x", "boomi/te*/x"]})
    assert m.match("boomi/test/x") == ["q"]


@pytest.mark.parametrize("topic", ["", "a//b", "/a", "a/", "a/*", "a/>", "a b", "ä", "x" * 251, 7, None])
def test_a_topic_with_an_empty_level_a_wildcard_or_other_characters_is_refused(topic) -> None:
    with pytest.raises(InvalidInput) as err:
        check_topic(topic)
    assert err.value.details["field"] == "topic"


@pytest.mark.parametrize("pattern", ["a/>/b", "a*b", "*a", "a/b>", ">>", "", "a//b", "**"])
def test_a_malformed_pattern_is_refused(pattern) -> None:
    with pytest.raises(InvalidInput) as err:
        check_patterns([pattern])
    assert err.value.details["field"] == "topics"


def test_patterns_are_a_bounded_list_without_repeats() -> None:
    assert check_patterns(["a/>", "b", "a/>"]) == ("a/>", "b")
    for bad in ("a/>", [f"t{i}" for i in range(101)]):
        with pytest.raises(InvalidInput):
            check_patterns(bad)


def _regex(pattern: str) -> re.Pattern[str]:
    parts = []
    for level in pattern.split("/"):
        if level == ">":
            parts.append(r"[^/]+(/[^/]+)*")
        elif level.endswith("*"):
            parts.append(re.escape(level[:-1]) + r"[^/]*")
        else:
            parts.append(re.escape(level))
    return re.compile("/".join(parts))


_levels = st.sampled_from(["a", "ab", "abc", "b"])
_pattern_levels = st.sampled_from(["a", "ab", "b", "*", "a*", "ab*"])


@st.composite
def _patterns(draw: st.DrawFn) -> str:
    levels = draw(st.lists(_pattern_levels, min_size=0, max_size=3))
    if draw(st.booleans()) or not levels:
        levels.append(">")
    return "/".join(levels)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["q1", "q2", "q3", "q4"]), st.lists(_patterns(), min_size=1, max_size=3),
                       max_size=4),
       st.lists(_levels, min_size=1, max_size=4).map("/".join))
def test_the_trie_matches_what_a_regular_expression_per_pattern_matches(patterns, topic) -> None:
    expected = sorted(q for q, ps in patterns.items() if any(_regex(p).fullmatch(topic) for p in ps))
    assert TopicMatcher(patterns).match(topic) == expected


def test_a_publish_reaches_every_matched_queue_once_with_one_id(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "input", P2P, topics=["boomi/test/>", "boomi/*/special"])
    qs.put_queue(tenant, "errors", P2P, topics=["boomi/errors/echo-service/>"])
    qs.put_queue(tenant, "audit", PUBSUB, topics=[">"])
    qs.put_subscriber(tenant, "audit", "one")
    qs.put_subscriber(tenant, "audit", "two")
    published = qs.publish(tenant, "boomi/test/special", [msg("a"), msg("b")])
    assert published.queues == ["audit", "input"]
    got = qs.get(tenant, "input", max_messages=10)
    assert [d.id for d in got] == published.ids and [d.envelope.topic for d in got] == ["boomi/test/special"] * 2
    for sub in ("one", "two"):
        assert [d.id for d in qs.get(tenant, "audit", max_messages=10, subscriber=sub)] == published.ids
    assert qs.get(tenant, "errors") == []
    assert qs.get_queue(tenant, "input").topics == ("boomi/test/>", "boomi/*/special")
    assert qs.counters.queue_totals(tenant, ["input"])["input"]["sent"] == 2
    only_audit = qs.publish(tenant, "elsewhere/x", [msg("c")])
    assert only_audit.queues == ["audit"] and len(only_audit.ids) == 1
    qs.delete_queue(tenant, "audit")
    assert qs.publish(tenant, "elsewhere/x", [msg("c")]).queues == [], "a removed queue attracts nothing"
    direct = qs.send(tenant, "input", [msg("d")])
    assert [(d.id, d.envelope.topic) for d in qs.get(tenant, "input")] == [(direct[0], None)]
    assert_audit_clean(qs.client, tenant)


def test_a_changed_pattern_applies_to_the_next_publish(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, topics=["a/>"])
    assert qs.publish(tenant, "a/1", [msg("x")]).queues == ["q"]
    qs.put_queue(tenant, "q", P2P, topics=["b/>"])
    assert qs.publish(tenant, "a/1", [msg("y")]).queues == []
    assert qs.publish(tenant, "b/1", [msg("z")]).queues == ["q"]
    qs.put_queue(tenant, "q", P2P, max_redeliveries=2)
    assert qs.get_queue(tenant, "q").topics == ("b/>",), "a put that does not name topics keeps them"
    qs.put_queue(tenant, "q", P2P, topics=[])
    assert qs.publish(tenant, "b/1", [msg("z")]).queues == []


def test_a_publish_past_the_quota_stores_in_no_queue(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "small", P2P, topics=["t"])
    qs.put_queue(tenant, "big", P2P, topics=["t"])
    with pytest.raises(QuotaExceeded):
        qs.publish(tenant, "t", [msg("x" * 5000)], quota_bytes=3000)
    assert qs.get_queue(tenant, "small").depth == qs.get_queue(tenant, "big").depth == 0
    assert_audit_clean(qs.client, tenant)


def test_a_repeated_dedupe_id_on_a_topic_stores_nothing_again(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, topics=["t/>"])
    first = qs.publish(tenant, "t/1", [msg("x", dedupe_id="once")])
    again = qs.publish(tenant, "t/1", [msg("x", dedupe_id="once")])
    assert again.ids == first.ids and qs.get_queue(tenant, "q").depth == 1
    assert qs.publish(tenant, "t/2", [msg("x", dedupe_id="once")]).ids != first.ids, "another topic"
    assert_audit_clean(qs.client, tenant)


@given(st.text(alphabet="ab*>/.-_ \n", min_size=1, max_size=12))
def test_the_documents_regular_expressions_state_the_level_rules(text: str) -> None:
    """The checks and the OpenAPI document share two regular expressions; here they are held to
    the rules as the contract words them, level by level, so neither lets through what the other
    refuses."""
    levels = text.split("/")
    plain = [re.fullmatch(r"[A-Za-z0-9._-]+", lv) is not None for lv in levels]
    is_topic = all(plain)
    is_pattern = all(ok or re.fullmatch(r"[A-Za-z0-9._-]*\*", lv) is not None or (lv == ">" and i == len(levels) - 1)
                     for i, (lv, ok) in enumerate(zip(levels, plain)))
    assert (re.fullmatch(TOPIC_PATTERN, text) is not None) == is_topic
    assert (re.fullmatch(PATTERN_PATTERN, text) is not None) == is_pattern
    for check, expected in ((check_topic, is_topic), (check_pattern, is_pattern)):
        try:
            check(text)
            accepted = True
        except InvalidInput:
            accepted = False
        assert accepted == expected


def test_a_publish_that_matched_nothing_sees_a_pattern_another_node_added(qs: QueueServer, tenant: str) -> None:
    """A node caches each tenant's patterns by version; a publish that matches nothing runs no
    script to check the version, so it checks it itself."""
    other_node = QueueServer(qs.client, qs.settings)
    assert qs.publish(tenant, "orders/eu/new", [msg("first")]).queues == []
    other_node.put_queue(tenant, "eu", "point_to_point", topics=["orders/eu/>"])
    assert qs.publish(tenant, "orders/eu/new", [msg("second")]).queues == ["eu"]
    assert [b.documents[0].data for b in browse_all(qs, tenant, "eu")] == ["second"]
