"""What the owner's overview shows of the platform as a whole: every tenant ranked by what an
operator asks of it (who is loud, who is stuck, who is full), and the platform's message rates over
the last hour. Both come from the samples the maintenance lease holder keeps
(``atomq.platform.overview``): one read of the store, however many tenants there are.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atomq.api.dashboard.figures import Figures
from atomq.api.dashboard.formatting import count, of_limit
from atomq.platform.overview import HISTORY_S, OverviewStore, TenantSample, tenant_traffic
from atomq.tenants import Tenant

SHOWN = 100
"""Tenants the overview lists, the first by the chosen order; the rest are counted."""


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


ORDERS: dict[str, tuple[str, Callable[[TenantRow], Any]]] = {
    "traffic": ("traffic", lambda r: _number(r.traffic)),
    "depth": ("messages waiting", lambda r: r.sample.depth if r.sample else -1),
    "stuck": ("listeners that cannot run, then messages in flight",
              lambda r: (r.stuck, r.sample.in_flight) if r.sample else (-1, -1)),
    "dead_letters": ("dead letters", lambda r: r.sample.dead_letters if r.sample else -1),
    "full": ("stored bytes against the quota", lambda r: _number(r.sample.quota_share) if r.sample else -1),
    "refused": ("sends refused lately", lambda r: _number(r.refused)),
}
"""Each order of the tenants' table: its name in the page's words, and its key (highest first)."""


@dataclass(frozen=True)
class PlatformView:
    rows: list[TenantRow]
    """Every tenant, ranked."""
    sampled_at: float | None
    sample_every_s: float | None
    rates: list[dict[str, Any]]


def platform_view(store: OverviewStore, tenants: list[Tenant], order: str) -> PlatformView:
    latest, previous = store.latest()
    span = latest.at - previous.at if latest and previous else 0.0
    rows = []
    for t in tenants:
        now = latest.tenants.get(t.id) if latest else None
        before = previous.tenants.get(t.id) if previous else None
        refused = (sum(max(0, n - before.refused.get(kind, 0)) for kind, n in now.refused.items())
                   if now and before else None)
        rows.append(TenantRow(id=t.id, name=t.name, sample=now,
                              traffic=tenant_traffic(before, now, span) if now else None, refused=refused))
    rows.sort(key=lambda r: r.name)
    rows.sort(key=ORDERS[order][1], reverse=True)
    return PlatformView(rows=rows, sampled_at=latest.at if latest else None,
                        sample_every_s=span or None, rates=platform_rates(store))


def platform_rates(store: OverviewStore) -> list[dict[str, Any]]:
    """The platform's messages per second over each sampled interval of the last hour, for the chart."""
    return [{"at": r.at, "span_s": round(r.span_s, 1),
             "sent": r.per_s.get("sent", 0.0), "delivered": r.per_s.get("delivered", 0.0),
             "acked": r.per_s.get("acked", 0.0), "dead_lettered": r.per_s.get("dead_lettered", 0.0),
             "refused": sum(r.refused_per_s.values()),
             "refused_by_reason": {kind: n for kind, n in r.refused_per_s.items() if n}}
            for r in store.history(since=time.time() - HISTORY_S)]


def sample_age(sample_at: float | None) -> float | None:
    return None if sample_at is None else max(0.0, time.time() - sample_at)



def row_figures(row: TenantRow) -> Figures:
    """A tenant's row of the overview, under ``tenant.<id>.`` keys."""
    p = f"tenant.{row.id}."
    s = row.sample
    if s is None:
        return Figures(text={p + key: "-" for key in ("traffic", "depth", "in_flight", "dead_letters", "stored",
                                                       "refused", "listeners")})
    states = ", ".join(f"{n} {state}" for state, n in s.listeners.items() if n) or "none"
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
