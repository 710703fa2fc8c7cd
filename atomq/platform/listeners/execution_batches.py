"""The batch a started execution took, kept apart from its listener.

A start records what it took; an extend reads it; the finish (or the
supervisor, for an execution whose work horse died) takes it, once. Being
apart from the listener, a batch is settled on the queue it came from even
if the listener was redeployed or deleted since.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from atomq.platform.queues.names import check_tenant_id
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.storage import Storage


@dataclass(frozen=True)
class ExecutionBatch:
    """What a started execution took: settled on that queue, whatever became of its listener."""

    listener: str
    queue: str
    subscriber: str | None
    ids: tuple[str, ...]
    receipts: tuple[str, ...]
    ack_timeout_s: float

    def to_json(self) -> str:
        return json.dumps({"listener": self.listener, "queue": self.queue, "subscriber": self.subscriber,
                           "ids": self.ids, "receipts": self.receipts, "ack_timeout_s": self.ack_timeout_s},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> ExecutionBatch:
        data = json.loads(raw)
        return cls(listener=data["listener"], queue=data["queue"], subscriber=data["subscriber"],
                   ids=tuple(data["ids"]), receipts=tuple(data["receipts"]), ack_timeout_s=data["ack_timeout_s"])


class ExecutionBatches:
    """The batches of every tenant's started executions."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def record(self, tenant: str, execution: str, batch: ExecutionBatch, ttl_ms: int) -> None:
        """Keeps what a started execution took, for its extend and its finish."""
        self.storage.call(self.storage.client.set, lk.execution_record(check_tenant_id(tenant), execution),
                          batch.to_json(), px=ttl_ms)

    def get(self, tenant: str, execution: str) -> ExecutionBatch | None:
        raw = self.storage.call(self.storage.client.get, lk.execution_record(check_tenant_id(tenant), execution))
        return None if raw is None else ExecutionBatch.from_json(raw)

    def take(self, tenant: str, execution: str) -> ExecutionBatch | None:
        """The batch of a started execution, removed: only its first finish settles it."""
        raw = self.storage.call(self.storage.client.getdel,
                                lk.execution_record(check_tenant_id(tenant), execution))
        return None if raw is None else ExecutionBatch.from_json(raw)
