"""One execution, as it runs in an rq work horse: take the batch, run the process, send, settle.

The job carries only the main node's URL, the listener's name, the
execution's id and its token. Everything else comes over HTTP: the work
horse takes its batch (the main node starts the ack clock only now, so a job
that waited in rq held nothing), runs the process while a thread extends the
deliveries, flushes the outputs in requests of at most ``max_send_documents`` documents, and
finishes: on success the main node records the processed messages and acks
them, on failure it nacks them (redelivery schedule, then the dead letter
queue). A work horse that dies leaves its batch in flight; the ack time-out
brings it back.

Nothing of a tenant's data reaches rq: a failed process is reported to the
main node and the job itself returns normally; only a failure to reach the
main node fails the job, with a message that carries no tenant data.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import StatusCode

from atomq import defaults, telemetry
from atomq.client import AtomqClient, BatchingSender, Extender
from atomq.errors import EngineUnavailable, QuotaExceeded, RateLimited
from atomq.tenants import execution_tokens
from atomq.workers import processes
from atomq.workers.context import ExecutionContext, InputMessage

log = logging.getLogger("atomq.execution")

QUOTA_RETRY_S = 10.0
"""How long a listener waits after its sends passed a disk quota: the quota frees only when
messages are consumed, which the listener cannot hasten."""


def _describe(exc: BaseException) -> str:
    line = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return line[:defaults.MAX_LISTENER_ERROR_CHARS]


def run_registered(process_name: str, ctx: ExecutionContext) -> None:
    """The fork engine: the registered process, called in this work horse."""
    processes.load(process_name)(ctx)


def run(api_url: str, listener: str, execution: str, token: str,
        max_send_documents: int = defaults.MAX_SEND_DOCUMENTS,
        runner: Callable[[str, ExecutionContext], None] = run_registered) -> None:
    """The rq job function: runs one execution of ``listener`` against the main node at ``api_url``.

    ``runner`` runs the process on the batch: in this work horse (the fork
    engine), or as a DataFrame pipeline on Spark (``atomq.spark_workers``).

    With tracing on, the execution continues the trace of its first message
    (``telemetry.execution_span``) and its requests after taking the batch
    carry that span's context, so the node's spans for its sends and
    finish, and the messages it sends, are part of it.
    """
    base = f"/v1/listeners/{listener}/executions/{execution}"
    tenant = execution_tokens.unverified_tenant(token)
    with telemetry.log_context(tenant=tenant, listener=listener), AtomqClient(api_url, token) as client:
        started_ns = time.time_ns()
        started = client.request("POST", f"{base}/start")
        if not started["run"]:
            return
        spec = started["listener"]
        deliveries = started["messages"]
        with telemetry.log_context(queue=spec.get("queue")), telemetry.execution_span(
                tenant=tenant, listener=listener, execution=execution, queue=spec.get("queue"),
                messages=deliveries, started_ns=started_ns, batch_taken_ns=time.time_ns()) as span:
            headers = telemetry.trace_headers()
            client.headers.update(headers)
            fresh = [InputMessage.from_api(m) for m in deliveries if not m.get("processed")]
            sender = BatchingSender(client, max_send_documents)
            outcome: dict[str, Any] = {"ok": True, "processed": [m["id"] for m in deliveries]}
            if fresh:
                extender = Extender(api_url, token, f"{base}/extend", float(started["ack_timeout_s"]),
                                    headers=headers)
                extender.start()
                try:
                    ctx = ExecutionContext(listener, execution, fresh, spec.get("settings") or {}, sender.add,
                                           flush=sender.flush,
                                           browse=lambda q: [InputMessage.from_api(m) for m in client.browse(q)])
                    runner(spec["process"], ctx)
                    sender.flush()
                except (RateLimited, QuotaExceeded, EngineUnavailable) as exc:
                    # Refused for a while, not for anything in the messages: they come back
                    # without counting a failed delivery, and the listener backs off.
                    wait = exc.retry_after if isinstance(exc, RateLimited) else getattr(exc, "retry_after_s",
                                                                                         QUOTA_RETRY_S)
                    outcome = {"ok": False, "error": _describe(exc), "retry_after_s": wait}
                    span.set_status(StatusCode.ERROR, type(exc).__name__)
                except Exception as exc:  # a process may raise anything; it fails the execution, not the worker
                    log.info("execution %s of listener %s failed: %s", execution, listener, type(exc).__name__)
                    outcome = {"ok": False, "error": _describe(exc)}
                    # The type only, in the span as in the log: the message may quote the tenant's data.
                    span.set_status(StatusCode.ERROR, type(exc).__name__)
                finally:
                    extender.stop()
            client.request("POST", f"{base}/finish", outcome)
