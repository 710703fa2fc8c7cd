"""Listeners and the calls their executions make: ``/v1/listeners``.

Tenants deploy, list, pause, resume, restart and delete listeners with their
key. A work horse calls ``.../executions/<id>/start``, ``/extend`` and ``/finish``
with its execution token, which is good for nothing else but sending to the
tenant's queues (see ``auth.EXECUTION_ENDPOINTS``), and only while its
execution is scheduled or running.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flask import Response
from flask.views import MethodView

from atomq.api.auth import current_tenant, principal
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.common import ListArgs
from atomq.api.schemas.listeners import (
    ExecutionFinishedSchema,
    ExecutionFinishSchema,
    ExecutionStartSchema,
    ListenerListSchema,
    ListenerPutSchema,
    ListenerSchema,
)
from atomq.api.schemas.messages import ExtendedSchema
from atomq.api.wire import render
from atomq.errors import Forbidden
from atomq.platform.listeners.deployed import Listener
from atomq.tenants.records import ExecutionGrant
from atomq.workers import processes

blp = ApiBlueprint("listeners", __name__, url_prefix="/v1/listeners", description="Listeners",
                   tenant_scoped=True)


def listener_json(listener: Listener) -> dict[str, Any]:
    spec = listener.spec
    return {"name": listener.name, "queue": spec.queue, "subscriber": spec.subscriber, "process": spec.process,
            "batch_size": spec.batch_size, "max_concurrent_executions": spec.max_concurrent_executions,
            "engine": spec.engine, "settings": spec.settings, "state": listener.state,
            "executions": listener.executions, "failures": listener.failures, "last_error": listener.last_error,
            "outstanding": listener.outstanding}


@blp.route("")
class Listeners(MethodView):
    @blp.arguments(ListArgs, location="query")
    @blp.response(200, ListenerListSchema)
    def get(self, args: dict[str, Any]) -> Response:
        """The tenant's listeners with their state and counts, by name, a page at a time."""
        limit = args["limit"]
        listeners = services().listeners.of_tenant(current_tenant(), limit + 1, args.get("after"))
        return render.json_response({"listeners": [listener_json(listener) for listener in listeners[:limit]],
                                     "next": listeners[limit - 1].name if len(listeners) > limit else None})


@blp.route("/<qname:name>")
class ListenerByName(MethodView):
    @blp.arguments(ListenerPutSchema)
    @blp.response(200, ListenerSchema)
    @blp.alt_response(201, schema=ListenerSchema, description="deployed")
    def put(self, body: dict[str, Any], name: str) -> Response:
        """Deploys (201) or redeploys (200) a listener; its state and counts survive a redeploy.

        The process must be registered (else 400 naming ``process``) and
        accept the settings; on a publish/subscribe queue the listener reads
        its own subscriber (by default named after it), created now.
        """
        tenant = current_tenant()
        if body["engine"] == "spark":
            from atomq.spark_workers import processes as spark_processes  # pyspark only where Spark runs

            spark_processes.SPARK.check(body["process"], body["settings"])
        else:
            processes.FORK.check(body["process"], body["settings"])
        s = services()
        s.check_creation(f"listener {name}", lambda: s.listeners.get(tenant, name), tenant)
        created = s.executions.deploy(tenant, name, body["queue"], body.get("subscriber"), process=body["process"],
                                      batch_size=body["batch_size"],
                                      max_concurrent_executions=body["max_concurrent_executions"],
                                      engine=body["engine"], settings=body["settings"])
        return render.json_response(listener_json(s.listeners.get(tenant, name)), 201 if created else 200)

    @blp.response(200, ListenerSchema)
    def get(self, name: str) -> Response:
        """One listener with its state and counts."""
        return render.json_response(listener_json(services().listeners.get(current_tenant(), name)))

    @blp.response(204)
    def delete(self, name: str) -> None:
        """Removes the listener; running executions finish, no new one starts. Its subscriber stays."""
        services().listeners.control(current_tenant(), name, "delete")


def _control(name: str, action: str) -> Response:
    s = services()
    tenant = current_tenant()
    s.listeners.control(tenant, name, action)
    return render.json_response(listener_json(s.listeners.get(tenant, name)))


@blp.route("/<qname:name>/pause")
class Pause(MethodView):
    @blp.response(200, ListenerSchema)
    def post(self, name: str) -> Response:
        """No new execution starts once this answers; running ones finish."""
        return _control(name, "pause")


@blp.route("/<qname:name>/resume")
class Resume(MethodView):
    @blp.response(200, ListenerSchema)
    def post(self, name: str) -> Response:
        """Executions start again."""
        return _control(name, "resume")


@blp.route("/<qname:name>/restart")
class Restart(MethodView):
    @blp.response(200, ListenerSchema)
    def post(self, name: str) -> Response:
        """Clears an error, frees the slots of executions it waits for, and runs again."""
        return _control(name, "restart")


def _grant(name: str, execution: str) -> ExecutionGrant:
    """The caller's execution token, which must be for this very execution."""
    grant = principal().execution
    if grant is None or grant.listener != name or grant.execution != execution:
        raise Forbidden("these calls take the token of this very execution")
    return grant


@blp.route("/<qname:name>/executions/<qname:execution>/start")
class ExecutionStart(MethodView):
    @blp.response(200, ExecutionStartSchema)
    def post(self, name: str, execution: str) -> Response:
        """A work horse takes its batch (execution token only; once per execution).

        Messages the listener already processed (a redelivery after a lost
        ack) are marked ``processed``: ack them, do not process them again.
        """
        started = services().executions.start(_grant(name, execution).tenant, name, execution)
        if started is None:
            return render.json_response({"run": False, "messages": []})
        return render.json_response({
            "run": True, "listener": listener_json(started.listener), "ack_timeout_s": started.ack_timeout_s,
            "messages": [{**render.message(m), "processed": m.id in started.processed} for m in started.messages]})


@blp.route("/<qname:name>/executions/<qname:execution>/extend")
class ExecutionExtend(MethodView):
    @blp.response(200, ExtendedSchema)
    def post(self, name: str, execution: str) -> dict[str, int]:
        """Moves the ack deadline of the execution's batch a full ack time-out ahead (execution token only)."""
        return {"extended": services().executions.extend(_grant(name, execution).tenant, execution)}


@blp.route("/<qname:name>/executions/<qname:execution>/finish")
class ExecutionFinish(MethodView):
    @blp.arguments(ExecutionFinishSchema)
    @blp.response(200, ExecutionFinishedSchema)
    def post(self, body: dict[str, Any], name: str, execution: str) -> dict[str, int]:
        """A work horse reports its end (execution token only; once per execution).

        Success: the batch's messages are recorded as processed, then acked.
        Failure: they are nacked (redelivery schedule, then dead letters).
        Deferred (``retry_after_s``: the node refused its sends for a while, a
        rate limit or a quota): they are given back without counting a failed
        delivery, redelivered after that time, and the listener waits as long.
        The batch settled is the one the execution took, on the queue it took
        it from, even if the listener was redeployed or deleted since.
        """
        settled = services().executions.finish(
            _grant(name, execution).tenant, name, execution, body["ok"], processed=body["processed"],
            error=body["error"], retry_after_s=body.get("retry_after_s"))
        return dataclasses.asdict(settled)
