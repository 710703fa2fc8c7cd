"""The ordering barrier of stepped sends (``send_journal``): what an exclusive or group-ordered queue
keeps in send order while a staged, chunked or reserved send to it is under way."""

from __future__ import annotations

from typing import Any

import pytest

from atomq.errors import Conflict, StorageError
from atomq.platform import QueueServer
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from atomq.platform.queues import send_journal
from atomq.platform.store import keys as k, send_keys
from atomq.platform.store.storage import Storage
from atomq.platform.watch.audit import audit_tenant
from support.audit import assert_audit_clean
from support.queues import die_after_steps, send_after_script


def message(i: int) -> OutgoingMessage:
    """Message ``i``: three documents, enough with the test's bounds to be staged in a send of two."""
    return OutgoingMessage(documents=tuple(OutgoingDocument(f"{i}.{d}:".ljust(30, "x")) for d in range(3)),
                           properties={"i": i})


@pytest.fixture
def staged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sends of more than 5 documents are staged."""
    monkeypatch.setattr(send_journal, "STAGE_DOCS", 5)
    monkeypatch.setattr(send_journal, "STAGE_BYTES", 200)


@pytest.mark.parametrize("order", [{"access": "exclusive"}, {"ordering": "group"}])
def test_a_queue_made_ordered_while_a_staged_send_to_it_is_under_way_keeps_its_messages_first(
        qs: QueueServer, tenant: str, staged: None, order: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The staged call's ids came first, and its prepare named the queue, not ordered then, in no
    owed set: the queue is made ordered only once the call's copies are made, so that a send after
    the change lands after them."""
    qs.put_queue(tenant, "work", "point_to_point")
    real_run, later, refused, tried = Storage.run, [], [], []

    def run(self: Storage, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real_run(self, name, *args, **kwargs)
        finally:
            if name == "send" and not tried:
                tried.append(True)
                try:
                    qs.put_queue(tenant, "work", "point_to_point", **order)  # between the prepare and the copies
                    later.extend(qs.send(tenant, "work", [message(9)]))
                except Conflict:
                    refused.append(True)

    monkeypatch.setattr(Storage, "run", run)
    ids = qs.send(tenant, "work", [message(i) for i in range(4)])
    qs.put_queue(tenant, "work", "point_to_point", **order)
    ids += later + qs.send(tenant, "work", [message(5)])
    assert [d.id for d in qs.get(tenant, "work", max_messages=10, consumer="c")] == ids
    assert refused, "made ordered only once the staged call's copies were made"
    assert_audit_clean(qs.client, {tenant})


def test_the_audit_finds_an_ordered_destination_a_stepped_send_owes_missing_from_the_owed_set(
        qs: QueueServer, tenant: str, staged: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its entry a send to the queue would land before the stepped send's copies."""
    qs.put_queue(tenant, "work", "point_to_point", access="exclusive")
    die_after_steps(monkeypatch, 0)
    with pytest.raises(StorageError):
        qs.send(tenant, "work", [message(i) for i in range(4)])
    owed = send_keys.send_owed(k.TenantKeys(tenant))
    [entry] = qs.client.zrange(owed, 0, -1)
    assert_audit_clean(qs.client, {tenant})
    qs.client.zrem(owed, entry)
    assert any("misses ordered destinations" in p and entry.decode() in p for p in audit_tenant(qs.client, tenant))
    qs.client.zadd(owed, {entry: 0})
    assert_audit_clean(qs.client, {tenant})


def lv(i: int, group: str, key: str, priority: int | None = None) -> OutgoingMessage:
    return OutgoingMessage(documents=tuple(OutgoingDocument(f"{i}.{d}:".ljust(30, "x")) for d in range(3)),
                           properties={"i": i, "k": key}, group=group, priority=priority)


@pytest.mark.parametrize("after", ["send", "send_apply"])
@pytest.mark.parametrize("priority", [None, 7])
def test_a_send_between_the_steps_of_a_staged_send_to_a_last_value_queue_ordered_by_group_supersedes_after_it(
        qs: QueueServer, tenant: str, staged: None, after: str, priority: int | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The later send's message, of a key a staged message has, supersedes it, whatever the groups."""
    qs.put_queue(tenant, "lv", "point_to_point", ordering="group", last_value=True, last_value_key="k")
    later, waited = send_after_script(qs, tenant, "lv", [lv(9, "b", "x", priority)], monkeypatch,
                                      lambda name: name == after)
    ids = qs.send(tenant, "lv", [lv(0, "a", "x", priority), lv(1, "b", "y", priority), lv(2, "a", "z", priority)])
    assert waited
    assert sorted(m.id for m in qs.browse(tenant, "lv", limit=10).items) == sorted(ids[1:] + later[0])
    got = qs.get(tenant, "lv", max_messages=10, consumer="c")
    assert sorted(d.properties["i"] for d in got) == [1, 2], "9 waits behind 1, its group's head"
    assert_audit_clean(qs.client, {tenant})
