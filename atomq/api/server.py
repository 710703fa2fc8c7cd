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

blp = ApiBlueprint("server", __name__, url_prefix="/v1/server", description="Server (owner key)")


@blp.before_request
def owner_only() -> None:
    require_owner()


def server_state(s: Services) -> dict[str, Any]:
    """The server's status, memory state, store sizes and shared settings: what
    ``GET /v1/server`` answers and the dashboard's owner view shows."""
    settings = s.current_settings()
    state, memory = s.memory.reading()
    used, limit = memory.used_bytes, memory.max_bytes
    stores = store_sizes.recorded(s.queues) or {}
    stored = s.queues.total_usage()
    return {
        "status": "ok" if state != "red" and not s.stopping.is_set() else "degraded",
        "node_id": s.node_id,
        "memory_state": state,
        "memory_history": [dataclasses.asdict(c) for c in s.memory.history()],
        "memory_bytes": used,
        "max_memory_bytes": limit,
        "message_store_bytes": stored["stored_bytes"],
        "stored_messages": stored["messages"],
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
