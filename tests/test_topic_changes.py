"""A node follows a change of a tenant's topic patterns by what moved, not by a rebuild.

Each change logs its queue with the version it made; a node whose cached matcher
a publish found stale reads the queues changed since and updates the matcher
with them. Run on the real Valkey, the cluster and fakeredis (the ``qs`` fixture).
"""

from __future__ import annotations

from atomq import defaults
from atomq.platform import QueueServer
from atomq.platform.store import keys as k
from atomq.platform.watch.audit import audit_tenant
from support.queues import msg

P2P = "point_to_point"


def _counts(node: QueueServer) -> tuple[int, int]:
    return node.topic_matchers.rebuilds, node.topic_matchers.updates


def test_a_node_with_a_cached_matcher_updates_it_with_the_queues_that_changed(qs: QueueServer, tenant: str) -> None:
    other_node = QueueServer(qs.client, qs.settings)
    qs.put_queue(tenant, "eu", P2P, topics=["orders/eu/>"])
    qs.put_queue(tenant, "us", P2P, topics=["orders/us/>", "orders/*/all"])
    qs.put_queue(tenant, "quiet", P2P, topics=["quiet/>"])
    assert other_node.publish(tenant, "orders/us/1", [msg("a")]).queues == ["us"]
    assert _counts(other_node) == (1, 0), "its first matcher is built from all the patterns"

    qs.put_queue(tenant, "eu", P2P, topics=["orders/eu/>", "orders/*/all"])
    qs.delete_queue(tenant, "us")
    qs.put_queue(tenant, "asia", P2P, topics=["orders/asia/>"])
    assert other_node.publish(tenant, "orders/x/all", [msg("b")]).queues == ["eu"]
    assert _counts(other_node) == (1, 1), "three changes since its version: one update, no rebuild"
    assert other_node.publish(tenant, "orders/us/2", [msg("c")]).queues == [], "a removed queue attracts nothing"
    assert other_node.publish(tenant, "orders/asia/1", [msg("d")]).queues == ["asia"]
    assert other_node.publish(tenant, "quiet/1", [msg("e")]).queues == ["quiet"]
    version, matcher = other_node.topic_matchers.matcher(tenant)
    assert version == other_node.topic_matchers.version(tenant) == "6"
    assert matcher.patterns == {"eu": ("orders/eu/>", "orders/*/all"), "quiet": ("quiet/>",),
                                "asia": ("orders/asia/>",)}
    assert _counts(other_node) == (1, 1)
    assert [m.documents[0].data for m in qs.get(tenant, "asia", max_messages=10)] == ["d"]


def test_a_refresh_with_nothing_changed_keeps_the_matcher(qs: QueueServer, tenant: str) -> None:
    """A publish refreshes the matcher after any stale route, not only stale patterns: when the
    patterns did not change it keeps the one it has (it used to rebuild it)."""
    qs.put_queue(tenant, "q", P2P, topics=["t/>"])
    cached = qs.topic_matchers.matcher(tenant)
    assert qs.topic_matchers.matcher(tenant, refresh=True) is cached
    assert _counts(qs) == (1, 0)


def test_a_matcher_further_behind_than_the_log_is_rebuilt(qs: QueueServer, tenant: str) -> None:
    other_node = QueueServer(qs.client, qs.settings)
    qs.put_queue(tenant, "q", P2P, topics=["t/0"])
    assert other_node.publish(tenant, "t/0", [msg("a")]).queues == ["q"]
    for i in range(1, defaults.TOPIC_CHANGE_LOG_LENGTH + 2):
        qs.put_queue(tenant, "q", P2P, topics=[f"t/{i}"])
    log = qs.client.lrange(k.TenantKeys(tenant).topic_changes, 0, -1)
    assert len(log) == defaults.TOPIC_CHANGE_LOG_LENGTH and log[0] == b"102:q", "the newest changes, bounded"
    last = f"t/{defaults.TOPIC_CHANGE_LOG_LENGTH + 1}"
    assert other_node.publish(tenant, last, [msg("b")]).queues == ["q"]
    assert _counts(other_node) == (2, 0)
    qs.put_queue(tenant, "q", P2P, topics=["t/again"])
    assert other_node.publish(tenant, "t/again", [msg("c")]).queues == ["q"]
    assert _counts(other_node) == (2, 1), "back within the log: updated again"


def test_a_change_an_older_atomq_made_without_logging_it_means_a_rebuild(qs: QueueServer, tenant: str) -> None:
    """Data an older atomq wrote has no log, and an older node still running beside a newer one
    changes patterns without logging: the log then does not count down to the version, and a
    node rebuilds rather than miss the change."""
    other_node = QueueServer(qs.client, qs.settings)
    tk = k.TenantKeys(tenant)
    qs.put_queue(tenant, "a", P2P, topics=["a/>"])
    qs.client.delete(tk.topic_changes)  # as an older atomq left it
    assert other_node.publish(tenant, "a/1", [msg("x")]).queues == ["a"]
    qs.put_queue(tenant, "b", P2P, topics=["b/>"])  # logged: version 2
    qs.client.hset(tk.topic_patterns, "a", '["a2/>"]')  # what an older atomq's change did: version 3, not logged
    qs.client.hincrby(tk.topic_patterns, "#v", 1)
    assert other_node.publish(tenant, "a2/1", [msg("y")]).queues == ["a"]
    assert other_node.publish(tenant, "b/1", [msg("z")]).queues == ["b"]
    assert _counts(other_node) == (2, 0)
    qs.put_queue(tenant, "b", P2P, topics=["b2/>"])  # logged again: version 4
    assert other_node.publish(tenant, "b2/1", [msg("w")]).queues == ["b"]
    assert _counts(other_node) == (2, 1)


def test_the_audit_checks_the_log_of_changes(qs: QueueServer, tenant: str) -> None:
    tk = k.TenantKeys(tenant)
    qs.put_queue(tenant, "a", P2P, topics=["a/>"])
    qs.put_queue(tenant, "a", P2P, topics=["a/1"])
    assert qs.client.lrange(tk.topic_changes, 0, -1) == [b"2:a", b"1:a"]
    assert audit_tenant(qs.client, tenant) == []
    qs.client.lpush(tk.topic_changes, "9:a")
    assert audit_tenant(qs.client, tenant) == [
        "the log of topic pattern changes is out of order or past version 2: [9, 2, 1]"]
    qs.client.lset(tk.topic_changes, 0, "nonsense")
    assert audit_tenant(qs.client, tenant) == [
        "the log of topic pattern changes holds an entry that is not <version>:<queue>"]
    qs.client.lpop(tk.topic_changes)
