"""The server settings every node shares (``GET/PATCH /v1/server``), kept in Redis.

Each node reads them again every few seconds, so a change made through one
node holds on all of them shortly after; the queue server's part of them
(redelivery schedule, de-duplication window, retention) is applied to its
``QueueSettings``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from atomq.errors import InvalidInput
from atomq.platform import keys as k
from atomq.platform.settings import DEFAULT_REDELIVERY_DELAYS_S, QueueSettings
from atomq.platform.storage import Storage

REFRESH_S = 2.0
MEMORY_STATES = ((0.70, "green"), (0.85, "yellow"), (0.95, "orange"))


@dataclass(frozen=True)
class ServerSettings:
    """Attributes:
        incoming_rate_limit_per_minute: the node's window limit on sends (0: none).
        max_disk_bytes: bound on all tenants' stored bytes (0: none).
        redelivery_delays_s: delay after failed delivery k is element k-1; the last repeats.
        rate_limit_window_s: length of a rate-limit window.
        document_retention_s: documents (and their messages) older than this are purged.
        dedupe_window_s: how long a dedupe id answers with its original message id.
    """

    incoming_rate_limit_per_minute: int = 0
    max_disk_bytes: int = 0
    redelivery_delays_s: tuple[float, ...] = DEFAULT_REDELIVERY_DELAYS_S
    rate_limit_window_s: float = 60
    document_retention_s: float = 604800
    dedupe_window_s: float = 300

    def __post_init__(self) -> None:
        for name in ("incoming_rate_limit_per_minute", "max_disk_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise InvalidInput(f"{name} must be a whole number, 0 or more", field=name)
        for name in ("rate_limit_window_s", "document_retention_s", "dedupe_window_s"):
            value = getattr(self, name)
            if type(value) not in (int, float) or value <= 0:
                raise InvalidInput(f"{name} must be a number above 0", field=name)
        self.queue_settings(QueueSettings())  # the schedule's own rules

    def queue_settings(self, base: QueueSettings) -> QueueSettings:
        """``base`` with the queue server's part of these settings."""
        return dataclasses.replace(base, redelivery_delays_s=tuple(self.redelivery_delays_s),
                                   dedupe_window_s=self.dedupe_window_s,
                                   document_retention_s=self.document_retention_s)


def memory_state(used: int, limit: int) -> str:
    """green, yellow, orange or red as Redis fills up towards its maxmemory."""
    if not limit:
        return "green"
    share = used / limit
    for bound, state in MEMORY_STATES:
        if share < bound:
            return state
    return "red"


class ServerSettingsStore:
    """Reads and writes the shared settings, with a short per-node cache."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._cached: tuple[float, ServerSettings] | None = None
        self._lock = threading.Lock()

    def load(self) -> ServerSettings:
        raw = self._storage.call(self._storage.client.hgetall, k.SERVER_SETTINGS_KEY)
        values: dict[str, Any] = {f.decode(): json.loads(v) for f, v in raw.items()}
        known = {f.name for f in dataclasses.fields(ServerSettings)}
        values = {name: v for name, v in values.items() if name in known}
        if "redelivery_delays_s" in values:
            values["redelivery_delays_s"] = tuple(values["redelivery_delays_s"])
        settings = ServerSettings(**values)
        with self._lock:
            self._cached = (time.monotonic(), settings)
        return settings

    def current(self) -> ServerSettings:
        """The settings as this node last read them, read again when older than a few seconds."""
        cached = self._cached
        if cached is None or time.monotonic() - cached[0] > REFRESH_S:
            return self.load()
        return cached[1]

    def update(self, **changes: Any) -> ServerSettings:
        """Validates the changed settings together with the others, then stores them."""
        if "redelivery_delays_s" in changes:
            changes["redelivery_delays_s"] = tuple(changes["redelivery_delays_s"])
        settings = dataclasses.replace(self.load(), **changes)
        mapping = {name: json.dumps(list(v) if isinstance(v, tuple) else v) for name, v in changes.items()}
        if mapping:
            self._storage.call(self._storage.client.hset, k.SERVER_SETTINGS_KEY, mapping=mapping)
        with self._lock:
            self._cached = (time.monotonic(), settings)
        return settings
