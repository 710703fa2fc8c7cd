"""Finding deliveries by state, and who holds each one in flight since when: on the real Valkey,
the cluster and fakeredis.

An operator looks for a message stuck with a consumer that is gone: browse by state pages
through exactly the messages of that state, and a delivery in flight names its holder, when it
was made and when its ack is due, so the release needs nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from atomq.errors import InvalidInput, NotFound
from atomq.platform import MessageState, QueueServer
from atomq.platform.store import keys as k
from support.queues import msg

P2P = "point_to_point"


def by_state(qs: QueueServer, tenant: str, queue: str, state: str, limit: int) -> tuple[list, list[int]]:
    """Every message of ``state``, page by page, and the size of each page."""
    items, sizes, cursor = [], [], None
    while True:
        page = qs.browse(tenant, queue, limit=limit, after=cursor, state=state)
        items += page.items
        sizes.append(len(page.items))
        if page.next is None:
            return items, sizes
        cursor = page.next


def store_seconds(client: redis.Redis) -> Callable[[], float]:
    """The store's clock in whole ms, as the scripts stamp deliveries with it."""
    def now() -> float:
        seconds, micros = client.time()
        return (int(seconds) * 1000 + int(micros) // 1000) / 1000
    return now


@pytest.fixture
def queue(qs: QueueServer, tenant: str) -> str:
    qs.put_queue(tenant, "orders", P2P, ack_timeout_s=30)
    return "orders"


def mixed(qs: QueueServer, tenant: str, queue: str, n: int) -> dict[str, list[str]]:
    """``n`` messages, interleaved: every third in flight, scheduled (released for a minute) and ready
    (released at once: ready without a sweep); the ids of each state in send order."""
    ids = qs.send(tenant, queue, [msg(f"m{i}") for i in range(n)])
    assert len(qs.get(tenant, queue, max_messages=n)) == n
    qs.release(tenant, queue, ids=ids[1::3], delay_s=60)
    qs.release(tenant, queue, ids=ids[2::3], delay_s=0)
    assert qs.sweep(tenant) == 0
    return {"in_flight": ids[0::3], "scheduled": ids[1::3], "ready": ids[2::3]}


@pytest.mark.parametrize("state", ["ready", "in_flight", "scheduled"])
def test_a_browse_by_state_pages_through_exactly_that_states_messages(qs, tenant, queue, state) -> None:
    expected = mixed(qs, tenant, queue, 20)[state]
    listed, sizes = by_state(qs, tenant, queue, state, limit=2)
    assert [m.id for m in listed] == expected, "that state's messages only, in send order, each once"
    assert {m.state for m in listed} == {MessageState(state)}
    assert sizes[:-1] == [2] * (len(sizes) - 1) and 1 <= sizes[-1] <= 2, "full pages: filtered before the limit"


def test_a_browse_by_state_is_exact_when_many_messages_are_in_flight(qs, tenant, queue) -> None:
    """Past the number a page may read from the in-flight set (10 pages and 100), the scan of
    every message finds them."""
    expected = mixed(qs, tenant, queue, 420)
    for state in ("in_flight", "ready"):
        listed, sizes = by_state(qs, tenant, queue, state, limit=3)
        assert [m.id for m in listed] == expected[state], state
        assert set(sizes[:-1]) == {3}, state


def test_a_browse_by_an_unknown_state_says_which_there_are(qs, tenant, queue) -> None:
    for state in ("dead", "flying", ""):
        with pytest.raises(InvalidInput, match="ready, in_flight, scheduled") as err:
            qs.browse(tenant, queue, state=state)
        assert err.value.details == {"field": "state"}


def test_a_delivery_in_flight_names_its_consumer_or_its_caller_and_since_when(qs, tenant, queue, backend) -> None:
    now = store_seconds(backend)
    ids = qs.send(tenant, queue, [msg("a"), msg("b"), msg("c")])
    before = now()
    qs.get(tenant, queue, max_messages=1, consumer="worker-1", holder="key:ignored")
    qs.get(tenant, queue, max_messages=1, holder="key:0123456789ab0123456789abcd")
    qs.get(tenant, queue, max_messages=1)
    after = now()
    listed = qs.in_flight(tenant, queue)
    assert sorted((d.id, d.holder) for d in listed) == [
        (ids[0], "worker-1"), (ids[1], "key:0123456789ab0123456789abcd"), (ids[2], None)]
    assert all(before <= d.delivered_at <= after <= d.deadline for d in listed)
    browsed = qs.browse(tenant, queue, state="in_flight").items
    assert [(m.id, m.holder, m.delivered_at, m.deadline) for m in browsed] == [
        (d.id, d.holder, d.delivered_at, d.deadline) for d in sorted(listed, key=lambda d: d.id)]
    with pytest.raises(InvalidInput):
        qs.get(tenant, queue, holder="key|broken")


def test_an_extension_keeps_since_and_a_settle_ends_the_listing(qs, tenant, queue) -> None:
    ids = qs.send(tenant, queue, [msg("a"), msg("b"), msg("c")])
    qs.get(tenant, queue, max_messages=3, consumer="gone")
    (first, *_) = qs.in_flight(tenant, queue)
    assert qs.extend(tenant, queue, ids=[first.id], seconds=600) == 1
    moved = {d.id: d for d in qs.in_flight(tenant, queue)}[first.id]
    assert moved.delivered_at == first.delivered_at, "an extension is not a new delivery"
    assert moved.deadline > first.deadline and moved.holder == "gone"
    assert qs.release(tenant, queue, ids=[ids[0]], delay_s=0) == 1
    assert qs.ack(tenant, queue, ids=[ids[1]]) == 1
    assert [d.id for d in qs.in_flight(tenant, queue)] == [ids[2]]
    assert [m.id for m in qs.browse(tenant, queue, state="in_flight").items] == [ids[2]]
    (again,) = qs.get(tenant, queue)
    assert (again.id, again.redelivered) == (ids[0], True)
    (held,) = [d for d in qs.in_flight(tenant, queue) if d.id == ids[0]]
    assert held.holder is None and held.delivered_at >= first.delivered_at, "the new delivery's own"


def test_a_delivery_made_before_holders_were_kept_is_listed_and_settles(qs, tenant, queue, backend) -> None:
    """Format 6 kept an in-flight state as a bare ``f``: such a delivery is listed without holder
    or time, and acks, extends and releases as any other."""
    ids = qs.send(tenant, queue, [msg("a"), msg("b")])
    qs.get(tenant, queue, max_messages=2, consumer="new")
    state = k.QueueKeys(k.TenantKeys(tenant), queue).destination().state
    for msg_id in ids:
        backend.hset(state, msg_id, "1|0|f")
    assert sorted((d.id, d.holder, d.delivered_at) for d in qs.in_flight(tenant, queue)) == [
        (ids[0], None, None), (ids[1], None, None)]
    browsed = qs.browse(tenant, queue, state="in_flight").items
    assert [(m.id, m.holder, m.delivered_at) for m in browsed] == [(ids[0], None, None), (ids[1], None, None)]
    assert all(m.deadline is not None for m in browsed)
    assert qs.extend(tenant, queue, ids=[ids[0]], seconds=60) == 1
    assert qs.ack(tenant, queue, ids=[ids[0]]) == 1
    assert qs.release(tenant, queue, ids=[ids[1]], delay_s=0) == 1
    assert qs.in_flight(tenant, queue) == []


def test_a_tenant_lists_nothing_of_another(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("secret")])
    qs.get(tenant, queue, consumer="theirs")
    stranger = f"{tenant}x"
    with pytest.raises(NotFound):
        qs.in_flight(stranger, queue)
    with pytest.raises(NotFound):
        qs.browse(stranger, queue, state="in_flight")
    qs.put_queue(stranger, queue, P2P)
    assert qs.in_flight(stranger, queue) == []
    assert qs.browse(stranger, queue, state="in_flight").items == []


def test_a_released_delivery_browses_as_ready_at_once(qs: QueueServer, tenant: str, queue: str) -> None:
    """A release hands a delivery back for the next get; no sweep need run first for a browse by
    state to show it ready, nor to leave it out of the scheduled ones."""
    ids = qs.send(tenant, queue, [msg("a"), msg("b"), msg("c")])
    assert len(qs.get(tenant, queue, max_messages=2)) == 2
    assert qs.release(tenant, queue, ids=ids[:1], delay_s=0) == 1
    assert [m.id for m in by_state(qs, tenant, queue, "ready", 10)[0]] == [ids[0], ids[2]]
    assert by_state(qs, tenant, queue, "scheduled", 10)[0] == []
    assert [m.id for m in by_state(qs, tenant, queue, "in_flight", 10)[0]] == [ids[1]]
    assert [(m.id, m.state) for m in qs.browse(tenant, queue).items] == [
        (ids[0], MessageState.READY), (ids[1], MessageState.IN_FLIGHT), (ids[2], MessageState.READY)]
