"""Structured logs: JSON lines that say which tenant, queue, listener and trace a line is about, never a key.

A request's lines are produced the way a real failure produces them: the
store raises (with the API key in its message, to prove the safety net),
and the API logs the unexpected error with its traceback. An execution's
lines come from a process that logs through ``ctx.log``. Tracing is on in
those tests (an in-memory exporter), so the lines carry the ids of the spans
they were logged in; every test restores the logging and tracing it changed.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from rq import Queue, SimpleWorker

from atomq import telemetry
from atomq.client import AtomqClient
from atomq.errors import AtomqError
from atomq.platform import Sent
from atomq.platform.store import listener_keys as lk
from atomq.workers import processes
from atomq.workers.context import ExecutionContext
from atomq.workers.supervisor import Supervisor, SupervisorConfig
from support.in_process_node import InProcessNode
from support.waiting import wait_until

OWNER = "owner-key-for-log-tests"


def talk(ctx: ExecutionContext) -> None:
    """A process that says what it does (registered as ``talk`` by the tests below)."""
    ctx.log.info("processing %d message(s)", len(ctx.messages))


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """JSON logging into a buffer; the handler and atomq's level are put back afterwards."""
    level = logging.getLogger("atomq").level
    stream = io.StringIO()
    handler = telemetry.setup_logging("json", stream)
    yield stream
    logging.getLogger().removeHandler(handler)
    logging.getLogger("atomq").setLevel(level)


@pytest.fixture
def node(spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessNode]:
    monkeypatch.setenv(processes.FORK.env, "talk=test_logs:talk")
    processes.FORK.clear()
    with InProcessNode(tmp_path, OWNER) as served:
        yield served
    processes.FORK.clear()


def parsed(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_requests_lines_carry_its_tenant_queue_and_trace_and_never_its_key(
        lines: io.StringIO, spans: InMemorySpanExporter, node: InProcessNode,
        monkeypatch: pytest.MonkeyPatch) -> None:
    created = node.owner.create_tenant("logged")
    key = created["api_key"]

    def broken_store(*args: Any, **kwargs: Any) -> Sent:
        raise RuntimeError(f"the store failed for Authorization: Bearer {key} ({key})")

    with AtomqClient(node.url, key) as api:
        api.put_queue("orders")
        monkeypatch.setattr(node.services.queues, "send_batch", broken_store)
        with pytest.raises(AtomqError) as failed:
            api.send_texts("orders", ["lost"])
    assert failed.value.http_status == 500

    wait_until(lambda: any(s.kind is SpanKind.SERVER and s.status.status_code.name == "ERROR"
                           for s in spans.get_finished_spans()), 5, "the failed request's span")
    (request_span,) = [s for s in spans.get_finished_spans()
                       if s.kind is SpanKind.SERVER and s.status.status_code.name == "ERROR"]
    (line,) = [line for line in parsed(lines) if line["message"] == "unexpected error serving a request"]
    assert (line["level"], line["logger"]) == ("ERROR", "atomq.api")
    assert line["time"].endswith("Z")
    assert (line["tenant"], line["queue"]) == (created["id"], "orders")
    assert "listener" not in line
    assert line["trace_id"] == f"{request_span.context.trace_id:032x}"
    assert line["span_id"] == f"{request_span.context.span_id:016x}"
    assert "RuntimeError: the store failed for Authorization: Bearer [redacted] ([redacted])" in line["exception"]
    assert key not in lines.getvalue()
    assert key.split("_", 2)[2] not in lines.getvalue(), "nor its secret (which may hold _ itself)"


def test_an_executions_lines_carry_its_tenant_listener_queue_and_trace(
        lines: io.StringIO, spans: InMemorySpanExporter, node: InProcessNode) -> None:
    created = node.owner.create_tenant("executing")
    with AtomqClient(node.url, created["api_key"]) as api:
        api.put_queue("in")
        api.request("PUT", "/v1/listeners/talker", {"queue": "in", "process": "talk"})
        api.send_texts("in", ["one", "two"])
        supervisor = Supervisor(node.services.queues, node.services.tenants.execution_tokens, node.rq,
                                SupervisorConfig(api_url=node.url, execution_timeout_s=30), holder="test-node",
                                tenant_exists=node.services.tenants.exists)
        queue = Queue(lk.rq_queue_name(created["id"]), connection=node.rq)

        def executed() -> bool:
            supervisor.round()
            SimpleWorker([queue], connection=node.rq).work(burst=True, logging_level="WARNING")
            return any(line["logger"] == "atomq.process.talker" for line in parsed(lines))

        wait_until(executed, 20, "the process's line")
    (line,) = [line for line in parsed(lines) if line["logger"] == "atomq.process.talker"]
    (execution,) = [s for s in spans.get_finished_spans() if s.name == "atomq.execution"]
    assert line["message"] == "processing 2 message(s)"
    assert (line["tenant"], line["listener"], line["queue"]) == (created["id"], "talker", "in")
    assert (line["trace_id"], line["span_id"]) == (f"{execution.context.trace_id:032x}",
                                                   f"{execution.context.span_id:016x}")
    assert "aqx_" not in lines.getvalue() and created["api_key"] not in lines.getvalue()


def test_text_lines_end_with_the_context_that_is_known() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(telemetry.TextFormatter())
    handler.addFilter(telemetry.ContextFilter())
    logger = logging.getLogger("atomq.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with telemetry.log_context(tenant="t_1", listener="l1"):
            logger.info("inside, with aqx_c2VjcmV0LXRva2Vu.c2lnbmF0dXJl")
        logger.info("outside")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    inside, outside = stream.getvalue().splitlines()
    assert inside.endswith(" INFO atomq.test_logs: inside, with [redacted] [tenant=t_1 listener=l1]")
    assert outside.endswith(" INFO atomq.test_logs: outside")


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        telemetry.setup_logging("xml")
