"""Tenants and their keys: ``/v1/tenants`` (runtime owner only)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask.views import MethodView

from atomq.api import links
from atomq.api.auth import require_owner
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.common import ErrorSchema
from atomq.api.sqs.credentials import sqs_credentials
from atomq.api.schemas.tenants import (
    KeyCreatedSchema,
    TenantCreatedSchema,
    TenantCreateSchema,
    TenantListArgs,
    TenantListSchema,
    TenantPatchSchema,
    TenantSchema,
    TenantUsageSchema,
)
from atomq.tenants import Tenant

blp = ApiBlueprint("tenants", __name__, url_prefix="/v1/tenants", description="Tenants (owner key)")


@blp.before_request
def owner_only() -> None:
    require_owner()


NAME_TAKEN = "name_taken: another tenant has that name (details: name, tenant)"


@blp.route("")
class Tenants(MethodView):
    @blp.arguments(TenantCreateSchema)
    @blp.response(201, TenantCreatedSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=NAME_TAKEN)
    @blp.doc(**links.AFTER_TENANT_CREATED)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Creates a tenant and its first API key (shown only here) with its SQS credentials. Tenant names
        are unique."""
        store = services().tenants
        tenant, key_id, api_key = store.create(**body)
        return {**asdict(tenant), "key_id": key_id, "api_key": api_key,
                "sqs": sqs_credentials(store.sqs.issued(tenant.id, key_id, api_key))}

    @blp.arguments(TenantListArgs, location="query")
    @blp.response(200, TenantListSchema)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """The tenants, oldest first, a page at a time; or the one of a name."""
        store = services().tenants
        if "name" in args:
            named = store.named(args["name"])
            return {"tenants": [] if named is None else [asdict(named)], "next": None}
        after, limit = args.get("after"), args["limit"]
        rest = [t for t in store.list() if after is None or _cursor(t) > after]
        return {"tenants": [asdict(t) for t in rest[:limit]], "next": _cursor(rest[limit - 1]) if len(rest) > limit else None}


@blp.route("/<tenant_id>")
class TenantById(MethodView):
    @blp.response(200, TenantUsageSchema)
    def get(self, tenant_id: str) -> dict[str, Any]:
        """One tenant, with what it stores."""
        s = services()
        return {**asdict(s.tenants.get(tenant_id)), **s.queues.usage(tenant_id)}

    @blp.arguments(TenantPatchSchema, required=False)
    @blp.response(200, TenantSchema)
    @blp.alt_response(409, schema=ErrorSchema, description=NAME_TAKEN)
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
    def post(self, tenant_id: str) -> dict[str, Any]:
        """Another API key for the tenant (shown only here), with its SQS credentials."""
        store = services().tenants
        key_id, api_key = store.create_key(tenant_id)
        return {"key_id": key_id, "api_key": api_key, "sqs": sqs_credentials(store.sqs.issued(tenant_id, key_id, api_key))}


@blp.route("/<tenant_id>/keys/<key_id>")
class KeyById(MethodView):
    @blp.response(204)
    def delete(self, tenant_id: str, key_id: str) -> None:
        """Revokes a key; it stops working at once on every node."""
        services().tenants.revoke_key(tenant_id, key_id)


def _cursor(tenant: Tenant) -> str:
    """A tenant's place in the list, oldest first: its creation time (fixed width, so the text
    sorts as the time does) and its id."""
    return f"{tenant.created_at:017.6f}_{tenant.id}"
