"""Traces: one trace from a send through the wait and the execution to the execution's own sends.

In-process tests run a node of their own (tests/support/in_process_node.py) with an
in-memory span exporter installed through ``telemetry.setup_tracing`` and
drive the execution with rq's SimpleWorker, as test_listeners.py does. The
last test runs ``atomq serve --workers 1`` against a small OTLP/HTTP
receiver: gunicorn's workers and the forked work horses set up and flush
their own spans. The instrumentation is process-global: every test that
turns tracing on turns it off again.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import ConsoleSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from atomq import telemetry
from atomq.client import AtomqClient
from support.in_process_executions import run_executions
from support.in_process_node import InProcessNode
from support.ports import free_port
from support.served_node import ServeFactory
from support.waiting import wait_until

OWNER = "owner-key-for-tracing-tests"
SEND_ROUTE = "/v1/queues/<qname:name>/messages"
CLIENT_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTEL_VARIABLES = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_SDK_DISABLED")


@pytest.fixture
def traced_node(spans: InMemorySpanExporter, tmp_path: Path) -> Iterator[InProcessNode]:
    """A node made after tracing was set up, so its app is instrumented."""
    with InProcessNode(tmp_path, OWNER) as node:
        yield node


@dataclass
class Tenant:
    id: str
    api: AtomqClient


@pytest.fixture
def tenant(traced_node: InProcessNode) -> Iterator[Tenant]:
    created = traced_node.owner.create_tenant(f"traced-{secrets.token_hex(4)}")
    with AtomqClient(traced_node.url, created["api_key"]) as api:
        yield Tenant(created["id"], api)


def trace_and_span(traceparent: str) -> tuple[int, int]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return int(trace_id, 16), int(span_id, 16)


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def is_send(span: ReadableSpan) -> bool:
    attributes = span.attributes or {}
    return span.kind is SpanKind.SERVER and attributes.get("http.route") == SEND_ROUTE \
        and attributes.get("http.method", attributes.get("http.request.method")) == "POST"


def test_one_trace_holds_the_send_the_wait_the_execution_and_its_sends(
        spans: InMemorySpanExporter, traced_node: InProcessNode, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("in")
    api.put_queue("out")
    api.request("PUT", "/v1/listeners/fwd", {"queue": "in", "process": "forward", "settings": {"to": "out"}})
    api.send_texts("in", ["a", "b"])
    run_executions(traced_node, tenant.id, lambda: api.queue("out")["depth"] == 2)

    def finished() -> list[ReadableSpan]:
        return list(spans.get_finished_spans())

    # The server ends a request's span after the response went out: wait for the execution's last request.
    wait_until(lambda: any(s.attributes and str(s.attributes.get("http.route", "")).endswith("/finish")
                           for s in finished()), 5, "the span of the execution's finish")
    done = finished()
    (execution,) = [s for s in done if s.name == "atomq.execution"]
    assert execution.parent is not None
    (send,) = [s for s in done if s.context.span_id == execution.parent.span_id]
    assert is_send(send) and send.parent is None, "the client's send request is the trace's root"
    trace_id = send.context.trace_id
    assert execution.context.trace_id == trace_id
    assert execution.kind is SpanKind.CONSUMER
    assert dict(execution.attributes or {}) == {
        "atomq.tenant": tenant.id, "atomq.listener": "fwd", "atomq.queue": "in",
        "atomq.execution": dict(execution.attributes or {})["atomq.execution"], "atomq.batch_size": 2}

    (wait,) = [s for s in done if s.name == "atomq.wait"]
    assert wait.parent is not None and wait.parent.span_id == send.context.span_id
    assert wait.context.trace_id == trace_id
    assert wait.start_time is not None and execution.start_time is not None
    assert send.start_time is not None and send.start_time - 10**6 <= wait.start_time <= execution.start_time
    assert wait.end_time == execution.start_time

    under_execution = children(done, execution)
    assert {s.name for s in under_execution if s.kind is SpanKind.CLIENT} == {"atomq.take_batch"}
    (forward,) = [s for s in under_execution if is_send(s)]
    assert any(str((s.attributes or {}).get("http.route", "")).endswith("/finish") for s in under_execution)
    assert all(s.context.trace_id == trace_id for s in under_execution)
    # Redis is instrumented too: the store's commands are children of the request that made them.
    assert any(s.kind is SpanKind.CLIENT for s in children(done, forward))

    stored = list(api.browse("out"))
    assert len(stored) == 2
    for message in stored:
        assert trace_and_span(message["traceparent"]) == (trace_id, forward.context.span_id)


def test_with_tracing_on_a_clients_traceparent_is_kept_and_the_others_get_the_requests(
        spans: InMemorySpanExporter, tenant: Tenant) -> None:
    api = tenant.api
    api.put_queue("q")
    api.send("q", [{"documents": [{"data": "mine"}], "traceparent": CLIENT_TRACEPARENT},
                   {"documents": [{"data": "stamped"}]}])
    mine, stamped = list(api.browse("q"))
    assert mine["traceparent"] == CLIENT_TRACEPARENT
    wait_until(lambda: any(is_send(s) for s in spans.get_finished_spans()), 5, "the send's span")
    (send,) = [s for s in spans.get_finished_spans() if is_send(s)]
    assert trace_and_span(stamped["traceparent"]) == (send.context.trace_id, send.context.span_id)


def test_with_tracing_off_a_send_stores_only_the_traceparent_a_client_gave(tmp_path: Path) -> None:
    assert not telemetry.tracing()
    assert not hasattr(redis.Redis.execute_command, "__wrapped__"), "an earlier test left Redis instrumented"
    with InProcessNode(tmp_path, OWNER) as node:
        assert not getattr(node.app, "_is_instrumented_by_opentelemetry", False)
        created = node.owner.create_tenant("untraced")
        with AtomqClient(node.url, created["api_key"]) as api:
            api.put_queue("q")
            api.send("q", [{"documents": [{"data": "plain"}]},
                           {"documents": [{"data": "given"}], "traceparent": CLIENT_TRACEPARENT}])
            plain, given = list(api.browse("q"))
    assert "traceparent" not in plain
    assert given["traceparent"] == CLIENT_TRACEPARENT


def test_the_standard_variables_choose_the_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    def chosen() -> list[Any]:
        exporters = telemetry.exporters_from_environment()
        for exporter in exporters:
            exporter.shutdown()
        return exporters

    assert chosen() == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector.example:4318")
    (otlp,) = chosen()
    assert isinstance(otlp, OTLPSpanExporter)
    assert otlp._endpoint == "http://collector.example:4318/v1/traces"
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert chosen() == []
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,console")
    assert [type(e) for e in chosen()] == [OTLPSpanExporter, ConsoleSpanExporter]
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert chosen() == []


# -- atomq serve: gunicorn's workers and forked work horses ----------------------------------


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP receiver: keeps every span exported to /v1/traces, with its service.name."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), CollectorHandler)
        self.spans: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def received(self) -> list[tuple[str, Any]]:
        with self.lock:
            return list(self.spans)


class CollectorHandler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            for resource_spans in request.resource_spans:
                service = next(a.value.string_value for a in resource_spans.resource.attributes
                               if a.key == "service.name")
                for scope_spans in resource_spans.scope_spans:
                    self.server.spans.extend((service, span) for span in scope_spans.spans)
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads what arrived, not the access log."""


