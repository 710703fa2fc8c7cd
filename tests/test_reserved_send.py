"""Wide sends (``send_journal.RESERVE_DESTINATIONS``): a call to more destinations than one script
checks within its budget checks and reserves them in steps before its prepare, which reads none;
a refusal releases the steps before it, and a reservation a dead request left is released by the
maintenance, so nothing stays held and a retry stores once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from atomq.errors import QueueFull, StorageError, StorageFull
from atomq.platform import QueueServer
from atomq.platform import maintenance as maintenance_module
from atomq.platform.queues import routes, send_journal
from atomq.platform.queues.routes import Routes
from atomq.platform.store import keys as k
from atomq.platform.store import send_keys
from atomq.platform.store.storage import Storage
from support.audit import assert_audit_clean
from support.queues import msg

P2P, PUBSUB = "point_to_point", "publish_subscribe"
SUBSCRIBERS = [f"s{i}" for i in range(10)]


@pytest.fixture
def scripts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, list[str], list[Any]]]]:
    """Reservations in steps of 4 destinations, released 3 a step, copies 10 destinations a step;
    and every send script run (name, keys, arguments), in order."""
    monkeypatch.setattr(send_journal, "RESERVE_DESTINATIONS", 4)
    monkeypatch.setattr(send_journal, "RELEASE_DESTINATIONS", 3)
    monkeypatch.setattr(send_journal, "CHUNK_DESTINATIONS", 10)
    ran: list[tuple[str, list[str], list[Any]]] = []
    real_run = Storage.run

    def run(self: Storage, name: str, keys: list[str], args: list[Any], *rest: Any, **kwargs: Any) -> Any:
        if name.startswith("send"):
            ran.append((name, list(keys), list(args)))
        return real_run(self, name, keys, args, *rest, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    yield ran


def twelve_destinations(qs: QueueServer, tenant: str, **limits: Any) -> list[tuple[str, str | None]]:
    """Queues a, b (point-to-point) and s (subscribers s0 to s9) attracting x/>, ``limits`` on b."""
    qs.put_queue(tenant, "a", P2P, topics=["x/>"])
    qs.put_queue(tenant, "b", P2P, topics=["x/>", "y"], **limits)
    qs.put_queue(tenant, "s", PUBSUB, topics=["x/>"])
    for sub in SUBSCRIBERS:
        qs.put_subscriber(tenant, "s", sub)
    return [("a", None), ("b", None), *(("s", sub) for sub in SUBSCRIBERS)]


def held(qs: QueueServer, tenant: str, queue: str, subscriber: str | None = None) -> list[str]:
    return [m.id for m in qs.browse(tenant, queue, limit=1000, subscriber=subscriber).items]


def every_one_holds(qs: QueueServer, tenant: str, destinations: list[tuple[str, str | None]], ids: list[str]) -> None:
    for queue, sub in destinations:
        assert held(qs, tenant, queue, sub) == ids, f"{queue} {sub or ''} holds the messages"


def names(ran: list[tuple[str, list[str], list[Any]]]) -> list[str]:
    return [name for name, _, _ in ran]


def once_before(monkeypatch: pytest.MonkeyPatch, when: Callable[[str, list[Any]], bool],
                action: Callable[[], Any]) -> list[Any]:
    """Runs ``action`` once, before the first script run whose name and arguments ``when`` matches;
    returns a list that holds what it returned once it ran."""
    real_run = Storage.run
    ran: list[Any] = []

    def run(self: Storage, name: str, keys: list[str], args: list[Any], *rest: Any, **kwargs: Any) -> Any:
        if not ran and when(name, args):
            ran.append(None)  # the action's own scripts run as they are
            ran[0] = action()
        return real_run(self, name, keys, args, *rest, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    return ran


def nothing_reserved(qs: QueueServer, tenant: str) -> None:
    tk = k.TenantKeys(tenant)
    assert not qs.client.exists(tk.pending_copies), "every reserved copy was made or given back"
    assert qs.client.zcard(tk.send_journals) == 0
    assert not qs.client.keys(send_keys.send_reservation(tk, "*"))
    assert_audit_clean(qs.client, {tenant})


def test_a_wide_publish_reserves_in_steps_and_its_prepare_reads_no_destination(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]]) -> None:
    destinations = twelve_destinations(qs, tenant)
    published = qs.publish(tenant, "x/1", [msg("one"), msg("two")])
    assert published.copies == 2 * 12
    assert names(scripts) == ["send_reserve"] * 3 + ["send", "send_release"] + ["send_apply"] * 3, \
        "12 destinations reserved 4 a step, prepared, then the reference counts and two steps of copies"
    per_destination = 1 + len(k.TenantKeys(tenant).destination_named("s/s0")[1].as_list())
    assert [len(keys) for name, keys, _ in scripts if name == "send_reserve"] == [6 + 4 * per_destination] * 3
    prepare = next(keys for name, keys, _ in scripts if name == "send")
    assert len(prepare) == 7 + 2 * 3 + 11, "each queue's cfg and subscribers, no destination's keys"
    every_one_holds(qs, tenant, destinations, published.ids)
    nothing_reserved(qs, tenant)


def test_a_refusal_in_a_later_step_gives_back_the_steps_before_and_stores_nothing(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]]) -> None:
    twelve_destinations(qs, tenant)
    qs.put_queue(tenant, "zz", P2P, topics=["x/>"], max_messages=1)
    qs.send(tenant, "zz", [msg("already")])
    scripts.clear()
    with pytest.raises(QueueFull) as refused:
        qs.publish(tenant, "x/1", [msg("one")])
    assert refused.value.details["queue"] == "zz"
    reserves = names(scripts).index("send_release")
    assert reserves >= 2 and names(scripts)[:reserves] == ["send_reserve"] * reserves, \
        "refused at a later step, after earlier steps reserved"
    assert "send" not in names(scripts) and "send_apply" not in names(scripts)
    assert [qs.get_queue(tenant, q).depth for q in ("a", "b", "s", "zz")] == [0, 0, 0, 1]
    nothing_reserved(qs, tenant)


def test_a_send_racing_a_reservation_finds_the_room_it_holds(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    twelve_destinations(qs, tenant, max_messages=1)
    real_run = Storage.run
    raced: list[BaseException] = []

    def run(self: Storage, name: str, keys: list[str], args: list[Any], *rest: Any, **kwargs: Any) -> Any:
        if name == "send" and args[11] and not raced:  # the wide prepare, after its reservation
            with pytest.raises(QueueFull) as full:
                qs.send(tenant, "b", [msg("racer")])
            raced.append(full.value)
        return real_run(self, name, keys, args, *rest, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    published = qs.publish(tenant, "x/1", [msg("wide")])
    assert raced and raced[0].details["count"] == 1, "b's one place was the reservation's"
    assert held(qs, tenant, "b") == published.ids
    nothing_reserved(qs, tenant)


def dies_mid_reservation(monkeypatch: pytest.MonkeyPatch, steps: int) -> None:
    """The request's node dies after ``steps`` steps of its reservation: nothing of it runs after
    (no release), and its reservation stays, untouched."""
    real_run, real_release = Storage.run, send_journal.SendJournals.release
    ran = [0]

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "send_reserve":
            ran[0] += 1
            if ran[0] > steps:
                raise StorageError("the node died")
        return real_run(self, name, *args, **kwargs)

    def release(self: send_journal.SendJournals, *args: Any, **kwargs: Any) -> None:
        if ran[0] <= steps:
            real_release(self, *args, **kwargs)

    monkeypatch.setattr(Storage, "run", run)
    monkeypatch.setattr(send_journal.SendJournals, "release", release)


def died_mid_reservation(qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """A wide publish with Idempotency-Key ``key`` whose node died after two steps of its reservation."""
    with monkeypatch.context() as dying:
        dies_mid_reservation(dying, 2)
        with pytest.raises(StorageError):
            qs.publish(tenant, "x/1", [msg("wide")], idempotency_key=key)


def test_a_reservation_a_dead_request_left_is_given_back_by_the_maintenance(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = twelve_destinations(qs, tenant, max_messages=1)
    died_mid_reservation(qs, tenant, monkeypatch, "wide-1")
    tk = k.TenantKeys(tenant)
    assert len(qs.client.hgetall(tk.pending_copies)) == 2 * 8, "two steps of 4 destinations reserved"
    assert_audit_clean(qs.client, {tenant})
    with pytest.raises(QueueFull):
        qs.send(tenant, "b", [msg("b is reserved")])
    monkeypatch.setattr(maintenance_module, "STALE_MS", 0)
    scripts.clear()
    qs.maintain(tenant)
    assert names(scripts) == ["send_release"] * 3, "8 destinations given back, 3 a step"
    nothing_reserved(qs, tenant)
    again = qs.publish(tenant, "x/1", [msg("wide")], idempotency_key="wide-1")
    assert again.copies == 12
    every_one_holds(qs, tenant, destinations, again.ids)
    nothing_reserved(qs, tenant)


def test_a_retry_goes_on_with_the_reservation_and_stores_once(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = twelve_destinations(qs, tenant)
    died_mid_reservation(qs, tenant, monkeypatch, "wide-2")
    scripts.clear()
    again = qs.publish(tenant, "x/1", [msg("wide")], idempotency_key="wide-2")
    assert names(scripts)[:3] == ["send_reserve", "send_reserve", "send"], \
        "planned from 0, told where the reservation is, then its last step"
    assert [args[0] for name, _, args in scripts if name == "send_reserve"] == [0, 8]
    every_one_holds(qs, tenant, destinations, again.ids)
    assert qs.publish(tenant, "x/1", [msg("wide")], idempotency_key="wide-2").ids == again.ids
    nothing_reserved(qs, tenant)


def test_repeats_found_by_the_prepare_give_back_what_was_reserved_for_them(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]]) -> None:
    twelve_destinations(qs, tenant, max_messages=3, overflow="drop_oldest")
    first = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a"), msg("b", dedupe_id="b")])
    second = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a"), msg("c", dedupe_id="c")])
    assert second.ids[0] == first.ids[0] and second.dropped == 0, \
        "reserved for 2, stored 1: b holds 3, within its limit, and drops nothing"
    assert held(qs, tenant, "b") == [*first.ids, second.ids[1]]
    nothing_reserved(qs, tenant)
    scripts.clear()
    repeat = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a")])
    assert repeat.ids == first.ids[:1]
    assert names(scripts) == ["send_reserve"] * 3 + ["send"] + ["send_release"] * 4, \
        "a call of repeats only is answered whole, then its 12 reserved destinations given back"
    nothing_reserved(qs, tenant)


def test_a_route_changed_mid_reservation_is_reserved_again(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = twelve_destinations(qs, tenant)
    real_run = Storage.run

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        reply = real_run(self, name, *args, **kwargs)
        if name == "send_reserve" and not qs.client.sismember(k.TenantKeys(tenant).queue("s").subscribers, "late"):
            qs.put_subscriber(tenant, "s", "late")
        return reply

    monkeypatch.setattr(Storage, "run", run)
    published = qs.publish(tenant, "x/1", [msg("wide")])
    assert published.copies == 13
    every_one_holds(qs, tenant, [*destinations, ("s", "late")], published.ids)
    assert "send_release" in names(scripts), "the first reservation, of the old route, was given back"
    nothing_reserved(qs, tenant)


def test_a_retry_whose_route_changed_since_the_dead_request_reserved_stores_each_destination_once(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry is another node's, which reads the routes afresh."""
    destinations = twelve_destinations(qs, tenant)
    died_mid_reservation(qs, tenant, monkeypatch, "wide-3")
    qs.put_subscriber(tenant, "s", "late")  # sorts first among s's subscribers: every later one moves
    real_route = Routes.route
    monkeypatch.setattr(Routes, "route", lambda self, tenant, queue, qk, refresh: real_route(self, tenant, queue, qk, True))
    again = qs.publish(tenant, "x/1", [msg("wide")], idempotency_key="wide-3")
    assert again.copies == 13
    every_one_holds(qs, tenant, [*destinations, ("s", "late")], again.ids)
    assert_audit_clean(qs.client, {tenant})
    monkeypatch.setattr(maintenance_module, "STALE_MS", 0)
    qs.maintain(tenant)  # gives back the dead request's reservation, of the other list
    nothing_reserved(qs, tenant)


