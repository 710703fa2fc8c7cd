"""The server's state and shared settings."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq import defaults
from atomq.api.platform_view import ORDERS
from atomq.api.schemas.common import Int, Number, Strict, above_zero
from atomq.platform.guards.server_settings import BOUNDS_S


class MemoryThresholdsSchema(Strict):
    yellow = Number(validate=validate.Range(0, 1, min_inclusive=False))
    orange = Number(validate=validate.Range(0, 1, min_inclusive=False))
    red = Number(validate=validate.Range(0, 1, min_inclusive=False))


class MemoryChangeSchema(Strict):
    at = fields.Float(required=True, metadata={"description": "seconds since the epoch"})
    state = fields.String(required=True)
    used_bytes = fields.Integer(required=True)
    max_bytes = fields.Integer(required=True)


class ServerSchema(Strict):
    status = fields.String(required=True)
    node_id = fields.String(required=True)
    memory_state = fields.String(required=True, validate=validate.OneOf(["green", "yellow", "orange", "red"]))
    memory_history = fields.List(fields.Nested(MemoryChangeSchema), required=True, metadata={
        "description": "the last changes of the memory state (at most 100), newest first"})
    memory_thresholds = fields.Nested(MemoryThresholdsSchema, required=True, metadata={
        "description": "the share of max_memory_bytes where yellow, orange and red begin"})
    memory_bytes = fields.Integer(required=True, metadata={"description": "memory Redis uses"})
    max_memory_bytes = fields.Integer(required=True, metadata={"description": "Redis maxmemory (0: none)"})
    message_store_bytes = fields.Integer(required=True, metadata={
        "description": "what all tenants' messages cost the store (their stored_bytes summed): documents, "
                       "envelopes, bookkeeping, dead-letter reasons and de-duplication markers"})
    temporary_store_bytes = fields.Integer(allow_none=True, metadata={
        "description": "in-flight deliveries, executions, processed-message windows, rate windows; "
                       "measured every 30 s by one node; null before the first"})
    job_scheduler_store_bytes = fields.Integer(allow_none=True, metadata={
        "description": "redelivery schedules and the execution job queues; measured every 30 s by one "
                       "node; null before the first"})
    stored_messages = fields.Integer(required=True, metadata={
        "description": "message copies all tenants store, dead letters included (what max_messages holds)"})
    max_disk_bytes = fields.Integer(required=True)
    max_messages = fields.Integer(required=True, metadata={
        "description": "most message copies all tenants may store (0: no limit); past it sends get 507 server_full"})
    flow_control_wait_ms = fields.Integer(required=True, metadata={
        "description": "how long a node holds a send to a full flow_control queue before 429 queue_full"})
    min_replicas = fields.Integer(required=True, metadata={
        "description": "replicas that must hold a send to a sync queue before it is answered"})
    sync_timeout_ms = fields.Integer(required=True, metadata={
        "description": "how long a send to a sync queue waits for the disk and the replicas (then 503 not_durable)"})
    incoming_rate_limit_per_minute = fields.Integer(required=True)
    redelivery_delays_s = fields.List(fields.Float(), required=True)
    rate_limit_window_s = fields.Float(required=True)
    document_retention_s = fields.Float(required=True)
    dedupe_window_s = fields.Float(required=True)
    max_documents_per_message = fields.Integer(required=True)
    max_documents_per_send = fields.Integer(required=True)
    max_reply_bytes = fields.Integer(required=True, metadata={
        "description": "most document bytes a get, browse or dead-letter page answers (a single bigger "
                       "message still comes alone)"})
    max_queues_per_tenant = fields.Integer(required=True)
    max_copies_per_request = fields.Integer(required=True, metadata={
        "description": "most message copies one send or publish stores (messages x queues reached x "
                       "subscribers); past it 413 too_many_copies, nothing stored"})


def _limit(name: str) -> Int:
    return Int(validate=validate.Range(*defaults.LIMIT_BOUNDS[name]))


def _seconds(name: str) -> Number:
    return above_zero(BOUNDS_S[name])


class ServerPatchSchema(Strict):
    """Every setting bounded (``atomq.platform.guards.server_settings``): 2^53 for whole numbers,
    1 day for a delay or the rate window, 7 days for de-duplication, 10 years for retention."""

    incoming_rate_limit_per_minute = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT))
    max_disk_bytes = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT))
    max_messages = Int(validate=validate.Range(0, defaults.MAX_EXACT_INT))
    flow_control_wait_ms = Int(validate=validate.Range(0, defaults.MAX_FLOW_CONTROL_WAIT_MS))
    min_replicas = Int(validate=validate.Range(0, defaults.MAX_MIN_REPLICAS))
    sync_timeout_ms = Int(validate=validate.Range(1, defaults.MAX_SYNC_TIMEOUT_MS))
    memory_thresholds = fields.Nested(MemoryThresholdsSchema, metadata={
        "description": "0 < yellow < orange < red <= 1 (else 400); parts left out are kept"})
    redelivery_delays_s = fields.List(Number(validate=validate.Range(min=0, max=defaults.MAX_REDELIVERY_DELAY_S)),
                                      validate=validate.Length(1, defaults.MAX_REDELIVERY_DELAYS))
    rate_limit_window_s = _seconds("rate_limit_window_s")
    document_retention_s = _seconds("document_retention_s")
    dedupe_window_s = _seconds("dedupe_window_s")
    max_documents_per_message = _limit("max_documents_per_message")
    max_documents_per_send = _limit("max_documents_per_send")
    max_reply_bytes = _limit("max_reply_bytes")
    max_queues_per_tenant = _limit("max_queues_per_tenant")
    max_copies_per_request = _limit("max_copies_per_request")


class KeptWorkerSchema(Strict):
    engine = fields.String(required=True, validate=validate.OneOf(["fork", "spark"]))
    pid = fields.Integer(allow_none=True, required=True)
    state = fields.String(required=True, validate=validate.OneOf(["running", "restarting", "not started"]))
    since = fields.Float(required=True, metadata={
        "description": "running: when it started; restarting: when it starts again (seconds since the epoch)"})
    restarts = fields.Integer(required=True, metadata={"description": "exits soon after a start, in a row"})
    problem = fields.String(required=True, metadata={"description": "what keeps its engine from running, or \"\""})
    execution = fields.String(required=True, metadata={
        "description": "what the worker runs now, <tenant id>/<listener> (the Spark worker's several "
                       "joined by \", \"), or \"\""})


class NodeSchema(Strict):
    id = fields.String(required=True)
    url = fields.String(required=True, metadata={"description": "where the node's API is reached"})
    version = fields.String(required=True)
    pid = fields.Integer(required=True, metadata={"description": "the node's master process"})
    started_at = fields.Float(required=True)
    seen_at = fields.Float(required=True, metadata={"description": "the node's last record, rewritten every 5 s"})
    silent = fields.Boolean(required=True, metadata={
        "description": "not heard from for 15 s: killed, cut off from the store, or a record a backup restored "
                       "(listed for 10 minutes, then dropped)"})
    up_s = fields.Float(required=True, metadata={
        "description": "seconds the node has run: until now, or until it was last heard (seen_at) when silent"})
    maintenance_lease = fields.Boolean(required=True, metadata={
        "description": "holds the maintenance lease: runs maintenance, exports /metrics, samples the overview"})
    workers = fields.List(fields.Nested(KeptWorkerSchema), required=True)


class NodesSchema(Strict):
    nodes = fields.List(fields.Nested(NodeSchema), required=True)


class OverviewArgs(Strict):
    sort = fields.String(load_default="traffic", validate=validate.OneOf(list(ORDERS)), metadata={
        "description": "; ".join(f"{key}: {words}" for key, (words, _) in ORDERS.items())})
    limit = fields.Integer(load_default=20, validate=validate.Range(1, 1000))


class TenantFiguresSchema(Strict):
    id = fields.String(required=True)
    name = fields.String(required=True)
    sampled = fields.Boolean(required=True, metadata={"description": "false for a tenant made since the last "
                                                                     "sample: its figures are null"})
    traffic_per_s = Number(allow_none=True, required=True, metadata={
        "description": "messages sent and delivered a second over the last interval"})
    refused = fields.Integer(allow_none=True, required=True, metadata={
        "description": "sends refused over the last interval"})
    depth = fields.Integer(allow_none=True, required=True)
    in_flight = fields.Integer(allow_none=True, required=True)
    dead_letters = fields.Integer(allow_none=True, required=True)
    stored_bytes = fields.Integer(allow_none=True, required=True)
    disk_quota_bytes = fields.Integer(allow_none=True, required=True)
    listeners = fields.Dict(keys=fields.String(), values=fields.Integer(), allow_none=True, required=True,
                            metadata={"description": "listeners by state"})
    executions_running = fields.Integer(allow_none=True, required=True, metadata={
        "description": "executions of its listeners scheduled or running"})


class PlatformRatesSchema(Strict):
    at = fields.Float(required=True, metadata={"description": "the end of the interval"})
    span_s = Number(required=True)
    sent = Number(required=True)
    delivered = Number(required=True)
    acked = Number(required=True)
    dead_lettered = Number(required=True)
    refused = Number(required=True)
    refused_by_reason = fields.Dict(keys=fields.String(), values=Number(), required=True)


class OverviewSchema(Strict):
    sampled_at = fields.Float(allow_none=True, required=True, metadata={
        "description": "the last sample (every 10 s or more, by the maintenance lease holder); null before it"})
    interval_s = Number(allow_none=True, required=True, metadata={
        "description": "between the last two samples: what traffic and refused are over"})
    tenant_count = fields.Integer(required=True)
    tenants = fields.List(fields.Nested(TenantFiguresSchema), required=True, metadata={
        "description": "the first `limit` tenants by `sort`, highest first"})
    rates = fields.List(fields.Nested(PlatformRatesSchema), required=True, metadata={
        "description": "the platform's messages a second over each sampled interval of the last hour, oldest first"})
