"""Gets, browse pages and settles in parts: a get of up to 1,000 messages, a page of up to 1,000 and
a settle of up to 10,000 ids each run as several script calls, each within its part's bounds
(``defaults.GET_PART_MESSAGES``, ``GET_PART_DOCUMENTS``, ``GET_PART_BYTES``, ``SETTLE_PART_IDS``),
so that one tenant's largest request does not hold the store's single thread for long. The request
as a whole keeps its promises: exact counts, the order, one message out per group, a repeat of a
part by the store's client delivering nothing twice, nothing lost when the caller dies between
parts.

Runs on the real Valkey, the cluster and fakeredis (the ``qs`` fixture).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from atomq import defaults
from atomq.errors import StorageError
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from support.queues import browse_all, counts, msg
from support.waiting import wait_until

P2P = "point_to_point"
PART = defaults.GET_PART_MESSAGES


def ten_documents(n: int) -> list[OutgoingMessage]:
    """``n`` messages of ten documents of 900 bytes: the size a send's bound allows 1,000 of."""
    return [OutgoingMessage(documents=tuple(OutgoingDocument(b"%04d" % i + b"x" * 896) for _ in range(10)))
            for i in range(n)]


def sent(qs: QueueServer, tenant: str, queue: str, messages: list[OutgoingMessage]) -> list[str]:
    """The ids of ``messages``, sent in sends of at most 1,000."""
    return [i for first in range(0, len(messages), 1000) for i in qs.send(tenant, queue, messages[first:first + 1000])]


class Calls:
    """Every script call a queue server makes, by name, with its reply; ``also`` runs before each."""

    def __init__(self, qs: QueueServer, monkeypatch: pytest.MonkeyPatch,
                 also: Callable[[str, int], None] | None = None) -> None:
        self.replies: list[tuple[str, Any]] = []
        run = qs.storage.run

        def recorded(name: str, keys: Any, args: Any, errors: Any = None, **kwargs: Any) -> Any:
            if also is not None:
                also(name, sum(1 for n, _ in self.replies if n == name))
            reply = run(name, keys, args, errors, **kwargs)
            self.replies.append((name, reply))
            return reply
        monkeypatch.setattr(qs.storage, "run", recorded)

    def of(self, name: str) -> list[Any]:
        return [reply for n, reply in self.replies if n == name]


