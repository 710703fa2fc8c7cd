"""The tenants' part of a ``/metrics`` scrape, built in a background thread that a scrape waits for
only so long.

Reading every queue of every tenant costs about 2 ms a tenant of ten queues: 20 s and more at
10,000 tenants, far past a Prometheus scrape's time-out (10 s by default), and the scrape would
fail every time. So a scrape starts a build (unless one is under way, which it joins) and waits
for it up to a deadline. A build not finished by then goes on, and the scrape answers with the last
finished one, whose age ``atomq_metrics_tenant_figures_age_seconds`` states; the next scrape finds
the new one. Where a build fits in the deadline, which is every platform of up to about a thousand
tenants here, every scrape is as fresh as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.core import Metric

log = logging.getLogger("atomq.metrics")


@dataclass
class _Build:
    started: float = field(default_factory=time.monotonic)
    finished: threading.Event = field(default_factory=threading.Event)
    figures: list[Metric] | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Figures:
    metrics: list[Metric]
    age_s: float
    """Since the build that read them began."""


class FigureBuilds:
    """Runs ``build`` in one background thread at a time and hands out its last result."""

    def __init__(self, build: Callable[[], list[Metric]]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._running: _Build | None = None
        self._last: _Build | None = None

    def latest(self, wait_s: float) -> Figures | None:
        """The figures of a build begun now or under way, if it finishes within ``wait_s``; else
        the last finished build's (None before the first). A build that fails while a scrape waits
        for it raises its error in the scrape (a store that is down answers 503, not old figures)."""
        with self._lock:
            run = self._running
            if run is None:
                run = self._running = _Build()
                threading.Thread(target=self._run, args=(run,), name="atomq-metrics-build", daemon=True).start()
        if run.finished.wait(wait_s):
            if run.error is not None:
                raise run.error
            assert run.figures is not None
            return Figures(run.figures, time.monotonic() - run.started)
        last = self._last
        if last is None or last.figures is None:
            log.warning("the tenants' figures take longer than %.1f s to read; they are left out of this "
                        "scrape and served by the next one", wait_s)
            return None
        return Figures(last.figures, time.monotonic() - last.started)

    def _run(self, run: _Build) -> None:
        try:
            run.figures = self._build()
        except BaseException as exc:  # handed to the scrapes that wait for this build
            run.error = exc
            log.warning("reading the tenants' figures failed: %r", exc)
        with self._lock:
            if run.figures is not None:
                self._last = run
            self._running = None
        run.finished.set()
