"""Crashes of Valkey (kill -9) and what survives them, each test on its own server and data dir.

The embedded Valkey keeps an AOF with ``appendfsync everysec``: what a call
reported as done is on disk within a second. Every multi-key change is one
Lua script, so a crash between any two calls leaves every count exact and
every invariant of ``audit_tenant`` true. These tests really SIGKILL the
server process by its pid and start a new one on the same data directory.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from atomq.errors import FormatVersionError, NotFound
from atomq.platform import MessageState, QueueServer, QueueSettings
from atomq.platform.shared import manage_record
from atomq.platform.store import keys as k
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.format_version import FORMAT_VERSION
from atomq.platform.watch.audit import audit_tenant
from support.processes import pid_running
from support.queues import FAST, browse_all, counts, dead_all, msg
from support.waiting import wait_until

P2P = "point_to_point"


class Node:
    """An embedded Valkey in its own data directory, with the client and queue server of the current run."""

    def __init__(self, data_dir: Path, settings: QueueSettings = FAST) -> None:
        self.settings = settings
        self.server = EmbeddedValkey(data_dir)
        self.server.start()
        self.client: redis.Redis = self.server.client()
        self.qs = QueueServer(self.client, settings)

    def wait_for_fsync(self) -> None:
        # appendfsync everysec: Valkey appends each write to the AOF and fsyncs it
        # once a second, and promises to lose at most that last second. Waiting past
        # the second IS the behaviour under test, so this waits for wall-clock time;
        # then it polls until no AOF write or background fsync is pending.
        time.sleep(1.1)
        deadline = time.monotonic() + 10
        while True:
            info = self.client.info("persistence")
            if info["aof_buffer_length"] == 0 and info["aof_pending_bio_fsync"] == 0:
                return
            assert time.monotonic() < deadline, f"the AOF was not fsynced: {info}"
            time.sleep(0.01)

    def crash_and_restart(self) -> None:
        """kill -9 the server by its pid, then start a new one on the same data directory."""
        pid = self.server.pid
        assert pid is not None
        self.client.close()
        os.kill(pid, signal.SIGKILL)
        self.server.kill()  # reaps the process; leaves the pid and socket files as a crash does
        assert not pid_running(pid)
        assert self.server.pid_path.exists(), "a crash leaves its pid file behind"
        self.server.start()
        assert self.server.pid != pid
        self.client = self.server.client()
        self.qs = QueueServer(self.client, self.settings)

    def close(self) -> None:
        self.client.close()
        self.server.stop()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "data")
    try:
        yield n
    finally:
        n.close()


def stored_docs(client: redis.Redis, tenant: str) -> set[str]:
    return {d.decode() for d in client.hkeys(k.TenantKeys(tenant).doc)}


# -- what was acknowledged survives a kill -9 ------------------------------------------


@pytest.mark.slow
def test_kill_9_after_the_fsync_second_loses_nothing_acknowledged(node, tenant) -> None:
    n, ack_timeout = 120, 4.0
    qs = node.qs
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=3, ack_timeout_s=ack_timeout)
    ids = qs.send(tenant, "jobs", [msg(f"m{i}") for i in range(n)])
    done = qs.get(tenant, "jobs", max_messages=60)
    assert qs.ack(tenant, "jobs", receipts=[d.receipt for d in done]) == 60
    flying = qs.get(tenant, "jobs", max_messages=20)
    taken_at = time.monotonic()
    acked, flying_ids, ready_ids = ids[:60], ids[60:80], ids[80:]
    assert [d.id for d in done] == acked and [d.id for d in flying] == flying_ids
    inflight_key = k.TenantKeys(tenant).queue("jobs").destination().inflight
    deadlines = dict(node.client.zrange(inflight_key, 0, -1, withscores=True))

    node.wait_for_fsync()
    node.crash_and_restart()
    qs = node.qs

    # Browsing and counting change nothing, so this holds whenever it runs.
    browsed = browse_all(qs, tenant, "jobs", 7)
    assert [m.id for m in browsed] == ids[60:], "exactly the unacked messages, in send order"
    assert [(m.state, m.delivery_count) for m in browsed] == (
        [(MessageState.IN_FLIGHT, 1)] * 20 + [(MessageState.READY, 0)] * 40
    )
    assert [m.documents[0].data for m in browsed] == [f"m{i}" for i in range(60, n)]
    assert counts(qs, tenant, "jobs") == (40, 20, 0)
    assert dict(node.client.zrange(inflight_key, 0, -1, withscores=True)) == deadlines, "same ack deadlines"
    assert stored_docs(node.client, tenant) == {f"{i}.1" for i in ids[60:]}, "acked documents stay freed"
    assert audit_tenant(node.client, tenant) == []

    # Receipts issued before the crash still settle their deliveries (before the deadline)...
    assert time.monotonic() - taken_at < ack_timeout, "the restart took longer than the ack timeout"
    assert qs.ack(tenant, "jobs", receipts=[d.receipt for d in flying[:10]]) == 10
    # ...and acked messages never come back.
    assert qs.ack(tenant, "jobs", ids=acked) == 0
    got = qs.get(tenant, "jobs", max_messages=1000)
    assert [d.id for d in got] == ready_ids and {d.delivery_count for d in got} == {1}
    assert qs.ack(tenant, "jobs", receipts=[d.receipt for d in got]) == 40

    # The other in-flight ones come back once their ack timeout runs out.
    back = []
    deadline = time.monotonic() + ack_timeout + 10
    while len(back) < 10:
        assert time.monotonic() < deadline, f"only {len(back)} of 10 came back"
        back += qs.get(tenant, "jobs", max_messages=1000, wait_ms=2000)
    assert time.monotonic() - taken_at >= ack_timeout - 0.05
    assert sorted(d.id for d in back) == flying_ids[10:]
    assert {d.delivery_count for d in back} == {2}
    assert qs.ack(tenant, "jobs", receipts=[d.receipt for d in back]) == 10
    assert counts(qs, tenant, "jobs") == (0, 0, 0)
    assert stored_docs(node.client, tenant) == set()
    assert audit_tenant(node.client, tenant) == []


# -- a crash between any two calls -------------------------------------------------------------


class Model:
    """What the queue must hold: id -> [tag, delivery count, failures]; tag q (ready or scheduled), f, d."""

    def __init__(self, max_redeliveries: int) -> None:
        self.max_redeliveries = max_redeliveries
        self.msgs: dict[str, list] = {}
        self.receipts: dict[str, str] = {}  # in-flight id -> its current receipt
        self.stale: list[str] = []  # receipts of earlier deliveries
        self.seen: set[str] = set()

    def ids(self, tag: str) -> list[str]:
        return [i for i, (t, _, _) in self.msgs.items() if t == tag]

    def counts(self) -> tuple[int, int, int]:
        return len(self.ids("q")), len(self.ids("f")), len(self.ids("d"))

    def gone(self, i: str) -> None:
        del self.msgs[i]
        self.receipts.pop(i, None)


def stored_model(qs: QueueServer, tenant: str, queue: str) -> dict[str, tuple[str, int, int]]:
    """The queue's messages as the model sees them, read through browse and dead_letters."""
    tag = {MessageState.READY: "q", MessageState.SCHEDULED: "q", MessageState.IN_FLIGHT: "f"}
    out = {m.id: (tag[m.state], m.delivery_count, m.failed_deliveries) for m in browse_all(qs, tenant, queue, 50)}
    for m in dead_all(qs, tenant, queue, 50):
        assert m.id not in out
        out[m.id] = ("d", m.delivery_count, m.failed_deliveries)
    return out


