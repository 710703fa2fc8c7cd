"""The numbers a dashboard page shows, under the keys its script refreshes them by.

A page's template and its JSON endpoint take their numbers from the same
functions here, so what a page shows when it loads and what replaces it
every few seconds cannot drift apart. A template writes ``text[key]`` inside
an element marked ``data-live="<key>"`` and a ``<meter>`` marked
``data-live-meter="<key>"`` from ``meters[key]`` (used, limit); the script
(``static/dashboard.js``) sets them again from the endpoint's JSON.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from atomq.api.dashboard.formatting import count, duration, of_limit, per_minute, plural, size, when
from atomq.api.platform_view import TenantRow
from atomq.platform import QueueInfo, QueueModel
from atomq.platform.listeners.deployed import ExecutionBucket, Listener
from atomq.platform.models import DestinationCounts
from atomq.platform.watch.counters import RateBucket
from atomq.platform.watch.memory_state import refusal_rule
from atomq.tenants import Tenant
from atomq.workers.liveness import WorkerProblem

RATE_BUCKETS = 30
"""The chart's span: 30 buckets of 10 seconds, the last five minutes."""


@dataclass
class Figures:
    """Texts by key, and meters by key as ``[used, limit]`` (only where there is a limit)."""

    text: dict[str, str] = field(default_factory=dict)
    meters: dict[str, list[int]] = field(default_factory=dict)

    def add(self, other: Figures) -> Figures:
        self.text.update(other.text)
        self.meters.update(other.meters)
        return self

    def as_json(self) -> dict[str, Any]:
        return {"text": self.text, "meters": self.meters}


def server(state: dict[str, Any]) -> Figures:
    """The server's status (``atomq.api.server.server_state``): memory and stores against their limits."""
    f = Figures(text={
        "server.status": state["status"],
        "server.memory_state": state["memory_state"],
        "server.memory_rule": refusal_rule(state["memory_state"]),
        "server.memory_thresholds": ", ".join(f"{name} at {share * 100:.3g}%" for name, share
                                              in state["memory_thresholds"].items()) + " of the memory limit",
        "server.memory_history": " · ".join(f"{when(c['at'])} {c['state']}" for c in state["memory_history"][:5])
                                 or "no change recorded",
        "server.memory": of_limit(state["memory_bytes"], state["max_memory_bytes"]),
        "server.stored_messages": of_limit(state["stored_messages"], state["max_messages"], "count"),
        "server.message_store": of_limit(state["message_store_bytes"], state["max_disk_bytes"]),
        "server.temporary_store": size(state["temporary_store_bytes"]),
        "server.job_scheduler_store": size(state["job_scheduler_store_bytes"]),
        "server.incoming_rate_limit": per_minute(state["incoming_rate_limit_per_minute"]),
        "server.rate_limit_window": duration(state["rate_limit_window_s"]),
        "server.redelivery_delays": ", ".join(duration(d) for d in state["redelivery_delays_s"]),
        "server.document_retention": duration(state["document_retention_s"]),
        "server.dedupe_window": duration(state["dedupe_window_s"]),
    })
    if state["max_memory_bytes"]:
        f.meters["server.memory"] = [state["memory_bytes"], state["max_memory_bytes"]]
    if state["max_disk_bytes"]:
        f.meters["server.message_store"] = [state["message_store_bytes"], state["max_disk_bytes"]]
    if state["max_messages"]:
        f.meters["server.stored_messages"] = [state["stored_messages"], state["max_messages"]]
    return f


def workers(problems: Sequence[WorkerProblem]) -> Figures:
    """This node's execution workers: what keeps one from running (no Java runtime, say), else that they run."""
    return Figures(text={"server.workers": "; ".join(f"{p.engine} worker: {p.message}" for p in problems)
                         or "running"})


def tenant(t: Tenant, usage: dict[str, int]) -> Figures:
    """A tenant's usage (``QueueServer.usage``) against its quota and rate limit."""
    p = f"tenant.{t.id}."
    f = Figures(text={
        p + "stored": of_limit(usage["stored_bytes"], t.disk_quota_bytes),
        p + "messages": count(usage["messages"]),
        p + "rate_limit": per_minute(t.rate_limit_per_minute),
    })
    if t.disk_quota_bytes:
        f.meters[p + "stored"] = [usage["stored_bytes"], t.disk_quota_bytes]
    return f


QUEUE_TOTALS_SHOWN = ("sent", "acked", "dead_lettered", "expired", "superseded", "dropped")
"""The totals since a queue was created that its page shows (of ``counters.QUEUE_COUNTS``)."""


