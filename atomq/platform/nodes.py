"""Each node's record in the store: what an operator sees of the nodes that run the platform.

A node's master rewrites its record every ``BEAT_S`` with its address, version, start and the
execution workers it keeps; so the overview lists every node from one read of the store, on
whichever node the operator's browser reached. A record not rewritten for ``SILENT_S`` is a node
that stopped or lost the store; it is shown as such, and dropped after ``FORGET_S``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from atomq.platform import keys as k
from atomq.platform.storage import Storage
from atomq.platform.stored_form import known_fields

log = logging.getLogger("atomq.nodes")

BEAT_S = 5.0
SILENT_S = 3 * BEAT_S
FORGET_S = 3600.0


@dataclass(frozen=True)
class KeptWorkerState:
    """An execution worker a node keeps: ``running`` since ``since``; ``restarting`` after an exit,
    at ``since``; or ``not started`` (the Spark worker without a Java runtime, say: ``problem``)."""

    engine: str
    pid: int | None
    state: str
    since: float
    restarts: int
    problem: str = ""
    execution: str = ""
    """What it runs now, ``<tenant>/<listener>`` ("" when idle); the Spark worker's executions,
    which run side by side in its pools, joined by ", "."""


@dataclass(frozen=True)
class NodeRecord:
    id: str
    url: str
    version: str
    pid: int
    started_at: float
    seen_at: float = 0.0
    workers: list[KeptWorkerState] = field(default_factory=list)

    def silent_for(self, now: float) -> float | None:
        """Seconds since the node last wrote its record, once that is longer than it should be."""
        gap = now - self.seen_at
        return gap if gap > SILENT_S else None

    @classmethod
    def from_json(cls, raw: bytes) -> NodeRecord | None:
        """The record, or None for one this version cannot read. A field another version added is
        left out, so nodes of two versions (a rolling upgrade) list each other."""
        try:
            data: dict[str, Any] = json.loads(raw)
            workers = [KeptWorkerState(**known_fields(KeptWorkerState, w)) for w in data.get("workers", [])]
            return cls(**{**known_fields(cls, data), "workers": workers})
        except (ValueError, TypeError, AttributeError) as exc:
            log.warning("a node's record this version cannot read is left out: %r", exc)
            return None



class NodeRecords:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def beat(self, record: NodeRecord) -> None:
        seen = NodeRecord(**{**asdict(record), "workers": record.workers, "seen_at": time.time()})
        self._storage.call(self._storage.client.hset, k.NODES_KEY, record.id, json.dumps(asdict(seen)))

    def forget(self, node_id: str) -> None:
        """A node that stops says so at once."""
        self._storage.call(self._storage.client.hdel, k.NODES_KEY, node_id)

    def all(self) -> list[NodeRecord]:
        """Every node heard from within ``FORGET_S``, oldest first; older records are dropped."""
        raw = self._storage.call(self._storage.client.hgetall, k.NODES_KEY)
        now = time.time()
        records, gone = [], []
        for node_id, value in raw.items():
            record = NodeRecord.from_json(value)
            if record is None:
                continue
            if now - record.seen_at > FORGET_S:
                gone.append(node_id)
            else:
                records.append(record)
        if gone:
            self._storage.call(self._storage.client.hdel, k.NODES_KEY, *gone)
        return sorted(records, key=lambda r: (r.started_at, r.id))