@pytest.mark.slow
def test_a_crash_between_any_two_calls_leaves_counts_exact(node, tenant) -> None:
    """A seeded random run of every kind of call, killed with -9 after every 7th call, matches a model.

    Redeliveries are due at once (a zero delay), so a get delivers every
    message the model has as queued, up to its max: the run is reproducible.
    Nacked messages stay scheduled until the next call sweeps them; depth
    counts them either way.
    """
    q = "jobs"
    rng = random.Random(51)  # a seed whose run has every kind of call change something
    # A long ack timeout: nothing times out by itself, so the model knows every state.
    node.settings = QueueSettings(redelivery_delays_s=(0,), dedupe_window_s=60)
    node.qs = QueueServer(node.client, node.settings)
    node.qs.put_queue(tenant, q, P2P, max_redeliveries=1, ack_timeout_s=60)
    model = Model(max_redeliveries=1)
    number = iter(range(10**9))

    def some(values: list[str]) -> list[str]:
        return rng.sample(values, rng.randint(1, len(values))) if values else []

    def send(qs: QueueServer) -> int:
        batch = [msg(f"m{next(number)}") for _ in range(rng.randint(1, 40))]
        ids = qs.send(tenant, q, batch)
        assert len(set(ids)) == len(ids) and not model.seen & set(ids)
        model.seen |= set(ids)
        for i in ids:
            model.msgs[i] = ["q", 0, 0]
        return len(ids)

    def get(qs: QueueServer) -> int:
        want = rng.randint(1, 30)
        got = qs.get(tenant, q, max_messages=want)
        assert len(got) == min(want, len(model.ids("q")))
        for d in got:
            tag, dc, fails = model.msgs[d.id]
            assert tag == "q" and d.delivery_count == dc + 1
            model.msgs[d.id] = ["f", dc + 1, fails]
            if d.id in model.receipts:
                model.stale.append(model.receipts[d.id])
            model.receipts[d.id] = d.receipt
        return len(got)

    def ack(qs: QueueServer) -> int:
        chosen = some(model.ids("f"))
        if rng.random() < 0.5:
            done = qs.ack(tenant, q, receipts=[model.receipts[i] for i in chosen] + model.stale[-3:])
        else:
            done = qs.ack(tenant, q, ids=chosen + model.ids("q")[:2] + model.ids("d")[:2])
        assert done == len(chosen)
        for i in chosen:
            model.gone(i)
        return done

    def nack(qs: QueueServer) -> int:
        chosen = some(model.ids("f"))
        result = qs.nack(tenant, q, ids=chosen + model.ids("d")[:2], reason="model says no")
        dead = 0
        for i in chosen:
            _, dc, fails = model.msgs[i]
            fails += 1
            dead += fails > model.max_redeliveries
            model.msgs[i] = ["d" if fails > model.max_redeliveries else "q", dc, fails]
        assert (result.requeued, result.dead_lettered) == (len(chosen) - dead, dead)
        return len(chosen)

    def extend(qs: QueueServer) -> int:
        chosen = some(model.ids("f"))
        assert qs.extend(tenant, q, receipts=[model.receipts[i] for i in chosen], seconds=60) == len(chosen)
        return len(chosen)

    def resend(qs: QueueServer) -> int:
        if rng.random() < 0.3:
            chosen = model.ids("d")
            assert qs.resend_dead_letters(tenant, q, all=True) == len(chosen)
        else:
            chosen = some(model.ids("d"))
            assert qs.resend_dead_letters(tenant, q, ids=chosen + model.ids("f")[:2]) == len(chosen)
        for i in chosen:
            model.msgs[i][0], model.msgs[i][2] = "q", 0
        return len(chosen)

    def delete(qs: QueueServer) -> int:
        chosen = some(list(model.msgs))[:15]
        queued = [i for i in chosen if model.msgs[i][0] != "d"]
        assert qs.delete_messages(tenant, q, ids=chosen + ["1-000000000000"]) == len(queued)
        for i in queued:
            model.gone(i)
        return len(queued)

    def delete_dead(qs: QueueServer) -> int:
        chosen = some(model.ids("d"))
        assert qs.delete_dead_letters(tenant, q, ids=chosen + model.ids("q")[:2]) == len(chosen)
        for i in chosen:
            model.gone(i)
        return len(chosen)

    def sweep(qs: QueueServer) -> int:
        qs.sweep(tenant)  # moves due redeliveries to ready: depth counts both, the model does not change
        return 1

    ops = {send: 4, get: 5, ack: 2, nack: 4, extend: 1, resend: 2, delete: 1, delete_dead: 1, sweep: 1}

    def possible(op: Callable[[QueueServer], int]) -> bool:
        q_, f_, d_ = model.counts()
        return {get: q_, ack: f_, nack: f_, extend: f_, resend: d_, delete_dead: d_, delete: q_ + f_ + d_}.get(op, 1) > 0

    effective, crashes = set(), 0
    for step in range(1, 29):
        choices = [op for op in ops if possible(op)]
        op = rng.choices(choices, [ops[c] for c in choices])[0]
        if op(node.qs):
            effective.add(op.__name__)
        assert counts(node.qs, tenant, q) == model.counts(), f"after {op.__name__} (step {step})"
        if step % 7 == 0:
            node.wait_for_fsync()
            node.crash_and_restart()
            crashes += 1
            assert counts(node.qs, tenant, q) == model.counts(), f"after the crash at step {step}"
            assert stored_model(node.qs, tenant, q) == {i: tuple(v) for i, v in model.msgs.items()}
            assert audit_tenant(node.client, tenant) == []
    assert crashes == 4
    assert effective == {op.__name__ for op in ops}, "every kind of call changed something"
    assert all(model.counts()), f"the run ends with messages in every state: {model.counts()}"
    assert stored_docs(node.client, tenant) == {f"{i}.1" for i in model.msgs}


