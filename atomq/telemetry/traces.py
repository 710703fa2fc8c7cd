"""Traces and structured logs: how a process sets up OpenTelemetry and logging, in one place.

Traces follow a message from its send to the execution that consumes it.
The node's request spans come from the Flask and Redis instrumentations; a
send stamps each message that has no ``traceparent`` of its own with the
request span's W3C context (``stamp_traceparents``); the execution that
takes the message continues that trace (``execution_span``), shows the time
the message waited as an ``atomq.wait`` span, and sends its own requests
with a ``traceparent`` header (``trace_headers``), so the node's spans for
them, and the messages they store, belong to the same trace.

Which exporter, if any, is the standard ``OTEL_*`` variables' choice (see
``exporters_from_environment``); the SDK reads everything else itself (the
OTLP endpoint, headers and timeout, the sampler, the batch processor's
limits, the resource). With no exporter nothing is instrumented: the app
and redis-py stay as they are and the send view's one call returns after
testing a module global, since the send is the hot path.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from flask import Flask
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.environment_variables import OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_SDK_DISABLED,
)
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

if TYPE_CHECKING:
    from atomq.platform import OutgoingMessage

log = logging.getLogger("atomq.telemetry")

DEFAULT_SERVICE_NAME = "atomq"
FLASK_EXCLUDED_URLS_ENV = "OTEL_PYTHON_FLASK_EXCLUDED_URLS"
DEFAULT_EXCLUDED_URLS = "/v1/health,/v1/ready"
"""Polled by load balancers: a trace each would bury the ones that matter (the variable overrides it)."""

_provider: TracerProvider | None = None
_tracer: trace.Tracer | None = None
_configured = False
_redis_instrumented = False
_apps: weakref.WeakSet[Flask] = weakref.WeakSet()
_w3c = TraceContextTextMapPropagator()


# -- tracing: setup ----------------------------------------------------------------------------


def exporters_from_environment() -> list[SpanExporter]:
    """The span exporters the standard variables ask for.

    ``OTEL_TRACES_EXPORTER`` (a comma-separated list) names them: ``otlp``
    (OTLP over HTTP; the exporter reads its own ``OTEL_EXPORTER_OTLP_*``
    settings), ``console`` or ``none``. Unset, OTLP when an OTLP endpoint
    is set and none otherwise: a node nobody configured exports nothing.
    ``OTEL_SDK_DISABLED=true`` turns tracing off whatever the rest says.
    """
    if os.environ.get(OTEL_SDK_DISABLED, "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in os.environ.get(OTEL_TRACES_EXPORTER, "").split(",") if n.strip()]
    if not names and any(os.environ.get(v) for v in (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)):
        names = ["otlp"]
    exporters: list[SpanExporter] = []
    for name in names:
        if name in ("otlp", "otlp_proto_http"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            log.warning("%s=%s: atomq exports traces with otlp or console; ignoring %r", OTEL_TRACES_EXPORTER,
                        os.environ.get(OTEL_TRACES_EXPORTER), name)
    return exporters


class _NoOrphanClientSpans(Sampler):
    """The environment's sampler, except that a client span with no parent is dropped.

    With Redis instrumented, every command of the node's maintenance loop
    and listener supervisor (several a second, outside any request) would
    otherwise start a trace of its own; inside a request they are kept.
    """

    def __init__(self, delegate: Sampler) -> None:
        self.delegate = delegate

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str,
                      kind: SpanKind | None = None, attributes: Attributes = None,
                      links: Sequence[Link] | None = None, trace_state: trace.TraceState | None = None,
                      ) -> SamplingResult:
        if kind is SpanKind.CLIENT and not trace.get_current_span(parent_context).get_span_context().is_valid:
            return SamplingResult(Decision.DROP)
        return self.delegate.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return f"NoOrphanClientSpans{{{self.delegate.get_description()}}}"


def _new_provider(processors: Sequence[SpanProcessor], shutdown_on_exit: bool) -> TracerProvider:
    # service.name: OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES when they name one, else "atomq".
    named = SERVICE_NAME in OTELResourceDetector().detect().attributes
    provider = TracerProvider(resource=Resource.create({} if named else {SERVICE_NAME: DEFAULT_SERVICE_NAME}),
                              shutdown_on_exit=shutdown_on_exit)
    provider.sampler = _NoOrphanClientSpans(provider.sampler)  # read by get_tracer, so before any tracer exists
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def setup_tracing(exporter: SpanExporter | None = None) -> bool:
    """Sets up this process's tracing; True when it is on.

    Without ``exporter``, once per process: the environment chooses the
    exporters (``exporters_from_environment``), each behind a
    BatchSpanProcessor, and the provider becomes OpenTelemetry's global one
    so that a tenant's process making spans of its own joins the trace; a
    second call changes nothing. Call it where the process that makes spans
    runs: gunicorn's worker after its fork (``Node.load``), rq's worker
    before it forks its work horses (the SDK starts the BatchSpanProcessor's
    thread again in each forked child, so the provider is not rebuilt, and
    its exporter not imported again, for every execution; ``flush`` sends a
    work horse's spans before rq's ``os._exit``).

    With ``exporter`` (tests): spans go to it synchronously, through a
    provider of this module's own that replaces any earlier one, since
    OpenTelemetry lets a process set its global provider only once;
    ``shutdown_tracing`` undoes it.
    """
    global _provider, _tracer, _configured
    if exporter is None:
        if _configured:
            return _tracer is not None
        _configured = True
        exporters = exporters_from_environment()
        if not exporters:
            return False
        provider = _new_provider([BatchSpanProcessor(e) for e in exporters], shutdown_on_exit=True)
        trace.set_tracer_provider(provider)
    else:
        shutdown_tracing()
        _configured = True
        provider = _new_provider([SimpleSpanProcessor(exporter)], shutdown_on_exit=False)
    _provider = provider
    _tracer = provider.get_tracer("atomq")
    return True


def tracing() -> bool:
    """True when this process makes spans."""
    return _tracer is not None


def instrument_app(app: Flask) -> None:
    """A span per request of ``app`` (continuing an incoming ``traceparent``) and per Redis
    command made while serving it, when tracing is on; nothing at all when it is off.

    Call it before any ``before_request`` is registered, so authentication runs inside the
    request's span. The instrumentation records no metrics (a no-op meter provider): the
    node's metrics are the same with tracing on or off.
    """
    global _redis_instrumented
    if _provider is None:
        return
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.metrics import NoOpMeterProvider

    excluded = None if FLASK_EXCLUDED_URLS_ENV in os.environ else DEFAULT_EXCLUDED_URLS
    FlaskInstrumentor.instrument_app(app, tracer_provider=_provider,  # type: ignore[no-untyped-call]
                                     meter_provider=NoOpMeterProvider(), excluded_urls=excluded,
                                     enable_commenter=False)
    _apps.add(app)
    if not _redis_instrumented:
        RedisInstrumentor().instrument(tracer_provider=_provider)
        _redis_instrumented = True


def flush() -> None:
    """Exports the spans not yet sent; a work horse calls it before rq's ``os._exit``, which
    skips the provider's atexit flush. Bounded by the exporter's own timeout
    (``OTEL_EXPORTER_OTLP_TIMEOUT``, 10 s) when the collector does not answer."""
    if _provider is not None:
        _provider.force_flush()


def shutdown_tracing() -> None:
    """Ends tracing in this process: the instrumentation removed, the spans flushed; a later
    ``setup_tracing`` starts again (tests, where the instrumentation is process-global)."""
    global _provider, _tracer, _configured, _redis_instrumented
    if _apps:
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        for app in list(_apps):
            FlaskInstrumentor.uninstrument_app(app)  # type: ignore[no-untyped-call]
        _apps.clear()
    if _redis_instrumented:
        from opentelemetry.instrumentation.redis import RedisInstrumentor

        RedisInstrumentor().uninstrument()
        _redis_instrumented = False
    if _provider is not None:
        _provider.shutdown()
    _provider, _tracer, _configured = None, None, False


# -- tracing: messages and executions ----------------------------------------------------------


def stamp_traceparents(messages: Sequence[OutgoingMessage]) -> None:
    """Gives each message without a ``traceparent`` the current span's, so the execution that
    consumes it continues this trace; a client's own is kept. When tracing is off this is one
    test of a module global: the send is the hot path."""
    if _tracer is None:
        return
    carrier: dict[str, str] = {}
    _w3c.inject(carrier)  # the W3C propagator writes nothing for an invalid (absent) span
    value = carrier.get("traceparent")
    if value is None:
        return
    for message in messages:
        if message.traceparent is None:
            message.traceparent = value


def trace_headers() -> dict[str, str]:
    """The current span's context as request headers (the global propagator's, W3C
    ``traceparent`` by default), for the requests an execution makes to the node."""
    if _tracer is None:
        return {}
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


def _span_context(value: str) -> SpanContext | None:
    context = trace.get_current_span(_w3c.extract({"traceparent": value})).get_span_context()
    return context if context.is_valid else None


@contextmanager
def execution_span(*, tenant: str | None, listener: str, execution: str, queue: str | None,
                   messages: Sequence[Mapping[str, Any]], started_ns: int, batch_taken_ns: int,
                   ) -> Iterator[trace.Span]:
    """The span of one execution, current inside the block (a non-recording span when tracing is off).

    ``messages`` are the batch as the API delivered it. The span's parent is
    the first message's ``traceparent``; the other messages' distinct
    contexts are links. Each distinct context also gets an ``atomq.wait``
    span, from the earliest ``enqueued_at`` of its messages to
    ``started_ns``, when the execution asked for its batch: the wait shows
    in the sender's trace. An ``atomq.take_batch`` client span covers the
    request for the batch, which went out before its messages, and so the
    parent, were known.
    """
    if _tracer is None:
        yield trace.INVALID_SPAN
        return
    waited: dict[str, tuple[SpanContext, int]] = {}
    for message in messages:
        value = message.get("traceparent")
        if not isinstance(value, str):
            continue
        enqueued_at = message.get("enqueued_at")
        since = min(int(float(enqueued_at) * 1e9), started_ns) if enqueued_at else started_ns
        if value in waited:
            waited[value] = (waited[value][0], min(waited[value][1], since))
        elif (parsed := _span_context(value)) is not None:
            waited[value] = (parsed, since)
    parents = list(waited.values())
    base: dict[str, Any] = {"atomq.listener": listener}
    if tenant:
        base["atomq.tenant"] = tenant
    if queue:
        base["atomq.queue"] = queue
    for context, since in parents:
        wait = _tracer.start_span("atomq.wait", context=trace.set_span_in_context(trace.NonRecordingSpan(context)),
                                  start_time=since, attributes=base)
        wait.end(end_time=started_ns)
    parent = trace.set_span_in_context(trace.NonRecordingSpan(parents[0][0])) if parents else Context()
    span = _tracer.start_span(
        "atomq.execution", context=parent, kind=SpanKind.CONSUMER, start_time=started_ns,
        links=[Link(context) for context, _ in parents[1:]],
        attributes={**base, "atomq.execution": execution, "atomq.batch_size": len(messages)})
    with trace.use_span(span, end_on_exit=True):
        _tracer.start_span("atomq.take_batch", kind=SpanKind.CLIENT, start_time=started_ns).end(batch_taken_ns)
        yield span
