"""The server settings every node shares (``GET/PATCH /v1/server``), kept in Redis.

Each node reads them again every few seconds, so a change made through one
node holds on all of them shortly after; the queue server's part of them
(redelivery schedule, de-duplication window, retention, the limits on one
tenant's weight) is applied to its ``QueueSettings``.

Every setting has an upper bound (see ``ServerSettings``): an unbounded one
(a retention of ``1e306`` seconds) overflows the times computed from it and
stops the maintenance loop on every node. A stored value out of its bounds,
written by an older version, is read as the setting's default and logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from typing import Any

from atomq import defaults
from atomq.errors import InvalidInput
from atomq.integer_range import check_integer_range
from atomq.platform.queues.queue_settings import QueueSettings
from atomq.platform.store import keys as k
from atomq.platform.store.refreshed import Refreshed
from atomq.platform.store.storage import Storage
from atomq.platform.watch.memory_state import MemoryThresholds

log = logging.getLogger("atomq.settings")

REFRESH_S = 2.0


@dataclass(frozen=True)
class ServerSettings:
    """Attributes (bounds in brackets):
        incoming_rate_limit_per_minute: the node's window limit on sends (0: none) [0, 2^53].
        max_disk_bytes: bound on all tenants' stored bytes (0: none) [0, 2^53].
        max_messages: bound on all tenants' stored message copies, dead letters included (0: none)
            [0, 2^53].
        flow_control_wait_ms: how long a node holds a send to a full ``flow_control`` queue
            before answering 429 [0, 60000].
        min_replicas: replicas that must hold a send to a ``sync`` queue before it is answered [0, 16].
        sync_timeout_ms: how long a send to a ``sync`` queue waits for the disk and the replicas
            before 503 not_durable [1, 10000].
        memory_thresholds: the shares of the store's memory limit where the memory states yellow,
            orange and red begin (``MemoryThresholds``; given as an object, parts left out keep
            their defaults).
        redelivery_delays_s: delay after failed delivery k is element k-1; the last repeats
            [1 to 100 delays, each 0 to 1 day].
        rate_limit_window_s: length of a rate-limit window (0, 1 day].
        document_retention_s: documents (and their messages) older than this are purged (0, 10 years].
        dedupe_window_s: how long a dedupe id answers with its original message id (0, 7 days].
        max_documents_per_message, max_documents_per_send, max_reply_bytes, max_queues_per_tenant,
        max_copies_per_request:
            the limits on one tenant's weight, as ``QueueSettings`` describes them (``defaults.LIMIT_BOUNDS``).
    """

    incoming_rate_limit_per_minute: int = defaults.INCOMING_RATE_LIMIT_PER_MINUTE
    max_disk_bytes: int = defaults.MAX_DISK_BYTES
    max_messages: int = defaults.MAX_STORED_MESSAGES
    flow_control_wait_ms: int = defaults.FLOW_CONTROL_WAIT_MS
    memory_thresholds: MemoryThresholds = MemoryThresholds()
    min_replicas: int = defaults.MIN_REPLICAS
    sync_timeout_ms: int = defaults.SYNC_TIMEOUT_MS
    redelivery_delays_s: tuple[float, ...] = defaults.REDELIVERY_DELAYS_S
    rate_limit_window_s: float = defaults.RATE_LIMIT_WINDOW_S
    document_retention_s: float = defaults.DOCUMENT_RETENTION_S
    dedupe_window_s: float = defaults.DEDUPE_WINDOW_S
    max_documents_per_message: int = defaults.MAX_DOCUMENTS_PER_MESSAGE
    max_documents_per_send: int = defaults.MAX_DOCUMENTS_PER_SEND
    max_reply_bytes: int = defaults.MAX_REPLY_BYTES
    max_queues_per_tenant: int = defaults.MAX_QUEUES_PER_TENANT
    max_copies_per_request: int = defaults.MAX_COPIES_PER_REQUEST

    def __post_init__(self) -> None:
        for name in ("incoming_rate_limit_per_minute", "max_disk_bytes", "max_messages"):
            check_integer_range(getattr(self, name), name, 0, defaults.MAX_EXACT_INT,
                                rule="a whole number from 0 to 2^53")
        check_integer_range(self.flow_control_wait_ms, "flow_control_wait_ms", 0, defaults.MAX_FLOW_CONTROL_WAIT_MS)
        check_integer_range(self.min_replicas, "min_replicas", 0, defaults.MAX_MIN_REPLICAS)
        check_integer_range(self.sync_timeout_ms, "sync_timeout_ms", 1, defaults.MAX_SYNC_TIMEOUT_MS)
        if isinstance(self.memory_thresholds, dict):
            try:
                object.__setattr__(self, "memory_thresholds", MemoryThresholds(**self.memory_thresholds))
            except TypeError:
                raise InvalidInput("memory_thresholds holds yellow, orange and red only",
                                   field="memory_thresholds") from None
        elif not isinstance(self.memory_thresholds, MemoryThresholds):
            raise InvalidInput("memory_thresholds must be an object of yellow, orange and red",
                               field="memory_thresholds")
        for name, most in BOUNDS_S.items():
            value = getattr(self, name)
            if type(value) not in (int, float) or not 0 < value <= most:
                raise InvalidInput(f"{name} must be a number above 0 and at most {most:g}", field=name)
        for name, (least, most) in defaults.LIMIT_BOUNDS.items():
            check_integer_range(getattr(self, name), name, least, most,
                                rule=f"a whole number from {least} to {most}")
        self.queue_settings(QueueSettings())  # the schedule's own rules

    def queue_settings(self, base: QueueSettings) -> QueueSettings:
        """``base`` with the queue server's part of these settings."""
        return dataclasses.replace(base, redelivery_delays_s=tuple(self.redelivery_delays_s),
                                   dedupe_window_s=self.dedupe_window_s,
                                   document_retention_s=self.document_retention_s,
                                   sync_min_replicas=self.min_replicas, sync_timeout_ms=self.sync_timeout_ms,
                                   **{name: getattr(self, name) for name in defaults.LIMIT_BOUNDS})