# -- an interrupted queue removal ----------------------------------------------------------------


class SimulatedCrash(Exception):
    """Raised in place of the rest of a removal, as if the process died there."""


@pytest.mark.slow
@pytest.mark.parametrize("reuse_name", [False, True])
def test_an_interrupted_queue_deletion_resumes(node, tenant, reuse_name, monkeypatch) -> None:
    """A removal killed after its atomic step and one chunk is finished by the next server,
    and a queue created under the same name meanwhile is untouched by it."""
    qs = node.qs
    qs.put_queue(tenant, "big", P2P, max_redeliveries=0, ack_timeout_s=60)
    qs.put_queue(tenant, "keep", P2P)
    for b in range(3):
        qs.send(tenant, "big", [msg(f"m{b}.{i}") for i in range(500)])
    keep_ids = qs.send(tenant, "keep", [msg("k1"), msg("k2"), msg("k3")])
    for d in qs.get(tenant, "big", max_messages=100):
        assert qs.nack(tenant, "big", receipts=[d.receipt]).dead_lettered == 1
    assert len(qs.get(tenant, "big", max_messages=50)) == 50
    assert counts(qs, tenant, "big") == (1350, 50, 100)

    # delete_queue as the library runs it, up to a crash after one chunk of the drop.
    chunks: list[int] = []

    def one_chunk_then_crash(tk, base, d, action, mode, bound="", budget=None):
        count, _ = qs.storage.run("manage", base + d.as_list() + [tk.usage, manage_record(tk)],
                                  [action, mode, bound, qs.settings.chunk_size, 60_000])
        chunks.append(int(count))
        raise SimulatedCrash()

    monkeypatch.setattr(qs._shared, "drain", one_chunk_then_crash)
    with pytest.raises(SimulatedCrash):
        qs.delete_queue(tenant, "big")
    assert chunks == [qs.settings.chunk_size]
    node.wait_for_fsync()
    node.crash_and_restart()
    qs = node.qs

    tk = k.TenantKeys(tenant)
    assert not node.client.keys(f"aq:{{{tenant}}}:q:big:*"), "the name was freed in the atomic step"
    assert node.client.keys(f"aq:{{{tenant}}}:gone:*"), "the crash left part of the removal behind"
    assert len(node.client.smembers(tk.deleting)) == 1
    with pytest.raises(NotFound):
        qs.get_queue(tenant, "big")
    with pytest.raises(NotFound):
        qs.send(tenant, "big", [msg("x")])
    assert [i.name for i in qs.list_queues(tenant)] == ["keep"]

    new_ids: list[str] = []
    if reuse_name:
        info, created = qs.put_queue(tenant, "big", P2P)
        assert created and (info.depth, info.in_flight, info.dead_letters) == (0, 0, 0)
        assert qs.browse(tenant, "big").items == [] and qs.dead_letters(tenant, "big").items == []
        new_ids = qs.send(tenant, "big", [msg("new life")])
    assert qs.resume_removals(tenant) == 1
    assert not node.client.keys(f"aq:{{{tenant}}}:gone:*")
    assert node.client.smembers(tk.deleting) == set()
    if reuse_name:
        assert [m.id for m in browse_all(qs, tenant, "big")] == new_ids, "the removal left the new queue alone"
    else:
        assert not node.client.keys(f"aq:{{{tenant}}}:q:big:*")
    assert stored_docs(node.client, tenant) == {f"{i}.1" for i in keep_ids + new_ids}
    assert node.client.hlen(tk.doc_refs) == 0 and node.client.hlen(tk.doc_props) == 0
    assert counts(qs, tenant, "keep") == (3, 0, 0)
    assert qs.resume_removals(tenant) == 0
    assert audit_tenant(node.client, tenant) == []


