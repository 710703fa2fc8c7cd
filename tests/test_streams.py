"""Streaming consumers (the Spark streaming read's protocol) at the library level."""

from __future__ import annotations

import pytest

from atomq.errors import Conflict, InvalidInput, NotFound
from atomq.platform import QueueServer
from atomq.platform.queues.streams import StreamConsumers
from support.queues import msg


@pytest.fixture
def streams(qs: QueueServer, tenant: str) -> StreamConsumers:
    qs.put_queue(tenant, "events", "point_to_point", ack_timeout_s=30)
    qs.send(tenant, "events", [msg(f"e{i}") for i in range(10)])
    return StreamConsumers(qs)


def _texts(messages: list) -> list[str]:
    return [m.documents[0].data for m in messages]


def test_a_batch_planned_twice_is_the_same_plan_and_its_partitions_read_the_same_rows(
        streams: StreamConsumers, qs: QueueServer, tenant: str) -> None:
    first = streams.plan(tenant, "events", "q1", 1, max_messages=4, partitions=2)
    again = streams.plan(tenant, "events", "q1", 1, max_messages=4, partitions=2)
    assert first is not None and again == first
    rows = [_texts(streams.read(tenant, "events", "q1", 1, p)) for p in range(2)]
    assert rows == [["e0", "e1"], ["e2", "e3"]]
    assert [_texts(streams.read(tenant, "events", "q1", 1, p)) for p in range(2)] == rows
    assert qs.get_queue(tenant, "events").in_flight == 4
    with pytest.raises(InvalidInput):
        streams.read(tenant, "events", "q1", 1, 2)  # no third partition


def test_commit_acks_the_batches_up_to_it_and_forgets_them(
        streams: StreamConsumers, qs: QueueServer, tenant: str) -> None:
    streams.plan(tenant, "events", "q1", 1, max_messages=3)
    streams.plan(tenant, "events", "q1", 2, max_messages=3)
    streams.plan(tenant, "events", "q1", 3, max_messages=3)
    assert streams.commit(tenant, "events", "q1", through=2) == 6
    info = qs.get_queue(tenant, "events")
    assert (info.depth, info.in_flight) == (1, 3)
    with pytest.raises(NotFound):
        streams.read(tenant, "events", "q1", 2, 0)
    assert streams.planned(tenant, "events", "q1", 3) is not None


def test_consumers_and_tenants_do_not_share_plans(
        streams: StreamConsumers, qs: QueueServer, tenant: str) -> None:
    mine = streams.plan(tenant, "events", "q1", 1, max_messages=2)
    other = streams.plan(tenant, "events", "q2", 1, max_messages=2)
    assert mine is not None and other is not None and set(mine.ids).isdisjoint(other.ids)
    stranger = "t_" + "f" * 12
    assert streams.planned(stranger, "events", "q1", 1) is None
    assert streams.commit(stranger, "events", "q1", through=1) == 0
    assert qs.get_queue(tenant, "events").in_flight == 4


def test_a_plan_whose_deliveries_are_no_longer_in_flight_is_planned_afresh(
        streams: StreamConsumers, qs: QueueServer, tenant: str) -> None:
    stale = streams.plan(tenant, "events", "q1", 1, max_messages=2)
    assert stale is not None
    qs.nack(tenant, "events", receipts=list(stale.receipts))  # as a time-out would: they are not in flight
    fresh = streams.plan(tenant, "events", "q1", 1, max_messages=2)
    assert fresh is not None and set(fresh.ids).isdisjoint(stale.ids)
    assert _texts(streams.read(tenant, "events", "q1", 1, 0)) == ["e2", "e3"]


def test_extend_reaches_only_the_batches_named(streams: StreamConsumers, qs: QueueServer, tenant: str) -> None:
    streams.plan(tenant, "events", "q1", 1, max_messages=2)
    streams.plan(tenant, "events", "q1", 7, max_messages=2)
    assert streams.extend(tenant, "events", "q1", [1]) == 2
    assert streams.extend(tenant, "events", "q1", [1, 7]) == 4
    assert streams.extend(tenant, "events", "q1", []) == 0


def test_a_query_opened_later_under_the_name_fences_off_the_earlier_one(
        streams: StreamConsumers, qs: QueueServer, tenant: str) -> None:
    first = streams.open(tenant, "events", "q1")
    assert streams.plan(tenant, "events", "q1", 1, max_messages=3, generation=first) is not None
    second = streams.open(tenant, "events", "q1")
    assert second == first + 1
    # The second query numbers its batches from 1 too: it takes over batch 1 as planned.
    taken_over = streams.plan(tenant, "events", "q1", 1, max_messages=3, generation=second)
    assert taken_over is not None and len(taken_over.ids) == 3
    assert streams.plan(tenant, "events", "q1", 2, max_messages=3, generation=second) is not None
    for call in (lambda: streams.commit(tenant, "events", "q1", through=2, generation=first),
                 lambda: streams.extend(tenant, "events", "q1", [1, 2], generation=first),
                 lambda: streams.plan(tenant, "events", "q1", 3, max_messages=3, generation=first)):
        with pytest.raises(Conflict) as refused:
            call()
        assert refused.value.details == {"consumer": "q1", "generation": second}
    assert qs.get_queue(tenant, "events").in_flight == 6, "the earlier query acked and took nothing"
    assert streams.commit(tenant, "events", "q1", through=2, generation=second) == 6
    assert streams.open(tenant, "events", "q1", subscriber=None) == second + 1
