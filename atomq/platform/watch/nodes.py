"""Each node's record in the store: what an operator sees of the nodes that run the platform.

A node's master rewrites its record every ``BEAT_S`` with its address, version, start and the
execution workers it keeps; so the overview lists every node from one read of the store, on
whichever node the operator's browser reached. A node that stops removes its record. A record not
rewritten for ``SILENT_S`` is a node that was killed or lost the store, or one that a backup
restored (the node it names never writes to this store): it is shown silent, its uptime stopped
at when it was last heard, and after ``FORGET_S`` it is no longer listed and the maintenance
drops it (``forget_silent``); a node that comes back writes it again at its next beat.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage
from atomq.platform.store.stored_form import known_fields

log = logging.getLogger("atomq.nodes")

BEAT_S = 5.0
SILENT_S = 3 * BEAT_S
FORGET_S = 600.0
"""Long enough for an operator to see a node that died go silent; short enough that the records
a backup restored, of nodes that run elsewhere or no more, do not linger for long."""


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

    def as_of(self, now: float) -> float:
        """The moment the record speaks for: ``now``, or, once the node is silent, when it was last
        heard (a node that is gone does not grow older, nor do the workers it kept)."""
        return now if self.silent_for(now) is None else self.seen_at

    def up_for(self, now: float) -> float:
        """Seconds the node has run, as far as its record tells (``as_of``)."""
        return max(0.0, self.as_of(now) - self.started_at)

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
        """Every node heard from within ``FORGET_S``, oldest first."""
        now = time.time()
        records = [r for _, _, r in self._read() if now - r.seen_at <= FORGET_S]
        return sorted(records, key=lambda r: (r.started_at, r.id))

    def forget_silent(self) -> int:
        """Drops the records not rewritten for ``FORGET_S`` (the maintenance does, now and then);
        a record rewritten between the read and the drop is kept. Returns how many were dropped."""
        now = time.time()
        gone = [part for node_id, raw, r in self._read() if now - r.seen_at > FORGET_S for part in (node_id, raw)]
        if not gone:
            return 0
        return int(self._storage.run("forget_nodes", [k.NODES_KEY], gone))

    def _read(self) -> list[tuple[bytes, bytes, NodeRecord]]:
        """(node id, record as stored, record) of every record this version can read."""
        raw = self._storage.call(self._storage.client.hgetall, k.NODES_KEY)
        return [(node_id, value, record) for node_id, value in raw.items()
                if (record := NodeRecord.from_json(value)) is not None]