BOUNDS_S = {
    "rate_limit_window_s": defaults.MAX_RATE_LIMIT_WINDOW_S,
    "document_retention_s": defaults.MAX_DOCUMENT_RETENTION_S,
    "dedupe_window_s": defaults.MAX_DEDUPE_WINDOW_S,
}
"""Upper bound of each setting in seconds but the redelivery delays (``QueueSettings`` bounds those)."""


class ServerSettingsStore:
    """Reads and writes the shared settings, with a short per-node cache."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._cached: Refreshed[ServerSettings] = Refreshed(self.load, REFRESH_S, "server settings")
        self._reported: set[tuple[str, bytes]] = set()

    def load(self) -> ServerSettings:
        """The stored settings; a field whose stored value is not valid takes its default."""
        raw = self._storage.call(self._storage.client.hgetall, k.SERVER_SETTINGS_KEY)
        known = {f.name for f in dataclasses.fields(ServerSettings)}
        values: dict[str, Any] = {}
        for field, stored in raw.items():
            name = field.decode()
            if name in known:
                try:
                    value = json.loads(stored)
                    if name == "redelivery_delays_s":
                        value = tuple(value)
                    ServerSettings(**{name: value})
                except (ValueError, TypeError, InvalidInput) as exc:
                    self._report(name, stored, exc)
                    continue
                values[name] = value
        return ServerSettings(**values)

    def _report(self, name: str, stored: bytes, exc: Exception) -> None:
        """Logs a stored value that is out of its bounds, once per value and process."""
        if (name, stored) not in self._reported:
            self._reported.add((name, stored))
            log.warning("server setting %s holds %r, which this version does not take (%s): its default "
                        "applies until PATCH /v1/server sets it", name, stored[:100], exc)

    def current(self) -> ServerSettings:
        """The settings as this node last read them, read again in the background when older than a
        few seconds (see ``Refreshed``)."""
        return self._cached.get()

    def update(self, **changes: Any) -> ServerSettings:
        """Validates the changed settings together with the others, then stores them."""
        if "redelivery_delays_s" in changes:
            changes["redelivery_delays_s"] = tuple(changes["redelivery_delays_s"])
        current = self.load()
        if isinstance(changes.get("memory_thresholds"), dict):  # the parts left out are kept
            changes["memory_thresholds"] = {**dataclasses.asdict(current.memory_thresholds),
                                            **changes["memory_thresholds"]}
        settings = dataclasses.replace(current, **changes)
        mapping = {name: json.dumps(_jsonable(getattr(settings, name))) for name in changes}
        if mapping:
            self._storage.call(self._storage.client.hset, k.SERVER_SETTINGS_KEY, mapping=mapping)
        return self._cached.set(settings)


def _jsonable(value: Any) -> Any:
    """A setting's value as it is stored: JSON of lists and objects."""
    if isinstance(value, tuple):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value
