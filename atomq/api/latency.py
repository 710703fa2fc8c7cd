"""Request latency: an OpenTelemetry histogram per process, summed in Redis.

``atomq serve`` answers from several worker processes on several nodes, and
the SDK's Prometheus reader sees only the process it runs in, so a scrape
would show one worker's share. Each process therefore records into its own
MeterProvider, whose periodic reader hands the delta of every few seconds
to :class:`RedisHistogramExporter`; that adds it to one Redis hash
(``atomq.platform.watch.request_latency``), which the metrics endpoint reads
whole. A process's last few seconds reach Redis at its next export, at a
scrape it answers, or when it exits.

A label takes only values the server knows (methods of HTTP, routes of the
app): whatever a client invents adds no series.
"""

from __future__ import annotations

import re
import time
from typing import Any

from flask import Flask, g, request
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

from atomq.errors import StorageError
from atomq.platform.store.storage import Storage
from atomq.platform.watch.request_latency import LatencyDelta, RequestLatencyStore

INSTRUMENT = "atomq.request.duration"
BOUNDS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)
"""Histogram bucket bounds in seconds; the top ones are for long-polling gets (up to 20 s)."""
EXPORT_INTERVAL_MS = 5000
LABELS = ("tenant", "method", "route")
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"
"""The ``method`` label of every request whose method is not in KNOWN_METHODS."""
_RULE_ARG = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


def route_label(rule: str) -> str:
    """A URL rule as the OpenAPI path it documents: ``/v1/queues/<qname:name>`` → ``/v1/queues/{name}``."""
    return _RULE_ARG.sub(r"{\1}", rule)


def method_label(method: str) -> str:
    """The ``method`` label of a request: its method if HTTP defines it for this API, else ``other``."""
    return method if method in KNOWN_METHODS else OTHER_METHOD


class RedisHistogramExporter(MetricExporter):
    """Adds each export's delta of the latency histogram to the shared hash."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(preferred_temporality={Histogram: AggregationTemporality.DELTA})
        self._store = RequestLatencyStore(storage)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        deltas = [
            LatencyDelta(tuple(str((point.attributes or {}).get(name, "")) for name in LABELS),
                         point.bucket_counts, point.sum, point.count)
            for resource in metrics_data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
            if isinstance(point, HistogramDataPoint) and point.count]
        try:
            self._store.add(deltas)
        except StorageError:
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


class LatencyRecorder:
    """Times every request of one app into the process's histogram."""

    def __init__(self, storage: Storage) -> None:
        self._reader = PeriodicExportingMetricReader(RedisHistogramExporter(storage),
                                                     export_interval_millis=EXPORT_INTERVAL_MS)
        self._provider = MeterProvider(metric_readers=[self._reader], views=[
            View(instrument_name=INSTRUMENT, aggregation=ExplicitBucketHistogramAggregation(BOUNDS_S))])
        self._histogram = self._provider.get_meter("atomq").create_histogram(
            INSTRUMENT, unit="s", description="Time to answer an API request")

    def install(self, app: Flask) -> None:
        app.before_request(self._start)
        app.after_request(self._finish)

    @staticmethod
    def _start() -> None:
        g.atomq_started = time.perf_counter()

    def _finish(self, response: Any) -> Any:
        started = g.pop("atomq_started", None)
        if started is not None:
            rule = request.url_rule
            self.record(time.perf_counter() - started, g.get("atomq_tenant") or "", request.method,
                        route_label(rule.rule) if rule is not None else "")
        return response

    def record(self, seconds: float, tenant: str, method: str, route: str) -> None:
        """Counts one request that took ``seconds`` to answer; ``route`` as ``route_label`` spells it."""
        self._histogram.record(seconds, {"tenant": tenant, "method": method_label(method), "route": route})

    def flush(self) -> None:
        """Hands this process's unexported share to Redis now (a scrape answered here is then current for it)."""
        self._reader.force_flush()