def test_a_reservation_makes_room_only_below_the_priority_of_the_messages_sent(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]]) -> None:
    twelve_destinations(qs, tenant, max_messages=1, overflow="drop_lowest_priority")
    waiting = qs.send(tenant, "b", [msg("of the default priority")])
    with pytest.raises(QueueFull):
        qs.publish(tenant, "x/1", [dataclasses.replace(msg("low"), priority=0)])
    assert held(qs, tenant, "b") == waiting, "a message of priority 0 makes no room from one of 4"
    nothing_reserved(qs, tenant)


def test_a_wide_publish_of_repeats_only_answers_the_originals_from_a_full_queue(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]]) -> None:
    twelve_destinations(qs, tenant, max_messages=1)
    first = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a")])
    again = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a")])
    assert again.ids == first.ids, "a repeat stores nothing, so b's limit does not refuse it (as a narrow send's)"
    nothing_reserved(qs, tenant)


def test_a_repeat_of_a_higher_priority_makes_no_room_for_the_new_messages_of_a_lower(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]]) -> None:
    twelve_destinations(qs, tenant, max_messages=2, overflow="drop_lowest_priority")
    high = dataclasses.replace(msg("high", dedupe_id="high"), priority=9)
    first = qs.publish(tenant, "x/1", [high])
    qs.get(tenant, "b")
    qs.ack(tenant, "b", first.ids)  # b holds none, and the marker answers a repeat of high
    waiting = qs.send(tenant, "b", [msg("w1"), msg("w2")])
    with pytest.raises(QueueFull):
        qs.publish(tenant, "x/1", [high, dataclasses.replace(msg("low"), priority=0)])
    assert held(qs, tenant, "b") == waiting, "a message of priority 0 makes no room from ones of 4"
    nothing_reserved(qs, tenant)


