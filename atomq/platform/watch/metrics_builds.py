"""The tenants' part of a ``/metrics`` scrape, built in the background, kept in the store, and
waited for only so long.

Reading every queue of every tenant costs about 2 ms a tenant of ten queues: 20 s and more at
10,000 tenants, far past a Prometheus scrape's time-out (10 s by default), and the scrape would
fail every time. So a scrape asks for a build that begins after it arrived and waits for it up to a
deadline; past it, it answers with the last build in the store, whose age
``atomq_metrics_tenant_figures_age_seconds`` states, and the next scrape finds the new one.

The builds are kept in the store, not in each process: a node answers from several HTTP worker
processes, and a scrape reaching one that held an older build than the last scrape's would see
counters go back (Prometheus would take it for a reset). One build runs at a time across all
processes and nodes (a lease), a build is stored only over an older one, and every process serves
the newest stored. Where a build fits in the deadline, which is every platform of up to several
hundred tenants here, every scrape is as fresh as if it had read the store itself. A build of more
than a second is followed by the next only after five times as long (``PAUSE_FACTOR``), so that
the scrapes of a very large platform take a fifth of a core at most.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from atomq.platform.store import keys as k
from atomq.platform.store.lease import Lease
from atomq.platform.store.storage import Storage

log = logging.getLogger("atomq.metrics")

BUILD_LEASE = "metrics-build"
BUILD_LEASE_TTL_S = 300.0
"""A build that dies with its process holds the others back this long at most."""
PAUSE_FACTOR = 5
CHEAP_BUILD_S = 1.0
"""A build that took longer is followed by the next one only after ``PAUSE_FACTOR`` times as long:
Prometheus scraping every 15 s would otherwise keep a core reading every tenant (10,000 take 17.5 s
here). A cheaper build runs at every scrape, so that a scrape shows what came before it."""
POLL_S = 0.02


@dataclass
class _Build:
    finished: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


@dataclass(frozen=True)
class Figures:
    text: bytes
    """Prometheus text of the tenants' metric families."""
    age_s: float
    """Since the build that read them began."""


class FigureBuilds:
    """Builds (``build`` returns the families' text) under a lease, and hands out the newest stored."""

    def __init__(self, storage: Storage, build: Callable[[], bytes], holder: str) -> None:
        self._storage = storage
        self._build = build
        self._holder = holder
        self._lock = threading.Lock()
        self._running: _Build | None = None

    def latest(self, wait_s: float) -> Figures | None:
        """The figures of a build begun after this call, if one is stored within ``wait_s``; else the
        newest stored (None before the first). A build this process began for it that fails raises
        its error here (a store that is down answers 503, not old figures)."""
        asked_at = time.time()
        deadline = time.monotonic() + wait_s
        joined: _Build | None = None
        while True:
            started, took = self._stored_times()
            if started is not None and (started >= asked_at or (
                    took >= CHEAP_BUILD_S and asked_at - started < PAUSE_FACTOR * took)):
                break
            if joined is None or joined.finished.is_set():
                if joined is not None and joined.error is not None:
                    raise joined.error
                # None while another process builds; a build of this process that began before
                # this call and is stored now is too old: another is begun.
                joined = self._start_unless_running()
            if time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        text, started = self._storage.call(self._storage.client.hmget, k.METRICS_TENANT_FIGURES_KEY,
                                           ["text", "started_at"])
        if text is None or started is None:
            log.warning("the tenants' figures take longer than %.1f s to read; they are left out of this "
                        "scrape and served by the next one", wait_s)
            return None
        return Figures(text, max(0.0, time.time() - float(started)))

    def _stored_times(self) -> tuple[float | None, float]:
        """When the stored build began (None before the first), and how long it took."""
        started, took = self._storage.call(self._storage.client.hmget, k.METRICS_TENANT_FIGURES_KEY,
                                           ["started_at", "took_s"])
        return (None if started is None else float(started)), float(took or 0)

    def _start_unless_running(self) -> _Build | None:
        """This process's build under way, or one started now; None while another process builds
        (its build is stored when done)."""
        with self._lock:
            if self._running is not None and not self._running.finished.is_set():
                return self._running
            lease = Lease(self._storage, BUILD_LEASE, self._holder, BUILD_LEASE_TTL_S)
            if not lease.acquire():
                return None
            run = self._running = _Build()
            try:
                threading.Thread(target=self._run, args=(run, lease), name="atomq-metrics-build",
                                 daemon=True).start()
            except BaseException:
                lease.release()
                self._running = None
                raise
            return run

    def _run(self, run: _Build, lease: Lease) -> None:
        started = time.time()
        try:
            text = self._build()
            self._store(text, started, time.time() - started)
        except BaseException as exc:  # handed to the scrapes of this process that wait for it
            run.error = exc
            log.warning("reading the tenants' figures failed: %r", exc)
        finally:
            try:
                lease.release()
            except Exception as exc:  # it runs out by itself
                log.warning("could not release the lease of the metrics build: %r", exc)
            run.finished.set()

    def _store(self, text: bytes, started: float, took_s: float) -> None:
        """Stores the build unless a newer one is there (builds of two processes may overlap when a
        lease ran out)."""

        def replace(pipe: redis.client.Pipeline) -> None:
            stored = pipe.hget(k.METRICS_TENANT_FIGURES_KEY, "started_at")
            if stored is not None and float(stored) >= started:
                return
            pipe.multi()
            pipe.hset(k.METRICS_TENANT_FIGURES_KEY,
                      mapping={"text": text, "started_at": repr(started), "took_s": repr(took_s)})

        self._storage.call(self._storage.client.transaction, replace, k.METRICS_TENANT_FIGURES_KEY)
