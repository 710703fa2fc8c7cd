"""Listeners and the calls of their executions."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq import defaults
from atomq.api.schemas.common import NEXT_DOC, QUEUE_NAME, SUBSCRIBER_NAME, Int, Number, Strict, StringList
from atomq.api.schemas.messages import DeliverySchema
from atomq.platform.listeners.deployed import ENGINES, STATES


class ListenerPutSchema(Strict):
    queue = fields.String(required=True, validate=QUEUE_NAME)
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata={
        "description": "publish/subscribe queues only; default: the listener's name. Created when deployed."})
    process = fields.String(required=True, validate=validate.Length(1, 128),
                            metadata={"description": "a process registered by the runtime owner"})
    batch_size = Int(load_default=defaults.LISTENER_BATCH_SIZE,
                     validate=validate.Range(1, defaults.MAX_SPARK_LISTENER_BATCH_SIZE), metadata={
                         "description": f"at most {defaults.MAX_LISTENER_BATCH_SIZE} on the fork engine, "
                                        f"{defaults.MAX_SPARK_LISTENER_BATCH_SIZE} on Spark"})
    max_concurrent_executions = Int(load_default=0,
                                    validate=validate.Range(0, defaults.MAX_CONCURRENT_EXECUTIONS),
                                    metadata={"description": "0 = unlimited"})
    engine = fields.String(load_default="fork", validate=validate.OneOf(ENGINES))
    settings = fields.Dict(keys=fields.String(), load_default=dict)


class ListenerSchema(Strict):
    name = fields.String(required=True)
    queue = fields.String(required=True)
    subscriber = fields.String(allow_none=True)
    process = fields.String(required=True)
    batch_size = fields.Integer(required=True)
    max_concurrent_executions = fields.Integer(required=True)
    engine = fields.String(required=True)
    settings = fields.Dict(required=True)
    state = fields.String(required=True, validate=validate.OneOf(STATES), metadata={
        "description": "waiting: no worker of its engine is alive (none started, no Java runtime for Spark, "
                       "all dead); last_error says what is missing and how to provide it"})
    executions = fields.Integer(required=True, metadata={"description": "finished or lost executions"})
    failures = fields.Integer(required=True)
    last_error = fields.String(required=True)
    outstanding = fields.Integer(required=True, metadata={"description": "executions scheduled or running"})


class ListenerListSchema(Strict):
    listeners = fields.List(fields.Nested(ListenerSchema), required=True)
    next = fields.String(required=True, allow_none=True, metadata=NEXT_DOC)


class ExecutionDeliverySchema(DeliverySchema):
    processed = fields.Boolean(required=True, metadata={
        "description": "the listener already processed this message: ack it without processing it again"})


class ExecutionStartSchema(Strict):
    run = fields.Boolean(required=True, metadata={
        "description": "false when the execution must not run (listener paused, restarted or deleted)"})
    listener = fields.Nested(ListenerSchema)
    ack_timeout_s = fields.Float()
    messages = fields.List(fields.Nested(ExecutionDeliverySchema), required=True)


class ExecutionFinishSchema(Strict):
    ok = fields.Boolean(required=True)
    error = fields.String(load_default="", validate=validate.Length(max=defaults.MAX_LISTENER_ERROR_CHARS))
    retry_after_s = Number(validate=validate.Range(0, 3600), metadata={
        "description": "failed because the node refused its sends (rate limit, quota): give the batch back "
                       "without counting a failed delivery, and back off this long"})
    processed = StringList(fields.String(), load_default=list,
                           validate=validate.Length(max=defaults.MAX_SPARK_LISTENER_BATCH_SIZE),
                           metadata={"description": "ids of the batch's messages it processed (ok only)"})


class ExecutionFinishedSchema(Strict):
    acked = fields.Integer(required=True)
    requeued = fields.Integer(required=True)
    dead_lettered = fields.Integer(required=True)
