"""Accounts, API keys and attachments (rate limit, disk quota): built on `atomq.platform`.

Use it as a library: ``TenantStore(redis_client, owner_key)``.
"""

from atomq.tenants.records import Principal, Tenant
from atomq.tenants.store import TenantStore

__all__ = ["Principal", "Tenant", "TenantStore"]
