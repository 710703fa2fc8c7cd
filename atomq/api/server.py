"""The server's state and settings: ``/v1/server`` (runtime owner only)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from flask.views import MethodView

from atomq.api.auth import require_owner
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.platform_view import platform_view
from atomq.api.schemas.server import NodesSchema, OverviewArgs, OverviewSchema, ServerPatchSchema, ServerSchema
from atomq.api.services import Services
from atomq.platform.store import keys as k
from atomq.platform.store import lease
from atomq.platform.watch import store_sizes
from atomq.platform.watch.nodes import NodeRecords
from atomq.platform.watch.overview import OverviewStore

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


@blp.route("/nodes")
class Nodes(MethodView):
    @blp.response(200, NodesSchema)
    def get(self) -> dict[str, Any]:
        """The nodes on the store, oldest first, with the execution workers each keeps; a node
        silent for 15 s was killed, lost the store or is a record a backup restored: its uptime
        stops at when it was last heard, and its record goes after 10 minutes."""
        storage = services().queues.storage
        lease_node = lease.holder_node(storage, k.MAINTENANCE_LEASE)
        now = time.time()
        return {"nodes": [{**dataclasses.asdict(n), "silent": n.silent_for(now) is not None,
                           "up_s": n.up_for(now), "maintenance_lease": n.id == lease_node}
                          for n in NodeRecords(storage).all()]}


@blp.route("/overview")
class Overview(MethodView):
    @blp.arguments(OverviewArgs, location="query")
    @blp.response(200, OverviewSchema)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """Who is loud, stuck or full: the tenants ranked by ``sort`` with their figures at the last
        sample, and the platform's message rates over the last hour."""
        s = services()
        view = platform_view(OverviewStore(s.queues.storage), s.tenants.list(), args["sort"])
        rows = []
        for row in view.rows[:args["limit"]]:
            t = row.sample
            rows.append({"id": row.id, "name": row.name, "sampled": t is not None, "traffic_per_s": row.traffic,
                         "refused": row.refused, "depth": t and t.depth, "in_flight": t and t.in_flight,
                         "dead_letters": t and t.dead_letters, "stored_bytes": t and t.stored_bytes,
                         "disk_quota_bytes": t and t.disk_quota_bytes, "listeners": t and t.listeners,
                         "executions_running": t and t.executions_running})
        return {"sampled_at": view.sampled_at, "interval_s": view.interval_s, "tenant_count": len(view.rows),
                "tenants": rows, "rates": view.rates}
