"""Random selector lists against every call that selects messages, on the real Valkey.

Whatever a client names (ids, receipts in many spellings, duplicates, stale
deliveries, ids that never existed), every invariant the audit checks holds
after each call, the usage never goes negative, and no call settles a
message twice.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from atomq.errors import InvalidInput
from atomq.platform import QueueServer
from atomq.platform.audit import audit_tenant
from support.queues import FAST, msg

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