@pytest.fixture
def collector() -> Iterator[Collector]:
    """A receiver in a thread of this process. Asked for before ``serve``, it outlives the node,
    whose processes flush their spans as they stop."""
    collector = Collector()
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    try:
        yield collector
    finally:
        collector.shutdown()
        collector.server_close()
        thread.join(timeout=5)


@pytest.mark.slow
def test_served_node_and_forked_work_horses_export_one_trace_over_otlp(collector: Collector,
                                                                       serve: ServeFactory) -> None:
    node = serve("--workers", "1", http_workers=1,
                 env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
                      "OTEL_BSP_SCHEDULE_DELAY": "200"})
    with node.tenant_client("served") as api:
        api.put_queue("in")
        api.put_queue("out")
        api.request("PUT", "/v1/listeners/fwd", {"queue": "in", "process": "forward",
                                                 "settings": {"to": "out"}})
        api.send_texts("in", ["served"])
        wait_until(lambda: api.queue("out")["depth"] == 1, 30, "the forwarded message")
        (forwarded,) = list(api.browse("out"))

    def named(name: str) -> list[Any]:
        return [span for _, span in collector.received() if span.name == name]

    wait_until(lambda: named("atomq.execution"), 15, "the work horse's execution span")
    (execution,) = named("atomq.execution")
    (wait,) = named("atomq.wait")
    assert wait.parent_span_id == execution.parent_span_id and wait.trace_id == execution.trace_id
    wait_until(lambda: any(span.span_id == execution.parent_span_id for _, span in collector.received()),
               15, "the node's span of the first send")
    (send,) = [span for _, span in collector.received() if span.span_id == execution.parent_span_id]
    assert send.parent_span_id == b"", "the client's send request is the root"
    assert {service for service, _ in collector.received()} == {"atomq"}
    trace_id, span_id = trace_and_span(forwarded["traceparent"])
    assert trace_id == int.from_bytes(execution.trace_id, "big")
    wait_until(lambda: any(int.from_bytes(span.span_id, "big") == span_id for _, span in collector.received()),
               15, "the node's span of the execution's send")
    (forward,) = [span for _, span in collector.received() if int.from_bytes(span.span_id, "big") == span_id]
    assert forward.parent_span_id == execution.span_id
