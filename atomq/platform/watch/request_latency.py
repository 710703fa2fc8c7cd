"""The API's request latency histogram, summed in one Redis hash over every process of every node.

Each API process exports its own deltas (see ``atomq.api.latency``), and a
scrape must show them all, so they are added up where every node reads:
``keys.REQUEST_LATENCY_KEY``, one field per series and part (a bucket's
index, ``sum`` or ``count``). A series is the tuple of its label values,
none of which holds ``|``, so a field names its series and part both ways.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage

Series = tuple[str, ...]
"""A series' label values, in the order of the API's labels."""


@dataclass(frozen=True)
class LatencyDelta:
    """What one process recorded for one series since its last export."""

    series: Series
    bucket_counts: Sequence[int]
    sum_s: float
    count: int


def series_field(series: Series, part: str) -> str:
    """The hash field of one series' bucket count, ``sum`` or ``count``."""
    return "|".join(series) + "|" + part


class RequestLatencyStore:
    """Adds deltas to the shared histogram, reads it whole, and forgets series."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def add(self, deltas: Iterable[LatencyDelta]) -> None:
        """Adds ``deltas`` in one round trip; each increment is atomic on its own, which is
        all a sum needs (StorageError when Redis fails: the exporter tries again next time)."""
        pipe = self._storage.client.pipeline(transaction=False)
        for delta in deltas:
            for i, n in enumerate(delta.bucket_counts):
                if n:
                    pipe.hincrby(k.REQUEST_LATENCY_KEY, series_field(delta.series, str(i)), n)
            pipe.hincrbyfloat(k.REQUEST_LATENCY_KEY, series_field(delta.series, "sum"), delta.sum_s)
            pipe.hincrby(k.REQUEST_LATENCY_KEY, series_field(delta.series, "count"), delta.count)
        self._storage.call(pipe.execute)

    def read(self) -> dict[Series, dict[str, float]]:
        """Every series held, each with its parts (bucket indexes, ``sum``, ``count``) and their values."""
        raw: dict[bytes, bytes] = self._storage.call(self._storage.client.hgetall, k.REQUEST_LATENCY_KEY)
        held: dict[Series, dict[str, float]] = {}
        for field, value in raw.items():
            *labels, part = field.decode().split("|")
            held.setdefault(tuple(labels), {})[part] = float(value)
        return held

    def forget(self, series: Mapping[Series, Iterable[str]]) -> None:
        """Drops the named parts of each series (those of a deleted tenant, so the hash
        does not grow with every tenant there ever was)."""
        fields = [series_field(s, part) for s, parts in series.items() for part in parts]
        if fields:
            self._storage.call(self._storage.client.hdel, k.REQUEST_LATENCY_KEY, *fields)
