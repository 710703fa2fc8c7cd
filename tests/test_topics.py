"""Topics: the patterns queues attract them with, and a publish stored in every matched queue or in none.

The matcher is pure logic, checked against a regular expression per pattern;
the publishes run on the real Valkey and on fakeredis (the ``qs`` fixture).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atomq import defaults
from atomq.errors import Conflict, InvalidInput, NotDurable, QueueFull, QuotaExceeded, TooLarge
from atomq.platform import PublishedMany, QueueServer
from atomq.platform.queues.topics import (
    PATTERN_PATTERN,
    TOPIC_PATTERN,
    TopicMatcher,
    check_pattern,
    check_patterns,
    check_topic,
)
from atomq.platform.store import keys as k
from support.audit import assert_audit_clean
from support.queues import FAST, browse_all, msg

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
    levels = draw(st.lists(_pattern_levels, min_size=0, max_size=6))  # deep: runs of levels split and share
    if draw(st.booleans()) or not levels:
        levels.append(">")
    return "/".join(levels)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(["q1", "q2", "q3", "q4", "q5"]), st.lists(_patterns(), min_size=1, max_size=6),
                       max_size=5),
       st.lists(_levels, min_size=1, max_size=7).map("/".join))
def test_the_trie_matches_what_a_regular_expression_per_pattern_matches(patterns, topic) -> None:
    expected = sorted(q for q, ps in patterns.items() if any(_regex(p).fullmatch(topic) for p in ps))
    assert TopicMatcher(patterns).match(topic) == expected


def _shape(node: Any) -> tuple[Any, ...]:
    """A trie as a value: the queues ending at each node and the runs leaving it, in no order."""
    edges = [*node.literal.values(), *node.wild]
    assert all(node.literal[e.levels[0]] is e for e in node.literal.values()), "literal edges by their first level"
    return (frozenset(node.ending), frozenset(node.rest),
            frozenset((e.levels, _shape(e.node)) for e in edges))


_queues = st.sampled_from(["q1", "q2", "q3", "q4", "q5"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_queues, st.lists(_patterns(), min_size=1, max_size=6), max_size=5),
       st.lists(st.tuples(_queues, st.lists(_patterns(), max_size=6)), min_size=1, max_size=6),
       st.lists(st.lists(_levels, min_size=1, max_size=7).map("/".join), min_size=1, max_size=5))
def test_a_matcher_updated_by_any_changes_is_the_one_built_from_the_final_patterns(first, changes, topics) -> None:
    """A worker follows a change by updating its matcher with what moved, not by a rebuild: after
    any sequence of changes the update is the very trie a rebuild makes (so it costs what that
    holds), matches as a regular expression per pattern does, and the matcher it came from still
    matches as it did (threads may be reading it)."""
    matcher, held = TopicMatcher(first), {q: list(ps) for q, ps in first.items()}
    for queue, patterns in changes:
        before, before_matches = matcher, [matcher.match(t) for t in topics]
        matcher = matcher.updated({queue: patterns})
        assert [before.match(t) for t in topics] == before_matches, "the old matcher is left as it was"
        held[queue] = patterns
        held = {q: ps for q, ps in held.items() if ps}
        fresh = TopicMatcher(held)
        assert _shape(matcher._root) == _shape(fresh._root)
        assert matcher.patterns == fresh.patterns == {q: tuple(dict.fromkeys(ps)) for q, ps in held.items()}
        for topic in topics:
            assert matcher.match(topic) == sorted(
                q for q, ps in held.items() if any(_regex(p).fullmatch(topic) for p in ps))


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


# -- each message to its own topic ------------------------------------------------------------


def test_messages_with_topics_of_their_own_reach_what_each_topic_attracts(qs: QueueServer, tenant: str) -> None:
    """What an execution publishing ``boomi/echo/<msgId>`` for each output sends in one request:
    each message reaches the queues its own topic attracts, once, and carries its topic."""
    qs.put_queue(tenant, "echo", P2P, topics=["boomi/echo/>"])
    qs.put_queue(tenant, "errors", P2P, topics=["boomi/errors/>"])
    qs.put_queue(tenant, "audit", PUBSUB, topics=["boomi/>"])
    qs.put_subscriber(tenant, "audit", "one")
    topics = ["boomi/echo/1", "boomi/errors/parse", "nowhere/1", "boomi/echo/2"]
    published = qs.publish_many(tenant, topics, [msg("a"), msg("b"), msg("c"), msg("d")])
    a, b, c, d = published.ids
    assert c is None and None not in (a, b, d), "a topic no queue attracts stores nothing"
    assert published.topics == {"boomi/echo/1": ["audit", "echo"], "boomi/echo/2": ["audit", "echo"],
                                "boomi/errors/parse": ["audit", "errors"], "nowhere/1": []}
    assert [(m.id, m.envelope.topic) for m in qs.get(tenant, "echo", max_messages=10)] == [
        (a, "boomi/echo/1"), (d, "boomi/echo/2")]
    assert [(m.id, m.envelope.topic) for m in qs.get(tenant, "errors", max_messages=10)] == [(b, "boomi/errors/parse")]
    assert sorted(m.id for m in qs.get(tenant, "audit", max_messages=10, subscriber="one")) == sorted([a, b, d])
    assert_audit_clean(qs.client, tenant)


def test_a_dedupe_id_counts_per_topic_among_messages_of_many_topics(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, topics=["t/>"])
    first = qs.publish_many(tenant, ["t/1", "t/2", "t/1"], [msg("x", dedupe_id="d")] * 3)
    assert first.ids[0] == first.ids[2] != first.ids[1], "the same topic and id: one message"
    again = qs.publish_many(tenant, ["t/2", "t/1"], [msg("x", dedupe_id="d")] * 2)
    assert again.ids == [first.ids[1], first.ids[0]] and qs.get_queue(tenant, "q").depth == 2
    assert qs.publish(tenant, "t/1", [msg("x", dedupe_id="d")]).ids == [first.ids[0]], "as a publish to one topic"
    assert_audit_clean(qs.client, tenant)


def test_a_refused_group_leaves_the_groups_before_it_stored_and_a_retry_stores_only_the_rest(
        qs: QueueServer, tenant: str) -> None:
    """Messages reaching the same queues are stored together, all or nothing; a refusal stops the
    publish there, and the progress it kept says what was stored, so the retry (the same dedupe ids)
    stores each message once."""
    qs.put_queue(tenant, "small", P2P, topics=["small/>"], max_messages=1)
    qs.put_queue(tenant, "big", P2P, topics=["big/>"])
    topics = ["big/1", "small/1", "small/2", "big/2"]
    messages = [msg(t, dedupe_id=t) for t in topics]
    progress = PublishedMany(ids=[None] * 4)
    with pytest.raises(QueueFull):
        qs.publish_many(tenant, topics, messages, progress=progress)
    assert progress.stored == {0, 3} and progress.ids[1] is progress.ids[2] is None
    assert qs.get_queue(tenant, "big").depth == 2 and qs.get_queue(tenant, "small").depth == 0, "the group: none"
    qs.put_queue(tenant, "small", P2P, max_messages=0)
    done = qs.publish_many(tenant, topics, messages, progress=progress)
    assert done.ids[0] == progress.ids[0] and None not in done.ids
    assert (qs.get_queue(tenant, "big").depth, qs.get_queue(tenant, "small").depth) == (2, 2)
    again = qs.publish_many(tenant, topics, messages)
    assert again.ids == done.ids and qs.get_queue(tenant, "big").depth == 2, "the dedupe ids recognise them all"
    assert_audit_clean(qs.client, tenant)


def test_messages_of_many_topics_are_checked_before_anything_is_stored(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", P2P, topics=["t/>"])
    for topics, messages, field in ((["t/1", "t/*"], [msg("a"), msg("b")], "messages.1.topic"),
                                    (["t/1"], [msg("a"), msg("b")], "messages"),
                                    (["t/1", "t/2"], [msg("a"), msg("b", dedupe_id="")], "messages.1.dedupe_id"),
                                    (["t/1", "nowhere/1"], [msg("a"), msg("b", dedupe_id="")],
                                     "messages.1.dedupe_id"),
                                    (["nowhere/1", "t/1", "t/2"],
                                     [msg("a"), msg("b"), dataclasses.replace(msg("c"), priority=42)],
                                     "messages.2.priority")):
        with pytest.raises(InvalidInput) as err:
            qs.publish_many(tenant, topics, messages)
        assert err.value.details["field"] == field
    qs.put_queue(tenant, "r", P2P, topics=["u/>"])
    three_documents = QueueServer(qs.client, dataclasses.replace(qs.settings, max_documents_per_send=3))
    with pytest.raises(TooLarge):  # over the whole request, though each group's share fits
        three_documents.publish_many(tenant, ["t/1", "u/1"], [msg("a", "b"), msg("c", "d")])
    assert qs.get_queue(tenant, "q").depth == qs.get_queue(tenant, "r").depth == 0


def test_a_group_stored_but_not_synced_does_not_stop_the_others(valkey, tenant: str) -> None:
    """As a send: a sync queue's group that is stored but not synced in time answers not_durable, once
    every group is stored (a standalone Valkey has no replica for min_replicas 1)."""
    client = valkey.client()
    qs = QueueServer(client, dataclasses.replace(FAST, sync_min_replicas=1, sync_timeout_ms=20))
    qs.put_queue(tenant, "ledger", P2P, topics=["ledger/>"], durability="sync")
    qs.put_queue(tenant, "log", P2P, topics=["log/>"])
    progress = PublishedMany(ids=[None] * 3)
    with pytest.raises(NotDurable):
        qs.publish_many(tenant, ["ledger/1", "log/1", "ledger/2"], [msg("a"), msg("b"), msg("c")], progress=progress)
    assert progress.stored == {0, 1, 2} and None not in progress.ids
    assert (qs.get_queue(tenant, "ledger").depth, qs.get_queue(tenant, "log").depth) == (2, 1)
    with pytest.raises(NotDurable):  # tried again with its progress (held by flow control): still not synced
        qs.publish_many(tenant, ["ledger/1", "log/1", "ledger/2"], [msg("a"), msg("b"), msg("c")], progress=progress)
    assert (qs.get_queue(tenant, "ledger").depth, qs.get_queue(tenant, "log").depth) == (2, 1), "nothing twice"
    client.close()


def test_a_tenants_queues_attract_a_bounded_number_of_patterns_together(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each HTTP worker keeps a matcher of them; the count is kept with the patterns, so a change
    is judged without reading them all, and a removed queue gives its patterns back."""
    monkeypatch.setattr(defaults, "MAX_TOPIC_PATTERNS_PER_TENANT", 5)
    qs.put_queue(tenant, "a", "point_to_point", topics=["a/1", "a/2", "a/3"])
    qs.put_queue(tenant, "b", "point_to_point", topics=["b/1", "b/2"])
    with pytest.raises(Conflict) as refused:
        qs.put_queue(tenant, "c", "point_to_point", topics=["c/1"])
    assert refused.value.code == "too_many_topic_patterns" and refused.value.details["limit"] == 5
    with pytest.raises(Conflict):
        qs.put_queue(tenant, "b", "point_to_point", topics=["b/1", "b/2", "b/3"])
    assert qs.get_queue(tenant, "b").topics == ("b/1", "b/2")
    qs.put_queue(tenant, "b", "point_to_point", topics=["b/9"])  # fewer is always taken
    qs.put_queue(tenant, "c", "point_to_point", topics=["c/1"])
    qs.delete_queue(tenant, "a")
    qs.put_queue(tenant, "d", "point_to_point", topics=["d/1", "d/2", "d/3"])
    assert qs.publish(tenant, "d/2", [msg("x")]).queues == ["d"]
    assert int(qs.client.hget(k.TenantKeys(tenant).topic_patterns, "#n")) == 5
    qs.client.hdel(k.TenantKeys(tenant).topic_patterns, "#n")  # as an older atomq left it: counted once
    with pytest.raises(Conflict):
        qs.put_queue(tenant, "e", "point_to_point", topics=["e/1"])
    qs.put_queue(tenant, "c", "point_to_point", topics=[])
    assert int(qs.client.hget(k.TenantKeys(tenant).topic_patterns, "#n")) == 4
