"""The platform's part of SQS's queues, on Valkey, the cluster and fakeredis: fields kept in a
queue's config (written only while the queue exists, a prefix's count bounded) and queues that
redeliver at once."""

from __future__ import annotations

import pytest

from atomq.errors import NotFound, QuotaExceeded
from atomq.platform.models import OutgoingDocument, OutgoingMessage
from atomq.platform.queue_server import QueueServer


def test_fields_live_and_go_with_their_queue(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "q", "point_to_point", extra_fields={"x:a": "1", "x:t:k": "v"})
    assert qs.fields.read(tenant, "q", ["x:a", "x:none"]) == {"model": "point_to_point", "x:a": "1"}
    assert qs.fields.set(tenant, "q", {"x:t:k2": "w"}, prefix="x:t:", most=2) == 2
    with pytest.raises(QuotaExceeded):
        qs.fields.set(tenant, "q", {"x:t:k3": "z"}, prefix="x:t:", most=2)
    assert qs.fields.with_prefix(tenant, "q", "x:t:") == {"k": "v", "k2": "w"}
    assert qs.fields.delete(tenant, "q", ["x:t:k"], prefix="x:t:") == 1
    qs.delete_queue(tenant, "q")
    assert qs.fields.read(tenant, "q", ["x:a"]) is None and qs.fields.with_prefix(tenant, "q", "x:t:") is None
    with pytest.raises(NotFound):
        qs.fields.set(tenant, "q", {"x:a": "2"})
    qs.put_queue(tenant, "q", "point_to_point")
    assert qs.fields.read(tenant, "q", ["x:a"]) == {"model": "point_to_point"}  # a new life, no old fields


def test_a_queue_that_redelivers_now_skips_the_schedule(qs: QueueServer, tenant: str) -> None:
    qs.put_queue(tenant, "now", "point_to_point", extra_fields={"redeliver_now": 1})
    qs.put_queue(tenant, "later", "point_to_point")
    for name in ("now", "later"):
        qs.send(tenant, name, [OutgoingMessage(documents=(OutgoingDocument("m"),))])
        (taken,) = qs.get(tenant, name)
        qs.nack(tenant, name, [taken.id])
    (again,) = qs.get(tenant, "now")
    assert again.delivery_count == 2
    assert qs.get(tenant, "later") == []  # waits out the schedule's first delay