# -- the format version ------------------------------------------------------------------------------


def test_the_format_version_is_recorded_and_a_newer_one_is_refused(tmp_path) -> None:
    server = EmbeddedValkey(tmp_path / "data")
    server.start()
    client = server.client()
    try:
        assert client.get(k.FORMAT_VERSION_KEY) is None, "a fresh server"
        QueueServer(client)
        assert FORMAT_VERSION == 9
        assert client.get("aq:format") == b"9"
        QueueServer(client)
        assert client.get("aq:format") == b"9", "a second start keeps it"

        client.set("aq:format", 99)
        with pytest.raises(FormatVersionError) as err:
            QueueServer(client)
        assert err.value.code == "format_version"
        assert err.value.details == {"stored": 99, "supported": 9}
        assert client.get("aq:format") == b"99", "a refused start writes nothing over it"
    finally:
        client.close()
        server.stop()


def test_data_of_format_1_gets_its_usage_recounted_and_its_due_indexes_built(valkey, tenant) -> None:
    """Format 1 counted usage without the bookkeeping and had no due indexes: the first
    newer node migrates it, and the maintenance round then finds what is due."""
    client = valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "old", "point_to_point", ack_timeout_s=0.2)
    qs.send(tenant, "old", [msg("a"), msg("b")])
    (taken, _) = qs.get(tenant, "old", max_messages=2)
    tk = k.TenantKeys(tenant)
    client.delete(tk.due, tk.oldest)  # as format 1 kept them: not at all
    client.hset(tk.usage, "bytes", 20)  # and its usage: the documents and envelopes only
    client.set(k.FORMAT_VERSION_KEY, 1)
    try:
        migrated = QueueServer(client, FAST)
        assert client.get(k.FORMAT_VERSION_KEY) == str(FORMAT_VERSION).encode()
        assert audit_tenant(client, tenant) == [], "usage recounted"
        assert client.zscore(tk.due, "old") is not None and client.zscore(tk.oldest, "old") is not None
        wait_until(lambda: migrated.maintain(tenant)["moved"] > 0, 5, "the in-flight messages' time-out")
        assert migrated.get_queue(tenant, "old").in_flight == 0, "the round found them through the index"
        assert taken.id in [m.id for m in migrated.browse(tenant, "old").items]
    finally:
        client.set(k.FORMAT_VERSION_KEY, FORMAT_VERSION)