def test_a_get_of_1000_messages_of_ten_documents_runs_in_parts_and_answers_them_all_in_order(
        qs: QueueServer, tenant: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = qs.send(tenant, queue, ten_documents(1000))
    calls = Calls(qs, monkeypatch)
    got = qs.get(tenant, queue, max_messages=1000)
    assert [d.id for d in got] == ids and all(d.delivery_count == 1 for d in got)
    assert all(len(d.documents) == 10 for d in got)
    parts = calls.of("get")
    # 1,000 documents a part: ten parts of 100 messages, each under 1 MiB of documents.
    assert [int(p[0]) for p in parts] == [100] * 10
    assert all(int(p[6]) <= defaults.GET_PART_BYTES for p in parts)
    assert counts(qs, tenant, queue) == (0, 1000, 0)


def test_a_get_takes_no_more_than_asked_and_stops_at_the_part_that_finds_fewer(
        qs: QueueServer, tenant: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = sent(qs, tenant, queue, [msg(f"m{i}") for i in range(700)])
    calls = Calls(qs, monkeypatch)
    got = qs.get(tenant, queue, max_messages=600)
    assert [d.id for d in got] == ids[:600]
    assert [int(p[0]) for p in calls.of("get")] == [PART, PART, 100], "the last part asks only what is left"
    rest = qs.get(tenant, queue, max_messages=1000)
    assert [d.id for d in rest] == ids[600:]
    assert [int(p[0]) for p in calls.of("get")][3:] == [100], "one part found fewer than it could take: no more"
    assert counts(qs, tenant, queue) == (0, 700, 0)


def test_each_part_repeated_by_the_stores_client_delivers_nothing_twice(
        qs: QueueServer, tenant: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's client sends a call again when its answer is lost: each part has its record,
    so its repeat answers the deliveries that part made and takes no second batch."""
    ids = sent(qs, tenant, queue, [msg(f"m{i}") for i in range(1200)])
    run = qs.storage.run
    first_answers: list[list[Any]] = []

    def twice(name: str, keys: Any, args: Any, errors: Any = None, **kwargs: Any) -> Any:
        reply = run(name, keys, args, errors, **kwargs)
        if name != "get":
            return reply
        first_answers.append(reply)
        return run(name, keys, args, errors, **kwargs)
    monkeypatch.setattr(qs.storage, "run", twice)
    got = qs.get(tenant, queue, max_messages=1000)
    assert [d.id for d in got] == ids[:1000] and all(d.delivery_count == 1 for d in got)
    assert [int(a[0]) for a in first_answers] == [PART] * 4
    assert counts(qs, tenant, queue) == (200, 1000, 0)
    monkeypatch.undo()
    assert [d.id for d in qs.get(tenant, queue, max_messages=1000)] == ids[1000:]


class Crash(BaseException):
    """The caller's process dying between two parts: nothing of atomq's handles it."""


def test_a_caller_that_dies_between_parts_loses_nothing(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    qs.put_queue(tenant, "work", P2P, ack_timeout_s=0.2)
    ids = sent(qs, tenant, "work", [msg(f"m{i}") for i in range(1000)])

    def die_at_third(name: str, done: int) -> None:
        if name == "get" and done == 2:
            raise Crash()
    Calls(qs, monkeypatch, die_at_third)
    with pytest.raises(Crash):
        qs.get(tenant, "work", max_messages=1000)
    assert counts(qs, tenant, "work") == (2 * PART, 2 * PART, 0), "two parts were taken, in flight"
    monkeypatch.undo()
    # The deliveries made keep their deadline; those made from now on have a minute, however slow the machine.
    qs.put_queue(tenant, "work", P2P, ack_timeout_s=60)
    seen: list[Any] = []

    def collected() -> bool:
        got = qs.get(tenant, "work", max_messages=1000)
        seen.extend(got)
        if got:
            qs.ack(tenant, "work", receipts=[d.receipt for d in got])
        return len(seen) >= 1000
    wait_until(collected, 10, "the messages of the parts taken to come back at their deadline")
    assert sorted(d.id for d in seen) == ids, "each message once"
    by_id = {d.id: d.delivery_count for d in seen}
    assert Counter(by_id[i] for i in ids[:2 * PART]) == {2: 2 * PART}, "the taken ones count their delivery"
    assert Counter(by_id[i] for i in ids[2 * PART:]) == {1: 1000 - 2 * PART}
    assert counts(qs, tenant, "work") == (0, 0, 0)


def test_a_part_that_fails_ends_the_get_with_what_the_parts_before_it_took(
        qs: QueueServer, tenant: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = sent(qs, tenant, queue, [msg(f"m{i}") for i in range(600)])

    def fail_second(name: str, done: int) -> None:
        if name == "get" and done == 1:
            raise StorageError("the store went away")
    Calls(qs, monkeypatch, fail_second)
    got = qs.get(tenant, queue, max_messages=600)
    assert [d.id for d in got] == ids[:PART], "the caller holds what it was given, nothing else is out"
    assert counts(qs, tenant, queue) == (600 - PART, PART, 0)


def test_a_get_in_parts_keeps_one_message_out_per_group(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "g", P2P, ordering="group")
    ids = qs.send(tenant, "g", [dataclasses.replace(msg(f"m{i}"), group=f"g{i % 400}") for i in range(800)])
    got = qs.get(tenant, "g", max_messages=1000)
    assert [d.id for d in got] == ids[:400], "each group's head, in send order, across the parts"
    assert qs.get(tenant, "g", max_messages=1000) == []


def test_an_exclusive_queues_get_in_parts_is_its_active_consumers_in_send_order(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "ex", P2P, access="exclusive")
    ids = sent(qs, tenant, "ex", [dataclasses.replace(msg(f"m{i}"), priority=i % 10) for i in range(600)])
    taken = qs.take(tenant, "ex", 1000, consumer="a")
    assert taken.active and [d.id for d in taken.deliveries] == ids, "send order whatever the priorities"
    standby = qs.take(tenant, "ex", 1000, consumer="b")
    assert standby.active is False and standby.deliveries == []


def test_a_get_in_parts_stays_within_the_reply_bound(qs: QueueServer, tenant: str, queue: str) -> None:
    """Later parts bring no message the whole reply has no room for, however big."""
    small = QueueServer(qs.client, dataclasses.replace(qs.settings, max_reply_bytes=3_000_000))
    big = b"b" * 900_000
    ids = small.send(tenant, queue, [msg(big), msg(big), msg(big), msg(big, big)])
    first = small.get(tenant, queue, max_messages=10)
    assert [d.id for d in first] == ids[:3], "one message a part (1 MiB each), until the fourth's 1.8 MB no longer fit"
    assert [d.id for d in small.get(tenant, queue, max_messages=10)] == ids[3:]


def test_acks_and_nacks_of_1000_run_in_parts_and_settle_exactly_those(
        qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = qs.put_queue(tenant, "retried", P2P, max_redeliveries=3)[0].name
    ids = sent(qs, tenant, queue, [msg(f"m{i}") for i in range(1500)])
    got = qs.get(tenant, queue, max_messages=1000)
    calls = Calls(qs, monkeypatch)
    receipts = [d.receipt for d in got]
    # 300 receipts of a message not in flight, and the first again: they settle nothing.
    assert qs.ack(tenant, queue, receipts=receipts[:700] + [f"{ids[1400]}~1"] * 300 + [receipts[0]]) == 700
    assert [list(map(int, r)) for r in calls.of("settle")] == [[250, 0], [250, 0], [200, 0], [0, 0], [0, 0]]
    assert qs.nack(tenant, queue, ids=[d.id for d in got], reason="bad").requeued == 300
    assert counts(qs, tenant, queue) == (800, 0, 0)
    seen: list[Any] = []

    def collected() -> bool:
        seen.extend(qs.get(tenant, queue, max_messages=1000))
        return len(seen) >= 800
    wait_until(collected, 10, "the nacked messages to be redelivered")
    assert sorted(d.id for d in seen) == ids[700:], "each once: the acked ones never again"
    assert Counter(d.delivery_count for d in seen if d.id in set(ids[700:1000])) == {2: 300}
    assert Counter(d.delivery_count for d in seen if d.id in set(ids[1000:])) == {1: 500}


def test_a_get_with_acks_of_1000_acks_them_all_in_parts(
        qs: QueueServer, tenant: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = sent(qs, tenant, queue, [msg(f"m{i}") for i in range(2000)])
    got = qs.get(tenant, queue, max_messages=1000)
    calls = Calls(qs, monkeypatch)
    taken = qs.take(tenant, queue, 1000, ack_receipts=[d.receipt for d in got])
    assert taken.acked == 1000 and [d.id for d in taken.deliveries] == ids[1000:]
    # The first 750 alone, in parts of 250, the last 250 in one round trip with the get's first part.
    assert [int(r[0]) for r in calls.of("settle")] == [250, 250, 250]
    assert counts(qs, tenant, queue) == (0, 1000, 0)


def test_a_browse_page_of_1000_runs_in_parts_from_where_each_ended(
        qs: QueueServer, tenant: str, queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = qs.send(tenant, queue, ten_documents(1000)) + qs.send(tenant, queue, ten_documents(500))
    calls = Calls(qs, monkeypatch)
    page = qs.browse(tenant, queue, limit=1000)
    assert [m.id for m in page.items] == ids[:1000] and page.next == ids[999]
    assert [int(r[1]) for r in calls.of("browse")] == [100] * 10
    assert [m.id for m in browse_all(qs, tenant, queue, limit=1000)] == ids
    assert [m.id for m in qs.peek(tenant, queue, ids[200:1200])] == ids[200:1200]
