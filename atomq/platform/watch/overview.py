"""The platform as a whole, sampled: every tenant's figures now, and the platform's totals over the
last hour, for the owner's overview.

Who is loud, who is stuck and who is full is a question about every tenant at once, and the
platform's message rates are sums over every queue. Reading all of that for each page view (and
again every few seconds while the page is open) would cost a read of every queue per view, and a
view per operator. So one process, the holder of the maintenance lease, reads it in the background
every ``SAMPLE_EVERY_S`` at least, and keeps it in the store, where every node's dashboard reads
one value:

- the latest sample (every tenant's depth, in flight, dead letters, usage against its quota,
  listener states, the totals its scripts count and its refusals) and the one before it, which
  each tenant's rates are reckoned against;
- the history: the platform's totals of every sample over the last hour, whose differences are
  the rates the overview charts.

The totals are the scripts' own counters (``counters.QUEUE_COUNTS``, ``counters.REFUSALS``), so the
rates are exact over each interval, whichever process did the work. A read takes about 2 ms a
tenant of ten queues, so the interval grows with it (``PAUSE_FACTOR`` times the last read): the
sampling never takes more than a tenth of one core.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from atomq.errors import NotFound
from atomq.platform.listeners.deployed import STATES as LISTENER_STATES
from atomq.platform.listeners.deployed import ListenerStore
from atomq.platform.queue_server import QueueServer
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage
from atomq.platform.store.stored_form import known_fields
from atomq.platform.watch.counters import QUEUE_COUNTS, REFUSALS

log = logging.getLogger("atomq.overview")

_parsed: dict[str, object] = {}
"""The samples this process parsed last, by store client and sample time (``OverviewStore.latest``)."""
_parsed_lock = threading.Lock()

SAMPLE_EVERY_S = 10.0
PAUSE_FACTOR = 10
"""The pause after a read is at least this many times the read's own time."""
HISTORY_S = 3600
HISTORY_LENGTH = int(HISTORY_S / SAMPLE_EVERY_S)
MIN_INTERVAL_S = 1.0
"""The shortest interval between two samples whose rates the history gives."""
TENANT_ORDERS = {
    "traffic": "traffic",
    "depth": "messages waiting",
    "stuck": "listeners that cannot run, then messages in flight",
    "dead_letters": "dead letters",
    "full": "stored bytes against the quota",
    "refused": "sends refused lately",
}
"""The orders the tenants are ranked in (``atomq.api.platform_view``), in an operator's words."""


@dataclass
class TenantSample:
    name: str
    depth: int = 0
    in_flight: int = 0
    dead_letters: int = 0
    queues: int = 0
    stored_bytes: int = 0
    stored_messages: int = 0
    disk_quota_bytes: int = 0
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(QUEUE_COUNTS, 0))
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSALS, 0))
    listeners: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LISTENER_STATES, 0))
    executions_running: int = 0

    @property
    def quota_share(self) -> float | None:
        """Stored bytes as a share of the quota; None without a quota."""
        return self.stored_bytes / self.disk_quota_bytes if self.disk_quota_bytes else None


@dataclass
class Sample:
    at: float
    read_s: float
    tenants: dict[str, TenantSample]

    def totals(self) -> dict[str, int]:
        return {kind: sum(t.totals.get(kind, 0) for t in self.tenants.values()) for kind in QUEUE_COUNTS}

    def refused(self) -> dict[str, int]:
        return {kind: sum(t.refused.get(kind, 0) for t in self.tenants.values()) for kind in REFUSALS}

    def to_json(self) -> str:
        return json.dumps({"at": self.at, "read_s": self.read_s,
                           "tenants": {tid: asdict(t) for tid, t in self.tenants.items()}})

    @classmethod
    def from_json(cls, raw: bytes | str) -> Sample | None:
        """The sample, or None for one this version cannot read. A field another version added is
        left out and one it dropped keeps its default, so nodes of two versions share samples."""
        try:
            data = json.loads(raw)
            tenants = {}
            for tid, t in data["tenants"].items():
                tenants[tid] = TenantSample(**{"name": tid, **known_fields(TenantSample, t)})
            return cls(at=float(data["at"]), read_s=float(data.get("read_s", 0.0)), tenants=tenants)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("a sample of the platform this version cannot read is left out: %r", exc)
            return None


@dataclass(frozen=True)
class Point:
    """The platform's totals at one sample."""

    at: float
    totals: dict[str, int]
    refused: dict[str, int]

    @classmethod
    def from_json(cls, raw: bytes) -> Point | None:
        try:
            data = json.loads(raw)
            return cls(at=float(data["at"]), totals=dict(data.get("totals", {})), refused=dict(data.get("refused", {})))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("a point of the platform's history this version cannot read is left out: %r", exc)
            return None


@dataclass(frozen=True)
class Rates:
    """Per second over the interval ending at ``at``: each total's rise, and the refusals'."""

    at: float
    span_s: float
    per_s: dict[str, float]
    refused_per_s: dict[str, float]


def rates_between(before: Point, after: Point) -> Rates:
    """A counter that fell (its tenant or queue was deleted meanwhile) counts as no rise."""
    span = max(after.at - before.at, 1e-9)
    return Rates(at=after.at, span_s=span,
                 per_s={kind: max(0, n - before.totals.get(kind, 0)) / span for kind, n in after.totals.items()},
                 refused_per_s={kind: max(0, n - before.refused.get(kind, 0)) / span
                                for kind, n in after.refused.items()})


