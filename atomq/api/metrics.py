"""``GET /metrics``: the platform in Prometheus text.

Two kinds of figures, kept where every node can read them:

- what the scripts count and Redis holds (queue depths and counters, tenant
  usage and refusals, listener executions, the stores' sizes) is the same
  whichever node reads it, so only the node holding the maintenance lease
  exports it; otherwise a Prometheus that scrapes every node would add the
  figures up once per node. ``atomq_metrics_exporter`` says which node does.
- request latency is recorded by each process's OpenTelemetry histogram and
  summed in Redis (``atomq.api.latency``); the exporting node serves it too.

The tenants' figures and the latency are read in a background build that a
scrape waits for only ``METRICS_WAIT_S`` (``atomq.platform.watch.metrics_builds``): with
thousands of tenants, the scrape answers in time with the last build's figures.

prometheus_client writes the text format: the SDK's own Prometheus reader
shows only the process it runs in and has no way to render a histogram
summed elsewhere. Label sets stay bounded: the first ``METRICS_MAX_TENANTS``
tenants (by id) and the first ``METRICS_MAX_QUEUES`` queues and listeners of
each (by name) get series of their own; the rest are added up under
``other``.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from flask import Blueprint, Response, current_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from atomq import defaults
from atomq.api.auth import METRICS_PUBLIC, require_owner
from atomq.api.latency import BOUNDS_S, LABELS, LatencyRecorder
from atomq.api.server import server_state
from atomq.api.services import Services
from atomq.platform.store import keys as k
from atomq.platform.store import lease
from atomq.platform.watch.counters import QUEUE_COUNTS, REFUSALS
from atomq.platform.watch.memory_state import STATES as MEMORY_STATES
from atomq.platform.watch.metrics_builds import FigureBuilds
from atomq.platform.watch.request_latency import RequestLatencyStore
from atomq.tenants.records import Tenant

blp = Blueprint("metrics", __name__)

METRICS_MAX_TENANTS = "METRICS_MAX_TENANTS"
METRICS_MAX_QUEUES = "METRICS_MAX_QUEUES"
METRICS_WAIT_S = "METRICS_WAIT_S"
BUILDS_EXTENSION = "atomq_metrics_builds"
OTHER = "other"

QUEUE_GAUGES = {
    "depth": "Messages waiting: ready, or scheduled (for redelivery, or delayed by their send)",
    "in_flight": "Messages delivered and not yet acked or nacked",
    "scheduled": "Messages waiting out a delay: a redelivery's or their send's (part of the depth)",
    "delayed": "Messages never delivered yet, waiting out their send's delay (part of the scheduled)",
    "dead_letters": "Messages in the dead letter queue",
    "held_bytes": "Bytes of the messages neither acked nor dead: what the queue's max_bytes holds",
    "groups": "Groups of a queue ordered by group with a message out (ready, in flight or awaiting redelivery)",
    "held_by_group": "Messages waiting behind an earlier one of their group (part of the depth)",
}
QUEUE_COUNTERS = {
    "sent": ("atomq_messages_sent", "Messages stored by sends (a repeated de-duplication id is not)"),
    "delivered": ("atomq_messages_delivered", "Deliveries by gets and listeners, first ones and redeliveries"),
    "redelivered": ("atomq_messages_redelivered", "Deliveries of a message delivered before"),
    "acked": ("atomq_messages_acked", "Deliveries acked"),
    "nacked": ("atomq_messages_nacked", "Deliveries nacked"),
    "dead_lettered": ("atomq_messages_dead_lettered", "Messages moved to the dead letter queue"),
    "ack_timeouts": ("atomq_ack_timeouts", "Deliveries whose ack time-out ran out (failed deliveries)"),
    "expired": ("atomq_messages_expired", "Messages whose time to live ran out (dead-lettered or discarded)"),
    "superseded": ("atomq_messages_superseded", "Messages of a last-value queue replaced by a newer one of their key"),
    "dropped": ("atomq_messages_dropped", "Messages a full queue dropped to make room (its overflow behaviour)"),
    "moved": ("atomq_messages_moved", "Messages move tasks took out of the queue, to their sources or another queue"),
}
REFUSAL_COUNTERS = {
    "rate_limited": ("atomq_sends_rate_limited", "Sends refused by a rate-limit window (429)"),
    "quota_rejected": ("atomq_sends_quota_rejected", "Sends refused by the tenant's disk quota (507)"),
    "queue_full": ("atomq_sends_queue_full", "Sends refused by a queue's limit (507), or held by a flow_control "
                                             "queue until its wait ran out (429)"),
    "server_full": ("atomq_sends_server_full", "Sends refused by the server's limits on stored bytes and "
                                               "messages (507)"),
    "memory_low": ("atomq_sends_memory_low", "Sends refused by the memory state (503)"),
    "too_many_copies": ("atomq_sends_too_many_copies", "Sends that would store more message copies than "
                        "max_copies_per_request (413)"),
    "not_durable": ("atomq_sends_not_durable", "Sends to a sync queue not synced to disk (or replicas) in "
                                               "time: stored, answered 503"),
}


@blp.before_request
def owner_unless_public() -> None:
    if not current_app.config.get(METRICS_PUBLIC):
        require_owner()


@blp.get("/metrics")
def metrics() -> Response:
    """The platform's metrics in Prometheus text (owner key, or public with ``--metrics-public``)."""
    services: Services = current_app.extensions["atomq"]
    recorder: LatencyRecorder | None = current_app.extensions.get("atomq_latency")
    if recorder is not None:
        recorder.flush()
    registry = CollectorRegistry(auto_describe=False)
    collector = PlatformCollector(services, _builds(), current_app.config.get(METRICS_WAIT_S, defaults.METRICS_WAIT_S))
    registry.register(collector)
    return Response(generate_latest(registry) + collector.tenant_text, content_type=CONTENT_TYPE_LATEST)


