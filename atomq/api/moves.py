"""A queue's move tasks: ``/v1/queues/<qname:name>/moves``.

A task moves a queue's waiting messages, a step a second in the node's maintenance, back to the
queues they left as dead letters or to a named queue, as SQS's StartMessageMoveTask does
(``atomq.api.sqs.redrive``): both fronts call the same platform tasks. Tasks live in the tenant's
keyspace under random ids, so a tenant neither sees nor cancels another's; a task is also named
under its source queue here, and is not found under another.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from flask.views import MethodView

from atomq.api.auth import current_tenant
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.common import ErrorSchema
from atomq.api.schemas.moves import MoveListArgs, MoveListSchema, MoveStartSchema, MoveTaskSchema
from atomq.api.wire import render
from atomq.errors import Conflict, NotFound
from atomq.platform.queues.move_tasks import MoveTask

blp = ApiBlueprint("moves", __name__, url_prefix="/v1/queues", description="Move tasks", tenant_scoped=True)


def move_task(t: MoveTask) -> dict[str, Any]:
    """A task as the contract shows it."""
    failure = None if t.failure is None else {"reason": t.failure, "on": t.failed_on or "",
                                              "message": t.failure_text or t.failure}
    return {"id": t.id, "queue": t.source, "destination": t.destination, "max_per_second": t.rate,
            "status": t.status.value, "moved": t.moved, "to_move": t.to_move, "started_at": t.started_at,
            "failure": failure}


def _task_of(tenant: str, queue: str, task_id: str) -> MoveTask:
    """The task ``task_id`` of source ``queue``; NotFound for none, or one of another queue."""
    task = services().queues.move_task(tenant, task_id)
    if task is None or task.source != queue:
        raise NotFound(f"queue {queue} has no move task {task_id}", queue=queue, task=task_id)
    return task


@blp.route("/<qname:name>/moves")
class Moves(MethodView):
    @blp.arguments(MoveListArgs, location="query")
    @blp.response(200, MoveListSchema)
    def get(self, args: dict[str, Any], name: str) -> Response:
        """The queue's newest move tasks (the running one among them), the newest first."""
        s, tenant = services(), current_tenant()
        s.queues.get_queue(tenant, name)
        tasks = s.queues.move_tasks(tenant, name)
        if args.get("after") is not None:
            ids = [t.id for t in tasks]
            tasks = tasks[ids.index(args["after"]) + 1:] if args["after"] in ids else []
        limit = args["limit"]
        return render.json_response({"moves": [move_task(t) for t in tasks[:limit]],
                                     "next": tasks[limit - 1].id if len(tasks) > limit else None})

    @blp.arguments(MoveStartSchema)
    @blp.response(201, MoveTaskSchema)
    @blp.alt_response(400, schema=ErrorSchema, description="a publish/subscribe source or destination, the "
                                                           "destination is the source, or a bad max_per_second")
    @blp.alt_response(404, schema=ErrorSchema, description="no such source or destination queue")
    @blp.alt_response(409, schema=ErrorSchema, description="a task of this queue is running (details.task)")
    def post(self, body: dict[str, Any], name: str) -> Response:
        """Starts moving the queue's waiting messages (ready, not in flight) to ``destination``, or
        back to the queues they left as dead letters; one task at a time per queue."""
        task = services().queues.start_move_task(current_tenant(), name, body.get("destination"),
                                                 body.get("max_per_second"))
        return render.json_response(move_task(task), 201)


@blp.route("/<qname:name>/moves/<task>")
class MoveById(MethodView):
    @blp.response(200, MoveTaskSchema)
    def get(self, name: str, task: str) -> Response:
        """One move task of the queue."""
        return render.json_response(move_task(_task_of(current_tenant(), name, task)))

    @blp.response(200, MoveTaskSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="the task is not running (details.status)")
    def delete(self, name: str, task: str) -> Response:
        """Cancels a running task: nothing moves after the answer, which says how many did."""
        tenant = current_tenant()
        _task_of(tenant, name, task)
        cancelled, was_running = services().queues.cancel_move_task(tenant, task)
        if not was_running:
            raise Conflict(f"move task {task} is {cancelled.status.value}: only a running task can be cancelled",
                           task=task, status=cancelled.status.value)
        return render.json_response(move_task(cancelled))
