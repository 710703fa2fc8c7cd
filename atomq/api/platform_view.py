"""The platform as a whole, as the owner's overview and ``GET /v1/server/overview`` show it: every
tenant ranked by what an operator asks of it (who is loud, who is stuck, who is full), and the
platform's message rates over the last hour. Both come from the samples the maintenance lease
holder keeps (``atomq.platform.watch.overview``), not from a read of every queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atomq.platform.watch.overview import HISTORY_S, TENANT_ORDERS, OverviewStore, TenantSample, tenant_traffic
from atomq.tenants import Tenant


@dataclass(frozen=True)
class TenantRow:
    id: str
    name: str
    sample: TenantSample | None
    """None for a tenant made since the last sample."""
    traffic: float | None
    refused: int | None
    """Sends refused over the last interval."""

    @property
    def stuck(self) -> int:
        """Listeners that cannot run (``waiting``, ``error``)."""
        s = self.sample
        return 0 if s is None else s.listeners.get("waiting", 0) + s.listeners.get("error", 0)


def _number(value: float | None) -> float:
    return -1.0 if value is None else value


_KEYS: dict[str, Callable[[TenantRow], Any]] = {
    "traffic": lambda r: _number(r.traffic),
    "depth": lambda r: r.sample.depth if r.sample else -1,
    "stuck": lambda r: (r.stuck, r.sample.in_flight) if r.sample else (-1, -1),
    "dead_letters": lambda r: r.sample.dead_letters if r.sample else -1,
    "full": lambda r: _number(r.sample.quota_share) if r.sample else -1,
    "refused": lambda r: _number(r.refused),
}
ORDERS: dict[str, tuple[str, Callable[[TenantRow], Any]]] = {
    name: (words, _KEYS[name]) for name, words in TENANT_ORDERS.items()}
"""Each order of the tenants' table: its name in the page's words, and its key (highest first)."""


@dataclass(frozen=True)
class PlatformView:
    rows: list[TenantRow]
    """Every tenant, ranked."""
    sampled_at: float | None
    interval_s: float | None
    rates: list[dict[str, Any]]


def platform_view(store: OverviewStore, tenants: list[Tenant] | None, order: str) -> PlatformView:
    """``tenants`` ranked by ``order``, with their figures at the last sample; None: the tenants of
    that sample (what a page's refresh every few seconds reads, instead of every tenant's record)."""
    latest, previous = store.latest()
    span = latest.at - previous.at if latest and previous else 0.0
    named = ([(t.id, t.name) for t in tenants] if tenants is not None
             else [(tid, t.name) for tid, t in latest.tenants.items()] if latest else [])
    rows = []
    for tenant_id, name in named:
        now = latest.tenants.get(tenant_id) if latest else None
        before = previous.tenants.get(tenant_id) if previous else None
        refused = (sum(max(0, n - before.refused.get(kind, 0)) for kind, n in now.refused.items())
                   if now and before else None)
        rows.append(TenantRow(id=tenant_id, name=name, sample=now,
                              traffic=tenant_traffic(before, now, span) if now else None, refused=refused))
    rows.sort(key=lambda r: r.name)
    rows.sort(key=ORDERS[order][1], reverse=True)
    return PlatformView(rows=rows, sampled_at=latest.at if latest else None,
                        interval_s=span or None, rates=platform_rates(store))


def platform_rates(store: OverviewStore) -> list[dict[str, Any]]:
    """The platform's messages per second over each sampled interval of the last hour, for the chart."""
    return [{"at": r.at, "span_s": r.span_s,
             "sent": r.per_s.get("sent", 0.0), "delivered": r.per_s.get("delivered", 0.0),
             "acked": r.per_s.get("acked", 0.0), "dead_lettered": r.per_s.get("dead_lettered", 0.0),
             "refused": sum(r.refused_per_s.values()),
             "refused_by_reason": {kind: n for kind, n in r.refused_per_s.items() if n}}
            for r in store.history(since=time.time() - HISTORY_S)]


def sample_age(sample_at: float | None) -> float | None:
    return None if sample_at is None else max(0.0, time.time() - sample_at)


