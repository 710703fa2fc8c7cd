"""Liveness and readiness: ``/v1/health`` and ``/v1/ready`` (no key)."""

from __future__ import annotations

from flask import Response, current_app
from flask.views import MethodView

from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.wire.render import json_response
from atomq.platform.background import HEALTH_EXTENSION, HealthBoard
from atomq.workers.liveness import WorkerProblems

blp = ApiBlueprint("health", __name__, url_prefix="/v1", description="Health (no key)")


def loop_problems() -> list[str]:
    """The node's background loops that fail now, in any of its processes (see ``HealthBoard``)."""
    board: HealthBoard | None = current_app.extensions.get(HEALTH_EXTENSION)
    return board.problems() if board is not None else []


@blp.route("/health")
class Health(MethodView):
    @blp.doc(security=[])
    @blp.response(200)
    def get(self) -> Response:
        """200 once the node serves requests."""
        return json_response({"status": "ok"})


@blp.route("/ready")
class Ready(MethodView):
    @blp.doc(security=[])
    @blp.response(200)
    @blp.alt_response(503, description="not ready: the body says why")
    def get(self) -> Response:
        """200 while the node can do its work: Redis answers, scripts are loaded, memory is not full,
        and no background loop (maintenance, listener supervision) is failing.

        ``warnings`` names what does not stop it serving queues, such as a Spark worker
        that cannot start (no Java runtime): listeners of that engine wait meanwhile.
        """
        s = services()
        problems = s.queues.readiness_problems()
        problems += loop_problems()
        if s.stopping.is_set():
            problems.append("the node is shutting down")
        if problems:
            return json_response({"status": "unavailable", "problems": problems}, 503)
        # The node serves queues without its execution workers: it stays ready, and says what is wrong.
        warnings = [f"{p.engine} worker: {p.message}" for p in WorkerProblems(s.queues.storage).of_node(s.node_id)
                    if p.state == "failed"]
        return json_response({"status": "ready", **({"warnings": warnings} if warnings else {})})