def test_data_of_format_3_gets_each_destinations_held_bytes_counted(valkey, tenant) -> None:
    """Format 3 kept no count of a destination's bytes: the migration counts them, so a
    max_bytes set after the upgrade holds the messages sent before it."""
    client = valkey.client()
    qs = QueueServer(client, FAST)
    qs.put_queue(tenant, "old", "publish_subscribe")
    qs.put_subscriber(tenant, "old", "s1")
    qs.put_subscriber(tenant, "old", "s2")
    qs.send(tenant, "old", [msg("a" * 100), msg("b" * 50)])
    qs.get(tenant, "old", subscriber="s1", max_messages=1)
    qs.nack(tenant, "old", [qs.get(tenant, "old", subscriber="s2", max_messages=1)[0].id], subscriber="s2")
    held = {s: qs.get_queue(tenant, "old").subscribers[s].held_bytes for s in ("s1", "s2")}
    assert held["s1"] == held["s2"] > 150
    tk = k.TenantKeys(tenant)
    for s in ("s1", "s2"):
        client.delete(tk.queue("old").destination(s).held)  # as format 3 kept them: not at all
    client.set(k.FORMAT_VERSION_KEY, 3)
    try:
        migrated = QueueServer(client, FAST)
        assert {s: migrated.get_queue(tenant, "old").subscribers[s].held_bytes for s in ("s1", "s2")} == held
        assert audit_tenant(client, tenant) == []
    finally:
        client.set(k.FORMAT_VERSION_KEY, FORMAT_VERSION)


def test_one_node_migrates_while_the_others_wait_and_audit_never_migrates(valkey) -> None:
    import threading

    client = valkey.client()
    client.set(k.FORMAT_VERSION_KEY, 1)
    client.set(k.FORMAT_MIGRATION_KEY, "another-node:1", ex=60)
    try:
        with pytest.raises(FormatVersionError) as err:
            QueueServer(client, FAST, migrate=False)
        assert err.value.details == {"stored": 1, "supported": FORMAT_VERSION}
        started: list[QueueServer] = []
        waiting = threading.Thread(target=lambda: started.append(QueueServer(client, FAST)), daemon=True)
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and not started, "it waits while another node migrates"
        client.set(k.FORMAT_VERSION_KEY, FORMAT_VERSION)  # the other node is done
        waiting.join(timeout=5)
        assert started, "it starts once the data is in its format"
        assert client.get(k.FORMAT_MIGRATION_KEY) == b"another-node:1", "it took nothing over"
    finally:
        client.delete(k.FORMAT_MIGRATION_KEY)
        client.set(k.FORMAT_VERSION_KEY, FORMAT_VERSION)
        client.close()
