"""A settle call settles each delivery it names at most once, however it names it.

Receipts spelled several ways used to settle one delivery several times. The
examples run on the real Valkey and on fakeredis. The property test throws
random selector lists at every call that selects messages, on the real
Valkey: whatever a client names (ids, receipts in many spellings,
duplicates, stale deliveries, ids that never existed), every invariant the
audit checks holds after each call, the usage never goes negative, and no
call settles a message twice.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from atomq import defaults
from atomq.errors import InvalidInput
from atomq.platform import QueueServer
from atomq.platform.shared import docs_and_config, queue_keys
from atomq.platform.watch.audit import audit_tenant
from support.queues import FAST, dead_all, msg


def test_a_receipt_in_another_spelling_is_refused(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("m")])
    (d,) = qs.get(tenant, queue)
    for spelling in (f"{d.id}~01", f"{d.id}~001", f"{d.id}~+1", f"{d.id}~1.0", f" {d.receipt}"):
        with pytest.raises(InvalidInput) as err:
            qs.ack(tenant, queue, receipts=[d.receipt, spelling])
        assert err.value.details["field"] == "receipts"
    assert qs.get_queue(tenant, queue).in_flight == 1, "a refused call changes nothing"
    assert qs.usage(tenant)["messages"] == 1


def test_one_call_settles_a_message_once_whatever_names_it(qs, tenant, queue) -> None:
    qs.send(tenant, queue, [msg("a"), msg("b")])
    a, b = qs.get(tenant, queue, max_messages=2)
    assert qs.ack(tenant, queue, receipts=[a.receipt, a.receipt, a.receipt]) == 1
    assert qs.ack(tenant, queue, ids=[b.id, b.id]) == 1
    assert qs.usage(tenant) == {"stored_bytes": 0, "messages": 0}
    qs.send(tenant, queue, [msg("c")])
    (c,) = qs.get(tenant, queue)
    assert qs.nack(tenant, queue, receipts=[c.receipt, c.receipt]).dead_lettered == 1
    assert [x.id for x in dead_all(qs, tenant, queue)] == [c.id]
    assert audit_tenant(qs.client, tenant) == []


def test_the_settle_script_itself_counts_one_delivery_once(qs, tenant, queue) -> None:
    """Beneath the boundary's check: the script dedupes by message, not by selector text."""
    qs.send(tenant, queue, [msg("m")])
    (d,) = qs.get(tenant, queue)
    tk, qk = queue_keys(tenant, queue)
    dest = qk.destination()
    record = tk.request_record("settle-test")
    done, _ = qs.storage.run("settle", docs_and_config(tk, qk) + dest.as_list() + [qk.subscribers, tk.usage, tk.due,
                                                                                  record],
                             ["ack", "", qs.settings.delays_ms_arg, "receipt", "", "", "", 1, 60_000, defaults.SWEEP_PART,
                              f"{d.id}~1", f"{d.id}~01", f"{d.id}~001"])
    assert done == 1
    usage = qs.usage(tenant)
    assert usage["stored_bytes"] >= 0 and usage["messages"] == 0
    assert audit_tenant(qs.client, tenant) == []


# -- random selector lists --------------------------------------------------------------------


MESSAGES = 6

SPELLINGS = ("as_given", "zero_padded", "plus", "stale", "next", "unknown_id", "bare_id")

# Mostly the four messages the first get takes, so selectors often name one delivery twice.
selector = st.tuples(st.sampled_from(("id", "receipt")), st.integers(0, MESSAGES - 1).map(lambda i: i % 5),
                     st.sampled_from(SPELLINGS))
call = st.tuples(
    st.sampled_from(("ack", "nack", "extend", "release", "delete", "resend", "delete_dead", "get")),
    st.lists(selector, min_size=0, max_size=12),
    st.sampled_from((0.001, 0.05, 30.0, 3600.0)),  # an extension's seconds: it may shorten a deadline too
)


def _spell(kind: str, msg_id: str, count: int, spelling: str) -> str:
    if kind == "id":
        return "1-000000000001" if spelling == "unknown_id" else msg_id
    return {
        "as_given": f"{msg_id}~{count}",
        "zero_padded": f"{msg_id}~0{count}",
        "plus": f"{msg_id}~+{count}",
        "stale": f"{msg_id}~{max(1, count - 1)}",
        "next": f"{msg_id}~{count + 1}",
        "unknown_id": f"1-000000000001~{count}",
        "bare_id": msg_id,
    }[spelling]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(call, min_size=1, max_size=8))
@example(calls=[("ack", [("receipt", 0, "as_given"), ("receipt", 0, "zero_padded"), ("receipt", 0, "as_given")],
                 30.0)])
@example(calls=[("nack", [("receipt", 1, "as_given"), ("receipt", 1, "zero_padded")], 30.0),
                ("nack", [("id", 1, "as_given"), ("id", 1, "as_given")], 30.0)])
@example(calls=[("extend", [("id", 0, "as_given")], 0.001)])
def test_any_selectors_keep_every_invariant(valkey: Any,
                                            calls: list[tuple[str, list[tuple[str, int, str]], float]]) -> None:
    client = valkey.client()
    qs = QueueServer(client, FAST)
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    qs.put_queue(tenant, "q", "point_to_point", max_redeliveries=1)
    ids = qs.send(tenant, "q", [msg(f"m{i}") for i in range(MESSAGES)])
    counts = {d.id: d.delivery_count for d in qs.get(tenant, "q", max_messages=4)}
    try:
        for action, selectors, seconds in calls:
            if action == "get":
                counts.update({d.id: d.delivery_count for d in qs.get(tenant, "q", max_messages=MESSAGES)})
                continue
            names = [_spell(kind, ids[i], counts.get(ids[i], 1), spelling) for kind, i, spelling in selectors]
            use_ids = bool(selectors) and selectors[0][0] == "id"
            named = {n.partition("~")[0] for n in names}
            try:
                if action in ("ack", "nack", "extend", "release"):
                    selected = {"ids": names} if use_ids else {"receipts": names}
                    if action == "ack":
                        done = qs.ack(tenant, "q", **selected)
                    elif action == "nack":
                        result = qs.nack(tenant, "q", reason="x", **selected)
                        done = result.requeued + result.dead_lettered
                    elif action == "extend":
                        done = qs.extend(tenant, "q", seconds=seconds, **selected)
                    else:
                        done = qs.release(tenant, "q", delay_s=0, **selected)
                elif action == "delete":
                    done = qs.delete_messages(tenant, "q", ids=names)
                elif action == "resend":
                    done = qs.resend_dead_letters(tenant, "q", ids=names)
                else:
                    done = qs.delete_dead_letters(tenant, "q", ids=names)
            except InvalidInput as exc:
                assert exc.details["field"] in ("ids", "receipts")
                continue
            assert done <= len(named), f"{action} settled {done} messages but named {len(named)}"
            problems = audit_tenant(client, tenant)
            assert problems == [], f"after {action} {names}: {problems}"
            usage = qs.usage(tenant)
            assert usage["stored_bytes"] >= 0 and usage["messages"] >= 0
    finally:
        for name in [q.name for q in qs.list_queues(tenant)]:
            qs.delete_queue(tenant, name)
        client.close()
