"""The audit as an assertion: what ``atomq audit`` checks, at the end of each test on a real server."""

from __future__ import annotations

from typing import Any

from atomq.platform.store import keys as k
from atomq.platform.watch.audit import audit_tenant


def assert_audit_clean(client: Any, tenants: set[str] | None = None) -> None:
    """Every audited invariant holds for ``tenants`` (default: every tenant of the store)."""
    names = tenants if tenants is not None else {t.decode() for t in client.smembers(k.TENANTS_KEY)}
    found = {t: p for t in sorted(names) if (p := audit_tenant(client, t))}
    assert not found, f"atomq audit finds broken invariants: {found}"