_making_builds = threading.Lock()


def _builds() -> FigureBuilds:
    """The app's builds of the tenants' figures, made at its first scrape."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    with _making_builds:
        builds: FigureBuilds | None = app.extensions.get(BUILDS_EXTENSION)
        if builds is None:
            services: Services = app.extensions["atomq"]

            def build() -> bytes:
                return _text(TenantFigures(services, app.config.get(METRICS_MAX_TENANTS, defaults.METRICS_MAX_TENANTS),
                                           app.config.get(METRICS_MAX_QUEUES, defaults.METRICS_MAX_QUEUES)).read())

            builds = app.extensions[BUILDS_EXTENSION] = FigureBuilds(
                services.queues.storage, build, f"{services.node_id}:{os.getpid()}")
        return builds


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _text(families: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def exports_shared_figures(services: Services) -> bool:
    """Whether this node holds the maintenance lease (held as ``<node id>:<pid>`` by one of its processes)."""
    return lease.holder_node(services.queues.storage, k.MAINTENANCE_LEASE) == services.node_id


class _Capped:
    """Gives the first ``cap`` names (in sorted order) labels of their own, the rest ``other``."""

    def __init__(self, names: Iterable[str], cap: int) -> None:
        self._own = set(sorted(names)[:cap])

    def __call__(self, name: str) -> str:
        return name if name in self._own else OTHER


class PlatformCollector(Collector):
    """The server's figures read at scrape time; the tenants' come from the builds as text
    (``tenant_text``, set by ``collect``), which the scrape appends."""

    def __init__(self, services: Services, builds: FigureBuilds, wait_s: float) -> None:
        self._s = services
        self._builds = builds
        self._wait_s = wait_s
        self.tenant_text = b""

    def collect(self) -> Iterator[Metric]:
        exporting = exports_shared_figures(self._s)
        flag = GaugeMetricFamily("atomq_metrics_exporter", "1 on the node that exports the shared figures",
                                 labels=["node"])
        flag.add_metric([self._s.node_id], 1 if exporting else 0)
        yield flag
        if exporting:
            yield from self._server()
            figures = self._builds.latest(self._wait_s)
            if figures is not None:
                yield GaugeMetricFamily("atomq_metrics_tenant_figures_age_seconds",
                                        "Time since the read of the tenants' figures (and the request "
                                        "latency) served here began", value=round(figures.age_s, 3))
                self.tenant_text = figures.text

    def _server(self) -> Iterator[Metric]:
        state = server_state(self._s)
        yield GaugeMetricFamily("atomq_server_up", "1 while the server is ok, 0 while degraded",
                                value=1 if state["status"] == "ok" else 0)
        memory = GaugeMetricFamily("atomq_memory_state", "The memory state: 1 for the current one",
                                   labels=["state"])
        for name in MEMORY_STATES:
            memory.add_metric([name], 1 if state["memory_state"] == name else 0)
        yield memory
        changes = CounterMetricFamily("atomq_memory_state_changes", "Changes of the memory state, by the state "
                                      "entered (recorded once however many nodes see them)", labels=["state"])
        for name, n in self._s.memory.changes().items():
            changes.add_metric([name], n)
        yield changes
        for field, text in (
            ("message_store_bytes", "Messages and documents held in queues and dead letter queues"),
            ("temporary_store_bytes", "State kept only while work is under way"),
            ("job_scheduler_store_bytes", "The redelivery schedule and the execution job queues"),
            ("memory_bytes", "Memory Redis uses"),
            ("max_memory_bytes", "Redis's maxmemory (0: none)"),
            ("max_disk_bytes", "The server's disk limit (0: none)"),
            ("stored_messages", "Message copies all tenants store, dead letters included"),
            ("max_messages", "The server's limit on stored message copies (0: none)"),
            ("incoming_rate_limit_per_minute", "Sends a node takes per window (0: no limit)"),
        ):
            if state.get(field) is not None:
                yield GaugeMetricFamily(f"atomq_{field}", text, value=state[field])


class TenantFigures:
    """Every tenant's figures, with series of their own up to the caps, and the request latency."""

    def __init__(self, services: Services, max_tenants: int, max_queues: int) -> None:
        self._s = services
        self._max_tenants = max_tenants
        self._max_queues = max_queues

    def read(self) -> list[Metric]:
        tenants = self._s.tenants.list()
        tenant_label = _Capped((t.id for t in tenants), self._max_tenants)
        return [*self._tenants(tenants, tenant_label), *self._latency({t.id for t in tenants}, tenant_label)]

    def _tenants(self, tenants: list[Tenant], tenant_label: _Capped) -> Iterator[Metric]:
        s = self._s
        info = GaugeMetricFamily("atomq_tenant_info", "A tenant's name", labels=["tenant", "name"])
        tenant_gauges: dict[str, defaultdict[str, float]] = {
            name: defaultdict(float) for name in ("stored_bytes", "stored_messages", "disk_quota_bytes",
                                                  "rate_limit_per_minute")}
        refusals: dict[str, defaultdict[str, float]] = {kind: defaultdict(float) for kind in REFUSALS}
        queue_gauges: dict[str, defaultdict[tuple[str, str], float]] = {n: defaultdict(float) for n in QUEUE_GAUGES}
        queue_counts: dict[str, defaultdict[tuple[str, str], float]] = {n: defaultdict(float) for n in QUEUE_COUNTS}
        listener_counts: dict[str, defaultdict[tuple[str, str], float]] = {
            "executions": defaultdict(float), "failures": defaultdict(float), "running": defaultdict(float)}
        moves_running: defaultdict[tuple[str, str], float] = defaultdict(float)
        for t in tenants:
            tl = tenant_label(t.id)
            if tl != OTHER:
                info.add_metric([t.id, t.name], 1)
            usage = s.queues.usage(t.id)
            tenant_gauges["stored_bytes"][tl] += usage["stored_bytes"]
            tenant_gauges["stored_messages"][tl] += usage["messages"]
            tenant_gauges["disk_quota_bytes"][tl] += t.disk_quota_bytes
            tenant_gauges["rate_limit_per_minute"][tl] += t.rate_limit_per_minute
            for kind, n in s.queues.counters.refusals(t.id).items():
                refusals[kind][tl] += n
            queues = s.queues.list_queues(t.id)
            queue_label = _Capped((q.name for q in queues), self._max_queues if tl != OTHER else 0)
            running = s.queues.running_move_tasks(t.id)
            for q in queues:
                key = (tl, queue_label(q.name))
                moves_running[key] += 1 if q.name in running else 0
                for name in QUEUE_GAUGES:
                    queue_gauges[name][key] += getattr(q, name)
                for kind, n in q.totals.items():
                    queue_counts[kind][key] += n
            listeners = s.listeners.of_tenant(t.id)
            listener_label = _Capped((li.name for li in listeners), self._max_queues if tl != OTHER else 0)
            for li in listeners:
                key = (tl, listener_label(li.name))
                listener_counts["executions"][key] += li.executions
                listener_counts["failures"][key] += li.failures
                listener_counts["running"][key] += 1 if li.state == "running" else 0
        yield info
        for name, values in tenant_gauges.items():
            yield _family(GaugeMetricFamily, f"atomq_tenant_{name}", f"The tenant's {name.replace('_', ' ')}",
                          ["tenant"], {(t,): v for t, v in values.items()})
        for kind, (name, text) in REFUSAL_COUNTERS.items():
            yield _family(CounterMetricFamily, name, text, ["tenant"], {(t,): v for t, v in refusals[kind].items()})
        for name, text in QUEUE_GAUGES.items():
            yield _family(GaugeMetricFamily, f"atomq_queue_{name}", text, ["tenant", "queue"], queue_gauges[name])
        for kind, (name, text) in QUEUE_COUNTERS.items():
            yield _family(CounterMetricFamily, name, text, ["tenant", "queue"], queue_counts[kind])
        yield _family(GaugeMetricFamily, "atomq_move_tasks_running", "Move tasks running from the queue (0 or 1)",
                      ["tenant", "queue"], moves_running)
        yield _family(CounterMetricFamily, "atomq_listener_executions", "Executions a listener finished",
                      ["tenant", "listener"], listener_counts["executions"])
        yield _family(CounterMetricFamily, "atomq_listener_failures", "Executions that failed",
                      ["tenant", "listener"], listener_counts["failures"])
        yield _family(GaugeMetricFamily, "atomq_listener_running", "1 while the listener is running (not paused or in error)",
                      ["tenant", "listener"], listener_counts["running"])

    def _latency(self, tenant_ids: set[str], tenant_label: _Capped) -> Iterator[Metric]:
        store = RequestLatencyStore(self._s.queues.storage)
        recorded = store.read()
        series: defaultdict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
        unknown = {labels[0] for labels in recorded} - tenant_ids - {""}
        # A deleted tenant's series are dropped, so the hash does not grow with every tenant there ever was.
        deleted = {t for t in unknown if not self._s.tenants.exists(t)}
        gone: dict[tuple[str, ...], dict[str, float]] = {}
        for labels, parts in recorded.items():
            if labels[0] in deleted:
                gone[labels] = parts
                continue
            held = series[(tenant_label(labels[0]) if labels[0] else "", *labels[1:])]
            for part, value in parts.items():
                held[part] = held.get(part, 0) + value
        family = HistogramMetricFamily("atomq_request_duration_seconds", "Time to answer an API request",
                                       labels=list(LABELS))
        for labels, held in sorted(series.items()):
            cumulative, buckets = 0.0, []
            for i, bound in enumerate((*BOUNDS_S, float("inf"))):
                cumulative += held.get(str(i), 0)
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            family.add_metric(list(labels), buckets, sum_value=held.get("sum", 0.0))
        yield family
        store.forget(gone)


def _family(cls: type[GaugeMetricFamily | CounterMetricFamily], name: str, text: str, labels: list[str],
            values: dict[Any, float]) -> Metric:
    family = cls(name, text, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family
