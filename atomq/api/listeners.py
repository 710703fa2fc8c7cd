"""Listeners and the calls their executions make: ``/v1/listeners``.

Tenants deploy, list, pause, resume, restart and delete listeners with their
key. A work horse calls ``.../executions/<id>/start``, ``/extend`` and ``/finish``
with its execution token, which is good for nothing else but sending to the
tenant's queues (see ``auth.EXECUTION_ENDPOINTS``), and only while its
execution is scheduled or running.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from flask.views import MethodView

from atomq.api import render
from atomq.api.auth import current_tenant, principal
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.listeners import (
    ExecutionFinishedSchema,
    ExecutionFinishSchema,
    ExecutionStartSchema,
    ListenerListSchema,
    ListenerPutSchema,
    ListenerSchema,
)
from atomq.api.schemas.messages import ExtendedSchema
from atomq.errors import AtomqError, Conflict, Forbidden, InvalidInput
from atomq.platform import QueueModel
from atomq.platform.listeners import ExecutionBatch, Listener, ListenerSpec
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
    @blp.response(200, ListenerListSchema)
    def get(self) -> Response:
        """The tenant's listeners with their state and counts."""
        listeners = services().listeners.of_tenant(current_tenant())
        return render.json_response({"listeners": [listener_json(listener) for listener in listeners]})


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
        s = services()
        tenant = current_tenant()
        if body["engine"] == "spark":
            from atomq.spark_workers import processes as spark_processes  # pyspark only where Spark runs

            spark_processes.SPARK.check(body["process"], body["settings"])
        else:
            processes.FORK.check(body["process"], body["settings"])
        queue = s.queues.get_queue(tenant, body["queue"])
        subscriber = body.get("subscriber")
        if queue.model is QueueModel.PUBLISH_SUBSCRIBE:
            subscriber = subscriber or name
        elif subscriber is not None:
            raise InvalidInput("a point-to-point queue has no subscribers", field="subscriber")
        spec = ListenerSpec(queue=body["queue"], subscriber=subscriber, process=body["process"],
                            batch_size=body["batch_size"],
                            max_concurrent_executions=body["max_concurrent_executions"],
                            engine=body["engine"], settings=body["settings"])
        if subscriber is not None:
            s.queues.put_subscriber(tenant, spec.queue, subscriber)
        created = s.listeners.put(tenant, name, spec)
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
        s = services()
        tenant = _grant(name, execution).tenant
        listener = s.listeners.get(tenant, name)
        spec = listener.spec
        if not s.listeners.start(tenant, name, execution, s.execution_run_within_ms):
            return render.json_response({"run": False, "messages": []})
        try:
            queue = s.queues.get_queue(tenant, spec.queue)
            got = s.queues.get(tenant, spec.queue, spec.batch_size, 0, spec.subscriber)
        except AtomqError as exc:
            s.listeners.finish(tenant, name, execution, "failed", f"taking the batch failed: {exc.message}")
            raise
        if not got:
            s.listeners.finish(tenant, name, execution, "empty")
            return render.json_response({"run": False, "messages": []})
        s.listeners.record_batch(tenant, execution, ExecutionBatch(
            listener=name, queue=spec.queue, subscriber=spec.subscriber, ids=tuple(m.id for m in got),
            receipts=tuple(m.receipt for m in got), ack_timeout_s=queue.ack_timeout_s),
            s.execution_run_within_ms)
        processed = s.listeners.processed(tenant, name, [m.id for m in got if m.redelivered])
        return render.json_response({
            "run": True, "listener": listener_json(listener), "ack_timeout_s": queue.ack_timeout_s,
            "messages": [{**render.message(m), "processed": m.id in processed} for m in got]})


@blp.route("/<qname:name>/executions/<qname:execution>/extend")
class ExecutionExtend(MethodView):
    @blp.response(200, ExtendedSchema)
    def post(self, name: str, execution: str) -> dict[str, int]:
        """Moves the ack deadline of the execution's batch a full ack time-out ahead (execution token only)."""
        s = services()
        tenant = _grant(name, execution).tenant
        batch = s.listeners.batch(tenant, execution)
        if batch is None:
            raise Conflict("the execution has no batch: it has not started or has finished", execution=execution)
        return {"extended": s.queues.extend(tenant, batch.queue, receipts=list(batch.receipts),
                                            subscriber=batch.subscriber, seconds=batch.ack_timeout_s)}


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
        s = services()
        tenant = _grant(name, execution).tenant
        batch = s.listeners.take_batch(tenant, execution)
        if batch is None:
            raise Conflict("the execution has no batch to settle: it has not started or has finished",
                           execution=execution)
        receipts, where = list(batch.receipts), {"queue": batch.queue, "subscriber": batch.subscriber}
        result = {"acked": 0, "requeued": 0, "dead_lettered": 0}
        if body["ok"]:
            processed = set(body["processed"]) & set(batch.ids)
            s.listeners.finish(tenant, name, execution, "ok", processed=sorted(processed))
            result["acked"] = s.queues.ack(tenant, receipts=receipts, **where)
        elif body.get("retry_after_s") is not None:
            delay = body["retry_after_s"]
            s.listeners.finish(tenant, name, execution, "deferred", body["error"] or "the sends were refused",
                               retry_after_ms=round(delay * 1000))
            result["requeued"] = s.queues.release(tenant, receipts=receipts, delay_s=delay, **where)
        else:
            error = body["error"] or "the process failed"
            s.listeners.finish(tenant, name, execution, "failed", error)
            nacked = s.queues.nack(tenant, receipts=receipts, reason=error, **where)
            result["requeued"], result["dead_lettered"] = nacked.requeued, nacked.dead_lettered
        return result