def test_a_marker_gone_between_the_reservation_and_the_prepare_has_the_reservation_made_again(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = twelve_destinations(qs, tenant, max_messages=1)
    first = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a")])
    for queue, sub in destinations:
        qs.get(tenant, queue, subscriber=sub)
        qs.ack(tenant, queue, first.ids, subscriber=sub)
    expired = once_before(monkeypatch, lambda name, args: name == "send" and bool(args[11]),  # the prepare
                          lambda: qs.client.delete(k.TenantKeys(tenant).topic_dedupe("x/1", "a")))
    scripts.clear()
    again = qs.publish(tenant, "x/1", [msg("a", dedupe_id="a")])
    assert expired == [1] and again.ids != first.ids, "stored anew: its marker had expired"
    assert names(scripts).count("send") == 2, "the prepare found a new message the reservation had not counted"
    every_one_holds(qs, tenant, destinations, again.ids)
    nothing_reserved(qs, tenant)


def test_a_store_at_maxmemory_refusing_a_step_has_the_steps_before_given_back(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if request.node.callspec.params["backend"] != "valkey":
        pytest.skip("maxmemory of the one real server")
    twelve_destinations(qs, tenant)
    real_run = Storage.run
    most = qs.client.config_get("maxmemory")["maxmemory"]

    def run(self: Storage, name: str, keys: list[str], args: list[Any], *rest: Any, **kwargs: Any) -> Any:
        if name == "send_reserve" and args[0] == 8:  # the third step: the store is full
            qs.client.config_set("maxmemory", 1)
            try:
                return real_run(self, name, keys, args, *rest, **kwargs)
            finally:
                if names(scripts).count("send_release") == 0:
                    monkeypatch.setattr(Storage, "run", release_full)
        return real_run(self, name, keys, args, *rest, **kwargs)

    def release_full(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_run(self, name, *args, **kwargs)  # the release runs at maxmemory too
        finally:
            qs.client.config_set("maxmemory", most)

    monkeypatch.setattr(Storage, "run", run)
    try:
        with pytest.raises(StorageFull):
            qs.publish(tenant, "x/1", [msg("wide")])
    finally:
        qs.client.config_set("maxmemory", most)
    assert [qs.get_queue(tenant, q).depth for q in ("a", "b", "s")] == [0, 0, 0]
    nothing_reserved(qs, tenant)


def test_a_retry_racing_the_reservation_of_the_original_stores_once(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = twelve_destinations(qs, tenant, max_messages=1)
    retried = once_before(monkeypatch, lambda name, args: name == "send_reserve" and args[0] == 8,  # 8 reserved
                          lambda: qs.publish(tenant, "x/1", [msg("wide")], idempotency_key="race"))
    original = qs.publish(tenant, "x/1", [msg("wide")], idempotency_key="race")
    assert retried[0].ids == original.ids
    every_one_holds(qs, tenant, destinations, original.ids)
    nothing_reserved(qs, tenant)


def test_a_reservation_the_maintenance_gave_back_before_the_prepare_is_made_again(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    destinations = twelve_destinations(qs, tenant, max_messages=1)
    monkeypatch.setattr(maintenance_module, "STALE_MS", 0)
    # The request seemed dead: its prepare comes after the maintenance's round.
    once_before(monkeypatch, lambda name, args: name == "send" and bool(args[11]), lambda: qs.maintain(tenant))
    published = qs.publish(tenant, "x/1", [msg("wide")])
    assert names(scripts).count("send") == 2 and names(scripts).count("send_reserve") == 6
    every_one_holds(qs, tenant, destinations, published.ids)
    nothing_reserved(qs, tenant)


def test_a_reserved_call_is_stored_in_steps_whatever_the_chunk_bounds(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(send_journal, "CHUNK_DESTINATIONS", 100)  # 12 destinations would be one script's
    destinations = twelve_destinations(qs, tenant)
    published = qs.publish(tenant, "x/1", [msg("wide")])
    assert published.copies == 12 and "send_apply" in names(scripts), "reserved, so copied in steps"
    every_one_holds(qs, tenant, destinations, published.ids)
    nothing_reserved(qs, tenant)


def ordered_and_eleven_others(qs: QueueServer, tenant: str) -> None:
    """Queue a exclusive, b point-to-point and s with ten subscribers, attracting x/>."""
    qs.put_queue(tenant, "a", P2P, topics=["x/>"], access="exclusive")
    qs.put_queue(tenant, "b", P2P, topics=["x/>"])
    qs.put_queue(tenant, "s", PUBSUB, topics=["x/>"])
    for sub in SUBSCRIBERS:
        qs.put_subscriber(tenant, "s", sub)


def send_once_after(qs: QueueServer, tenant: str, monkeypatch: pytest.MonkeyPatch, after: str,
                    send: Any) -> list[Any]:
    """Once, right after the first script ``after``, calls ``send()``; what it returned or raised."""
    real_run, out, started = Storage.run, [], []

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_run(self, name, *args, **kwargs)
        finally:
            if name == after and not started:
                started.append(name)
                try:
                    out.append(send())
                except StorageError as exc:
                    out.append(exc)

    monkeypatch.setattr(Storage, "run", run)
    return out


@pytest.mark.parametrize("after", ["send_reserve", "send"])
def test_a_wide_publish_reaching_an_exclusive_queue_keeps_the_send_order_there(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch, after: str) -> None:
    """A send to the exclusive queue during the reservation takes its ids first, and lands first;
    one after the prepare waits for the publish's copies there."""
    ordered_and_eleven_others(qs, tenant)
    other = send_once_after(qs, tenant, monkeypatch, after, lambda: qs.send(tenant, "a", [msg("other")]))
    published = qs.publish(tenant, "x/1", [msg("one"), msg("two")])
    assert "send_reserve" in names(scripts) and len(other) == 1
    expected = other[0] + published.ids if after == "send_reserve" else published.ids + other[0]
    assert held(qs, tenant, "a") == expected and sorted(expected) == expected, "in send order"
    nothing_reserved(qs, tenant)
    assert qs.client.zcard(send_keys.send_owed(k.TenantKeys(tenant))) == 0


def test_a_chunked_send_meeting_a_reservation_waits_for_it_a_bounded_time(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunked prepare to an exclusive queue a reservation owes would be overtaken by the reserved
    send's copies: it waits for it to become a journal, here in vain (the reservation is held up
    in this very call), then answers 503 having stored nothing; the publish goes on."""
    ordered_and_eleven_others(qs, tenant)
    monkeypatch.setattr(routes, "ORDER_WAIT_MS", 50)
    monkeypatch.setattr(send_journal, "STAGE_DOCS", 1)  # a message of two documents is staged
    refused = send_once_after(qs, tenant, monkeypatch, "send_reserve",
                              lambda: qs.send(tenant, "a", [msg("big", "big")]))
    published = qs.publish(tenant, "x/1", [msg("one")])
    assert len(refused) == 1 and isinstance(refused[0], StorageError) and refused[0].http_status == 503
    assert held(qs, tenant, "a") == published.ids
    assert not qs.client.keys(f"{k.tenant_prefix(tenant)}:stg:*"), "its upload deleted"
    nothing_reserved(qs, tenant)
    assert qs.client.zcard(send_keys.send_owed(k.TenantKeys(tenant))) == 0


def test_a_reservation_meeting_another_on_an_exclusive_queue_gives_its_own_back_while_it_waits(
        qs: QueueServer, tenant: str, scripts: list[tuple[str, list[str], list[Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two wide publishes: the second's reservation holds exclusive queue a when it meets the first's
    at exclusive queue m; it gives a back (so the two never wait for each other) and waits, here in
    vain (the first is held up in this very call), then answers 503 having stored nothing."""
    qs.put_queue(tenant, "a", P2P, topics=["y/>"], access="exclusive")
    qs.put_queue(tenant, "m", P2P, topics=["x/>", "y/>"], access="exclusive")
    qs.put_queue(tenant, "s", PUBSUB, topics=["x/>", "y/>"])
    for sub in SUBSCRIBERS:
        qs.put_subscriber(tenant, "s", sub)
    monkeypatch.setattr(routes, "ORDER_WAIT_MS", 50)
    monkeypatch.setattr(send_journal, "RESERVE_DESTINATIONS", 1)
    tk = k.TenantKeys(tenant)
    owed_by_second: list[set[bytes]] = []
    refused = send_once_after(qs, tenant, monkeypatch, "send_reserve",
                              lambda: qs.publish(tenant, "y/1", [msg("second")]))
    real_release = send_journal.SendJournals.release

    def release(self: send_journal.SendJournals, *args: Any, **kwargs: Any) -> None:
        real_release(self, *args, **kwargs)
        owed_by_second.append(set(qs.client.zrange(send_keys.send_owed(tk), 0, -1)))

    monkeypatch.setattr(send_journal.SendJournals, "release", release)
    published = qs.publish(tenant, "x/1", [msg("first")])
    assert len(refused) == 1 and isinstance(refused[0], StorageError) and refused[0].http_status == 503
    assert owed_by_second and all(not any(e.startswith(b"a|") for e in owed) for owed in owed_by_second), \
        "a given back at each wait"
    every_one_holds(qs, tenant, [("m", None), *(("s", sub) for sub in SUBSCRIBERS)], published.ids)
    assert held(qs, tenant, "a") == []
    nothing_reserved(qs, tenant)
    assert qs.client.zcard(send_keys.send_owed(tk)) == 0