def tenant_traffic(before: TenantSample | None, after: TenantSample, span_s: float) -> float | None:
    """Messages sent and delivered per second by one tenant over the last interval; None for a
    tenant the earlier sample did not have."""
    if before is None or span_s <= 0:
        return None
    rise = sum(max(0, after.totals.get(kind, 0) - before.totals.get(kind, 0)) for kind in ("sent", "delivered"))
    return rise / span_s


class Sampler:
    """Reads every tenant's figures through the calls the API uses (no reads of its own)."""

    def __init__(self, queues: QueueServer, tenants: Callable[[], Iterable[Any]], listeners: ListenerStore) -> None:
        self._queues = queues
        self._tenants = tenants
        self._listeners = listeners

    def read(self) -> Sample:
        started = time.monotonic()
        out: dict[str, TenantSample] = {}
        for tenant in self._tenants():
            try:
                out[tenant.id] = self._tenant(tenant)
            except NotFound:  # deleted while the sample was read
                continue
        return Sample(at=time.time(), read_s=time.monotonic() - started, tenants=out)

    def _tenant(self, tenant: Any) -> TenantSample:
        t = TenantSample(name=tenant.name, disk_quota_bytes=tenant.disk_quota_bytes)
        usage = self._queues.usage(tenant.id)
        t.stored_bytes, t.stored_messages = usage["stored_bytes"], usage["messages"]
        t.refused.update(self._queues.counters.refusals(tenant.id))
        for q in self._queues.list_queues(tenant.id):
            t.queues += 1
            t.depth += q.depth
            t.in_flight += q.in_flight
            t.dead_letters += q.dead_letters
            for kind, n in q.totals.items():
                t.totals[kind] = t.totals.get(kind, 0) + n
        for li in self._listeners.of_tenant(tenant.id):
            t.listeners[li.state] = t.listeners.get(li.state, 0) + 1
            t.executions_running += li.outstanding
        return t


class OverviewStore:
    """The samples in the store: the latest two whole, the platform's totals over the last hour."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def record(self, sample: Sample) -> None:
        point = json.dumps({"at": sample.at, "totals": sample.totals(), "refused": sample.refused()})
        client = self._storage.client

        def write() -> None:
            previous = client.get(k.OVERVIEW_LATEST_KEY)
            with client.pipeline(transaction=True) as pipe:  # one hash tag: one slot on a cluster
                if previous is not None:
                    pipe.set(k.OVERVIEW_PREVIOUS_KEY, previous)
                pipe.set(k.OVERVIEW_LATEST_KEY, sample.to_json())
                pipe.lpush(k.OVERVIEW_HISTORY_KEY, point)
                pipe.ltrim(k.OVERVIEW_HISTORY_KEY, 0, HISTORY_LENGTH - 1)
                pipe.execute()

        self._storage.call(write)

    def latest(self) -> tuple[Sample | None, Sample | None]:
        """The latest sample and the one before it (None where there is none yet). Parsed once a
        sample in each process: a page refreshed every few seconds reads a small value until the
        next sample (the two of 10,000 tenants are about 5 MB of JSON)."""
        newest = self._storage.call(self._storage.client.lindex, k.OVERVIEW_HISTORY_KEY, 0)
        point = Point.from_json(newest) if newest else None
        key = (id(self._storage.client), point.at if point else None)
        with _parsed_lock:
            if point is not None and _parsed.get("key") == key:
                return _parsed["samples"]  # type: ignore[return-value]
        latest, previous = self._storage.call(self._storage.client.mget, k.OVERVIEW_LATEST_KEY,
                                              k.OVERVIEW_PREVIOUS_KEY)
        samples = (Sample.from_json(latest) if latest else None, Sample.from_json(previous) if previous else None)
        with _parsed_lock:
            _parsed.update(key=key, samples=samples)
        return samples

    def history(self, since: float) -> list[Rates]:
        """The platform's rates over each interval of at least ``MIN_INTERVAL_S`` that ended after
        ``since``, oldest first. Two samples closer than that (two processes that both held the
        lease for a moment as it changed hands, or a clock set back) would make an interval so
        short that its rates are noise: the later is left out."""
        raw = self._storage.call(self._storage.client.lrange, k.OVERVIEW_HISTORY_KEY, 0, -1)
        out: list[Rates] = []
        before: Point | None = None
        for point in filter(None, (Point.from_json(item) for item in reversed(raw))):
            if before is None or point.at - before.at >= MIN_INTERVAL_S:
                if before is not None and point.at > since:
                    out.append(rates_between(before, point))
                before = point
        return out


def run_sampler(sampler: Sampler, store: OverviewStore, holds_lease: Callable[[], bool],
                stop: threading.Event, every_s: float = SAMPLE_EVERY_S) -> None:
    """Samples every ``every_s`` at least while ``holds_lease()`` says this process holds the
    maintenance lease, until ``stop``. An error is logged once a minute at most, and the next
    round tries again."""
    pause = every_s
    last_warning = 0.0
    while not stop.is_set():
        try:
            if holds_lease():
                sample = sampler.read()
                if holds_lease():  # a read takes seconds: the lease may have gone meanwhile
                    store.record(sample)
                pause = max(every_s, PAUSE_FACTOR * sample.read_s)
        except Exception as exc:  # the overview waits for the next round; the node goes on
            if time.monotonic() - last_warning > 60:
                last_warning = time.monotonic()
                log.warning("could not sample the platform for the overview: %r", exc)
        stop.wait(pause)
