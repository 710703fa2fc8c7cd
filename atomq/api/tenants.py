"""Tenants and their keys: ``/v1/tenants`` (runtime owner only)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask.views import MethodView

from atomq.api import links
from atomq.api.auth import require_owner
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.tenants import (
    KeyCreatedSchema,
    TenantCreatedSchema,
    TenantCreateSchema,
    TenantListSchema,
    TenantPatchSchema,
    TenantSchema,
    TenantUsageSchema,
)

blp = ApiBlueprint("tenants", __name__, url_prefix="/v1/tenants", description="Tenants (owner key)")


@blp.before_request
def owner_only() -> None:
    require_owner()


@blp.route("")
class Tenants(MethodView):
    @blp.arguments(TenantCreateSchema)
    @blp.response(201, TenantCreatedSchema)
    @blp.doc(**links.AFTER_TENANT_CREATED)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Creates a tenant and its first API key (shown only here)."""
        tenant, key_id, api_key = services().tenants.create(**body)
        return {**asdict(tenant), "key_id": key_id, "api_key": api_key}

    @blp.response(200, TenantListSchema)
    def get(self) -> dict[str, Any]:
        """Every tenant."""
        return {"tenants": [asdict(t) for t in services().tenants.list()]}


@blp.route("/<tenant_id>")
class TenantById(MethodView):
    @blp.response(200, TenantUsageSchema)
    def get(self, tenant_id: str) -> dict[str, Any]:
        """One tenant, with what it stores."""
        s = services()
        return {**asdict(s.tenants.get(tenant_id)), **s.queues.usage(tenant_id)}

    @blp.arguments(TenantPatchSchema, required=False)
    @blp.response(200, TenantSchema)
    def patch(self, body: dict[str, Any], tenant_id: str) -> dict[str, Any]:
        """Changes the tenant's name or attachments (rate limit, disk quota, Spark weight)."""
        return asdict(services().tenants.update(tenant_id, **body))

    @blp.response(204)
    def delete(self, tenant_id: str) -> None:
        """Removes the tenant, its keys (at once) and all its data."""
        services().tenants.delete(tenant_id)


@blp.route("/<tenant_id>/keys")
class Keys(MethodView):
    @blp.response(201, KeyCreatedSchema)
    def post(self, tenant_id: str) -> dict[str, str]:
        """Another API key for the tenant (shown only here)."""
        key_id, api_key = services().tenants.create_key(tenant_id)
        return {"key_id": key_id, "api_key": api_key}


@blp.route("/<tenant_id>/keys/<key_id>")
class KeyById(MethodView):
    @blp.response(204)
    def delete(self, tenant_id: str, key_id: str) -> None:
        """Revokes a key; it stops working at once on every node."""
        services().tenants.revoke_key(tenant_id, key_id)
