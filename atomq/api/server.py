"""The server's state and settings: ``/v1/server`` (runtime owner only)."""

from __future__ import annotations

import dataclasses
from typing import Any

from flask.views import MethodView

from atomq.api.auth import require_owner
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.server import ServerPatchSchema, ServerSchema
from atomq.api.services import Services
from atomq.platform import store_sizes
from atomq.platform.memory_use import memory_use
from atomq.platform.server_settings import memory_state

blp = ApiBlueprint("server", __name__, url_prefix="/v1/server", description="Server (owner key)")


@blp.before_request
def owner_only() -> None:
    require_owner()


def server_state(s: Services) -> dict[str, Any]:
    """The server's status, memory state, store sizes and shared settings: what
    ``GET /v1/server`` answers and the dashboard's owner view shows."""
    settings = s.current_settings()
    memory = memory_use(s.queues.storage)
    used, limit = memory.used_bytes, memory.max_bytes
    state = memory_state(used, limit)
    stores = store_sizes.recorded(s.queues) or {}
    return {
        "status": "ok" if state != "red" and not s.stopping.is_set() else "degraded",
        "node_id": s.node_id,
        "memory_state": state,
        "memory_bytes": used,
        "max_memory_bytes": limit,
        "message_store_bytes": s.queues.total_stored_bytes(),
        "temporary_store_bytes": stores.get("temporary_bytes"),
        "job_scheduler_store_bytes": stores.get("job_scheduler_bytes"),
        **dataclasses.asdict(settings),
    }


@blp.route("")
class Server(MethodView):
    @blp.response(200, ServerSchema)
    def get(self) -> dict[str, Any]:
        """The server's status, memory state and shared settings."""
        return server_state(services())

    @blp.arguments(ServerPatchSchema, required=False)
    @blp.response(200, ServerSchema)
    def patch(self, body: dict[str, Any]) -> dict[str, Any]:
        """Changes shared settings; every node applies them within a few seconds."""
        s = services()
        s.settings.update(**body)
        return server_state(s)
