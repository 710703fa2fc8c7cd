"""The sweep each part of a get or a settle makes first (expired messages, expired deliveries, due
redeliveries and delayed copies) handles at most ``defaults.SWEEP_PART`` of each kind, so that a part
of a destination with thousands due does not hold the store's single thread for long; the rest is
left to the next part, the next call or the maintenance round. Nothing is lost to the bound: every
expired message is dead-lettered, every redelivery comes back with its exact delivery count and
before what was sent after it, nothing is delivered expired, and an expired delivery is not acked.

Runs on the real Valkey, the cluster and fakeredis (the ``qs`` fixture); ``SWEEP_PART`` is set low
so that 3,000 due take many parts.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from atomq import defaults
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.shared import queue_keys
from support.queues import counts, msg
from test_read_parts import sent

P2P = "point_to_point"
N = 3000
SWEEP = 100


class Moves:
    """What each get or settle script call changed in a destination: how many left its schedule of
    redeliveries, its in-flight set, and how many arrived in its dead_letter_queue."""

    def __init__(self, qs: QueueServer, monkeypatch: pytest.MonkeyPatch, tenant: str, queue: str,
                 target: str | None = None) -> None:
        self.calls: list[dict[str, int]] = []
        d = queue_keys(tenant, queue)[1].destination()
        dead = queue_keys(tenant, target)[1].destination().all if target else None
        client, run = qs.client, qs.storage.run

        def sizes() -> dict[str, int]:
            return {"sched": client.zcard(d.sched), "inflight": client.zcard(d.inflight),
                    "dead": client.zcard(dead) if dead else 0}

        def counted(name: str, keys: Any, args: Any, errors: Any = None, **kwargs: Any) -> Any:
            if name not in ("get", "settle"):
                return run(name, keys, args, errors, **kwargs)
            before = sizes()
            reply = run(name, keys, args, errors, **kwargs)
            after = sizes()
            self.calls.append({"script": name, "due": before["sched"] - after["sched"],
                               "timed_out": before["inflight"] - after["inflight"],
                               "dead": after["dead"] - before["dead"]})
            return reply
        monkeypatch.setattr(qs.storage, "run", counted)

    def most(self, script: str, what: str) -> int:
        return max(c[what] for c in self.calls if c["script"] == script)


def expiring(n: int) -> list[OutgoingMessage]:
    return [OutgoingMessage(documents=(OutgoingDocument(b"x%d" % i),), ttl_s=0.2) for i in range(n)]


def test_gets_sweep_thousands_due_in_bounded_parts_redeliveries_first_nothing_expired(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "SWEEP_PART", SWEEP)
    qs.put_queue(tenant, "expired", P2P)
    qs.put_queue(tenant, "work", P2P, max_redeliveries=5, dead_letter_queue="expired")
    again = sent(qs, tenant, "work", [msg(f"r{i}") for i in range(N)])
    taken = [d for _ in range(N // 1000) for d in qs.get(tenant, "work", max_messages=1000)]
    assert [d.id for d in taken] == again
    assert qs.nack(tenant, "work", receipts=[d.receipt for d in taken]).requeued == N  # due in 50 ms
    gone = sent(qs, tenant, "work", expiring(N))
    fresh = sent(qs, tenant, "work", [msg(f"f{i}") for i in range(10)])
    time.sleep(0.25)  # the expiring messages' time to live ends (on the store's clock, as the gets')
    moves = Moves(qs, monkeypatch, tenant, "work", target="expired")
    got = []
    while batch := qs.get(tenant, "work", max_messages=1000, wait_ms=0):
        got += batch
    # Every redelivery before what was sent after it, once, with its count; nothing expired.
    assert [d.id for d in got] == again + fresh
    assert [d.delivery_count for d in got] == [2] * N + [1] * 10
    # Each part's sweep within its bound: a part expires at most SWEEP in its sweep and at most
    # the candidates it takes (GET_PART_MESSAGES) itself; it moves at most SWEEP redeliveries.
    assert moves.most("get", "due") <= SWEEP
    assert moves.most("get", "dead") <= SWEEP + defaults.GET_PART_MESSAGES
    # Every expired message went to the dead_letter_queue, once.
    moved = [d for _ in range(N // 1000) for d in qs.get(tenant, "expired", max_messages=1000)]
    assert sorted(d.id for d in moved) == sorted(gone)
    assert counts(qs, tenant, "work") == (0, N + 10, 0)


def test_a_settle_part_fails_what_its_sweep_left_of_its_own_expired_deliveries(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "SWEEP_PART", SWEEP)
    qs.put_queue(tenant, "slow", P2P, max_redeliveries=5, ack_timeout_s=2)
    ids = sent(qs, tenant, "slow", [msg(f"m{i}") for i in range(N)])
    taken = [d for _ in range(N // 1000) for d in qs.get(tenant, "slow", max_messages=1000)]
    time.sleep(2.05)  # every delivery's ack deadline passes
    moves = Moves(qs, monkeypatch, tenant, "slow")
    # Past its deadline a delivery has failed, whether or not a sweep saw it: none is acked.
    assert qs.ack(tenant, "slow", receipts=[d.receipt for d in taken]) == 0
    # A part fails at most SWEEP in its sweep and at most the ids it names itself.
    assert moves.most("settle", "timed_out") <= SWEEP + defaults.SETTLE_PART_IDS
    assert sum(c["timed_out"] for c in moves.calls) == N
    got = []
    while batch := qs.get(tenant, "slow", max_messages=1000, wait_ms=2000):
        got += batch
        if len(got) == N:
            break
    assert sorted(d.id for d in got) == sorted(ids)
    assert all(d.delivery_count == 2 for d in got)


def test_what_a_bounded_sweep_leaves_the_maintenance_round_finishes(qs: QueueServer, tenant: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "SWEEP_PART", SWEEP)
    qs.put_queue(tenant, "expired", P2P)
    qs.put_queue(tenant, "work", P2P, max_redeliveries=5, dead_letter_queue="expired")
    gone = sent(qs, tenant, "work", expiring(N))
    time.sleep(0.25)
    moves = Moves(qs, monkeypatch, tenant, "work", target="expired")
    assert qs.ack(tenant, "work", ids=["0-0"]) == 0  # one settle part: its sweep expires SWEEP
    assert [c["dead"] for c in moves.calls] == [SWEEP]
    rounds = 0
    while qs.get_queue(tenant, "work").depth:
        qs.maintain(tenant)
        rounds += 1
        assert rounds < 10
    assert qs.get_queue(tenant, "expired").depth == N
    moved = [d for _ in range(N // 1000) for d in qs.get(tenant, "expired", max_messages=1000)]
    assert sorted(d.id for d in moved) == sorted(gone)


def test_an_exclusive_queues_redeliveries_past_the_sweeps_bound_come_back_in_send_order(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "SWEEP_PART", SWEEP)
    qs.put_queue(tenant, "line", P2P, access="exclusive")
    ids = sent(qs, tenant, "line", [msg(f"m{i}") for i in range(3 * SWEEP)])
    taken = qs.get(tenant, "line", max_messages=1000, consumer="c")
    assert qs.release(tenant, "line", receipts=[d.receipt for d in taken], delay_s=0.05, consumer="c") == 3 * SWEEP
    later = sent(qs, tenant, "line", [msg("later")])
    time.sleep(0.1)  # the redeliveries fall due
    got = qs.get(tenant, "line", max_messages=1000, consumer="c")
    assert [d.id for d in got] == ids + later
    assert [d.delivery_count for d in got] == [2] * (3 * SWEEP) + [1]


def test_delayed_copies_past_the_sweeps_bound_arrive_in_the_order_they_fell_due(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "SWEEP_PART", SWEEP)
    qs.put_queue(tenant, "later", P2P, delay_s=0.05)
    ids = sent(qs, tenant, "later", [msg(f"m{i}") for i in range(3 * SWEEP)])
    time.sleep(0.1)  # every copy's delay ends
    got = qs.get(tenant, "later", max_messages=1000)
    assert [d.id for d in got] == ids and all(d.delivery_count == 1 for d in got)
