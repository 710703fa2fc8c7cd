"""Fields another front keeps in a queue's config hash: the SQS endpoint's queue attributes that
have no native setting, and its tags.

They live where the queue's settings live, so they are made with the queue (``put_queue``'s
``extra_fields``, one script), read with one HMGET beside its model, and go with it when it is
removed. Writes after creation run ``queue_fields.lua``, which writes only while the queue exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from atomq.errors import QuotaExceeded
from atomq.platform.shared import Shared, docs_and_config, queue_keys


class QueueFields:
    """Reads and writes a queue's front-owned config fields (names chosen by the front)."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared

    def read(self, tenant: str, queue: str, fields: Sequence[str]) -> dict[str, str] | None:
        """The queue's model and ``fields`` that are set (one HMGET); None when there is no such queue."""
        _, qk = queue_keys(tenant, queue)
        raw = self._shared.storage.call(self._shared.client.hmget, qk.config, ["model", *fields])
        if raw[0] is None:
            return None
        return {name: value.decode() for name, value in zip(["model", *fields], raw) if value is not None}

    def with_prefix(self, tenant: str, queue: str, prefix: str) -> dict[str, str] | None:
        """The fields whose names start with ``prefix``, the prefix taken off; None for no such queue."""
        _, qk = queue_keys(tenant, queue)
        # The hash is small (the queue's settings and counters): one HGETALL, filtered here.
        held = self._shared.storage.call(self._shared.client.hgetall, qk.config)
        if b"model" not in held:
            return None
        start = prefix.encode()
        return {name[len(start):].decode(): value.decode() for name, value in held.items() if name.startswith(start)}

    def set(self, tenant: str, queue: str, values: Mapping[str, str | int], prefix: str = "", most: int = 0) -> int:
        """Sets ``values`` while the queue exists (NotFound else); at most ``most`` fields of
        ``prefix`` may be held after it (QuotaExceeded, nothing set). Returns their count."""
        pairs = [part for name, value in values.items() for part in (name, value)]
        return self._run(tenant, queue, "set", pairs, prefix, most)

    def delete(self, tenant: str, queue: str, fields: Sequence[str], prefix: str = "") -> int:
        """Removes ``fields`` while the queue exists (NotFound else); returns the count of ``prefix``'s."""
        return self._run(tenant, queue, "del", list(fields), prefix, 0)

    def _run(self, tenant: str, queue: str, action: str, args: list[str | int], prefix: str, most: int) -> int:
        tk, qk = queue_keys(tenant, queue)
        errors = self._shared.queue_errors(queue, TOOMANYFIELDS=lambda rest: QuotaExceeded(
            f"queue {queue} would hold {rest[0]} fields of {prefix!r}; at most {most}", queue=queue, limit=most,
            used=int(rest[0])))
        return int(self._shared.storage.run("queue_fields", docs_and_config(tk, qk), [action, prefix, most, *args],
                                            errors=errors))