def queue(info: QueueInfo) -> Figures:
    """A queue's counts, its ready messages by priority, its totals, and each subscriber's
    counts for publish/subscribe."""
    p = f"queue.{info.name}."
    f = Figures(text={p + "depth": count(info.depth), p + "in_flight": count(info.in_flight),
                      p + "dead_letters": count(info.dead_letters), p + "delayed": count(info.delayed),
                      p + "by_priority": " · ".join(f"{prio}: {count(n)}" for prio, n
                                                    in info.depth_by_priority.items()) or "-"})
    f.text.update({f"{p}total.{kind}": count(info.totals.get(kind, 0)) for kind in QUEUE_TOTALS_SHOWN})
    f.text[p + "active_consumer"] = next((c.name for c in info.consumers if c.active), "none")
    f.text[p + "standby_consumers"] = ", ".join(c.name for c in info.consumers if not c.active) or "none"
    limits = info.limits
    # The limits hold per destination: the queue's own, or (publish/subscribe) each subscriber's.
    fills: dict[str, DestinationCounts] = {}
    if info.model is QueueModel.POINT_TO_POINT:
        fills[p] = DestinationCounts(info.depth, info.in_flight, info.dead_letters, held_bytes=info.held_bytes)
    for name, c in info.subscribers.items():
        s = f"{p}sub.{name}."
        f.text.update({s + "depth": count(c.depth), s + "in_flight": count(c.in_flight),
                       s + "dead_letters": count(c.dead_letters)})
        fills[s] = c
    for key, c in fills.items():
        held = c.depth + c.in_flight
        f.text[key + "held"] = of_limit(held, limits.max_messages, "count")
        f.text[key + "held_bytes"] = of_limit(c.held_bytes, limits.max_bytes)
        if limits.max_messages:
            f.meters[key + "held"] = [held, limits.max_messages]
        if limits.max_bytes:
            f.meters[key + "held_bytes"] = [c.held_bytes, limits.max_bytes]
    return f


def listener(item: Listener) -> Figures:
    p = f"listener.{item.name}."
    return Figures(text={p + "state": item.state, p + "executions": count(item.executions),
                         p + "failures": count(item.failures), p + "last_error": item.last_error or "-",
                         p + "outstanding": count(item.outstanding)})


def execution_rates(buckets: Sequence[ExecutionBucket]) -> list[dict[str, int]]:
    """Executions and failed ones per 10-second bucket, oldest first, for the listener's chart."""
    return [{"start": b.start, "executions": b.executions, "failures": b.failures} for b in buckets]


def rates(buckets: Sequence[RateBucket]) -> list[dict[str, int]]:
    """Send and ack counts per 10-second bucket, oldest first, for the chart."""
    return [{"start": b.start, "sent": b.sent, "acked": b.acked} for b in buckets]


def tenant_row(row: TenantRow) -> Figures:
    """A tenant's row of the overview, under ``tenant.<id>.`` keys."""
    p = f"tenant.{row.id}."
    s = row.sample
    if s is None:
        return Figures(text={p + key: "-" for key in ("traffic", "depth", "in_flight", "dead_letters", "stored",
                                                       "refused", "listeners")})
    states = ", ".join(f"{n} {state}" for state, n in s.listeners.items() if n) or "none"
    if s.executions_running:
        states += f"; {plural(s.executions_running, 'execution')} under way"
    f = Figures(text={
        p + "traffic": "-" if row.traffic is None else f"{row.traffic:,.1f}/s",
        p + "depth": count(s.depth),
        p + "in_flight": count(s.in_flight),
        p + "dead_letters": count(s.dead_letters),
        p + "stored": of_limit(s.stored_bytes, s.disk_quota_bytes),
        p + "refused": count(row.refused),
        p + "listeners": states,
    })
    if s.disk_quota_bytes:
        f.meters[p + "stored"] = [s.stored_bytes, s.disk_quota_bytes]
    return f


def oldest_waiting(info: QueueInfo, subscriber: str | None, sent_at: float | None) -> Figures:
    """How long the oldest waiting message (of ``subscriber``) has waited since its send."""
    if info.model is QueueModel.PUBLISH_SUBSCRIBE and subscriber is None:
        text = "-"
    elif sent_at is None:
        text = "none waiting"
    else:
        text = f"{duration(max(0, round(time.time() - sent_at)))} (sent {when(sent_at)})"
    return Figures(text={f"queue.{info.name}.oldest": text})
