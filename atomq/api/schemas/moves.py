"""Move tasks: a queue's waiting messages moved, a step a second, back to the queues they left as
dead letters or to another queue (``atomq.platform.queues.move_tasks``)."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq.api.schemas.common import NEXT_DOC, QUEUE_NAME, Int, Strict
from atomq.platform.queues.move_tasks import FAILURES, KEPT_PER_SOURCE, MAX_RATE, TASK_ID_CHARS, MoveTaskStatus

TASK_ID_PATTERN = f"^[0-9a-f]{{{TASK_ID_CHARS}}}$"


class MoveStartSchema(Strict):
    destination = fields.String(validate=QUEUE_NAME, metadata={
        "description": "another point-to-point queue of the tenant that every message goes to; left out: each "
                       "message goes back to the queue it left as a dead letter (its dead_letter_source "
                       "property), and the task fails at the first message that has none"})
    max_per_second = Int(validate=validate.Range(1, MAX_RATE), metadata={
        "description": f"most messages moved a second, 1 to {MAX_RATE}; left out: as fast as the node's "
                       "maintenance moves them"})


class MoveFailureSchema(Strict):
    reason = fields.String(required=True, validate=validate.OneOf(list(FAILURES)), metadata={
        "description": "no_queue: the source or a target is gone or not point-to-point; no_source: a message "
                       "has no queue to go back to; holds_copy: the target holds a copy of the message"})
    on = fields.String(required=True, metadata={"description": "the queue or message id it failed on"})
    message = fields.String(required=True, metadata={"description": "the failure in words"})


class MoveTaskSchema(Strict):
    id = fields.String(required=True, metadata={"description": f"{TASK_ID_CHARS} random hex digits",
                                                "pattern": TASK_ID_PATTERN})
    queue = fields.String(required=True, metadata={"description": "the source queue"})
    destination = fields.String(required=True, allow_none=True, metadata={
        "description": "the queue every message goes to; null: back to the queues they left as dead letters"})
    max_per_second = fields.Integer(required=True, allow_none=True, metadata={"description": "null: no bound"})
    status = fields.String(required=True, validate=validate.OneOf([s.value for s in MoveTaskStatus]))
    moved = fields.Integer(required=True, metadata={"description": "messages moved so far"})
    to_move = fields.Integer(required=True, metadata={
        "description": "the source's waiting messages when the task started"})
    started_at = fields.Float(required=True, metadata={"description": "epoch seconds"})
    failure = fields.Nested(MoveFailureSchema, required=True, allow_none=True, metadata={
        "description": "why a failed task stopped; null otherwise"})


class MoveListArgs(Strict):
    limit = fields.Integer(load_default=KEPT_PER_SOURCE, validate=validate.Range(1, KEPT_PER_SOURCE),
                           metadata={"description": "most tasks on the page"})
    after = fields.String(validate=validate.Regexp(TASK_ID_PATTERN, error=f"a move task's id is {TASK_ID_CHARS} "
                                                                          "lower-case hex digits"),
                          metadata={"description": "the ``next`` of the page before: this page starts after it"})


class MoveListSchema(Strict):
    moves = fields.List(fields.Nested(MoveTaskSchema), required=True, metadata={
        "description": f"the queue's newest {KEPT_PER_SOURCE} tasks (the running one among them), the "
                       "newest first"})
    next = fields.String(required=True, allow_none=True, metadata=NEXT_DOC)
