"""Traces and structured logs: how a process sets up OpenTelemetry and logging, in one place.

``traces``: the TracerProvider from the standard ``OTEL_*`` variables, the
Flask and Redis instrumentations, the ``traceparent`` a send stores and the
execution span that continues it. ``logs``: text or JSON lines carrying the
tenant, queue, listener and trace ids known where a line is written.
"""

from atomq.telemetry.logs import (
    LOG_FORMATS,
    ContextFilter,
    JsonFormatter,
    TextFormatter,
    adopt_handlers,
    log_context,
    redact,
    setup_logging,
)
from atomq.telemetry.traces import (
    execution_span,
    exporters_from_environment,
    flush,
    instrument_app,
    setup_tracing,
    shutdown_tracing,
    stamp_traceparents,
    trace_headers,
    tracing,
)

__all__ = [
    "LOG_FORMATS", "ContextFilter", "JsonFormatter", "TextFormatter", "adopt_handlers", "execution_span",
    "exporters_from_environment", "flush", "instrument_app", "log_context", "redact", "setup_logging",
    "setup_tracing", "shutdown_tracing", "stamp_traceparents", "trace_headers", "tracing",
]
