"""The server's state and shared settings."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq.api.schemas.common import Int, Number, Strict


class ServerSchema(Strict):
    status = fields.String(required=True)
    node_id = fields.String(required=True)
    memory_state = fields.String(required=True, validate=validate.OneOf(["green", "yellow", "orange", "red"]))
    memory_bytes = fields.Integer(required=True, metadata={"description": "memory Redis uses"})
    max_memory_bytes = fields.Integer(required=True, metadata={"description": "Redis maxmemory (0: none)"})
    message_store_bytes = fields.Integer(required=True, metadata={
        "description": "documents and messages held by all tenants, dead letters included"})
    temporary_store_bytes = fields.Integer(allow_none=True, metadata={
        "description": "in-flight deliveries, executions, processed-message windows, de-duplication "
                       "markers, rate windows; measured every 30 s by one node; null before the first"})
    job_scheduler_store_bytes = fields.Integer(allow_none=True, metadata={
        "description": "redelivery schedules and the execution job queues; measured every 30 s by one "
                       "node; null before the first"})
    max_disk_bytes = fields.Integer(required=True)
    incoming_rate_limit_per_minute = fields.Integer(required=True)
    redelivery_delays_s = fields.List(fields.Float(), required=True)
    rate_limit_window_s = fields.Float(required=True)
    document_retention_s = fields.Float(required=True)
    dedupe_window_s = fields.Float(required=True)


class ServerPatchSchema(Strict):
    incoming_rate_limit_per_minute = Int(validate=validate.Range(min=0))
    max_disk_bytes = Int(validate=validate.Range(min=0))
    redelivery_delays_s = fields.List(Number(validate=validate.Range(min=0, max=86400)),
                                      validate=validate.Length(1, 100))
    rate_limit_window_s = Number(validate=validate.Range(min=0, min_inclusive=False, max=86400))
    document_retention_s = Number(validate=validate.Range(min=0, min_inclusive=False))
    dedupe_window_s = Number(validate=validate.Range(min=0, min_inclusive=False, max=7 * 86400))
