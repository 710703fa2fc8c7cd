"""Structured logs: the standard ``logging`` module, with a handler that writes text or
JSON lines and a filter that adds the tenant, queue, listener, trace id and span id that
are known where the line is written (``setup_logging``)."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any, TextIO

from flask import g, has_request_context, request
from opentelemetry import trace

CONTEXT_FIELDS = ("tenant", "queue", "listener", "trace_id", "span_id")
LOG_FORMATS = ("text", "json")
_log_fields: ContextVar[Mapping[str, str]] = ContextVar("atomq_log_fields", default={})
_SECRETS = re.compile(r"\baqx?_[\w.-]{8,}|(?<=Bearer )[^\s\"'\\]+")
"""Tenant API keys (``aq_<id>_<secret>``), the default owner key (``aq_owner_...``),
execution tokens (``aqx_...``) and whatever follows ``Bearer``."""


def redact(text: str) -> str:
    """``text`` with anything shaped like an API key or a token replaced: a safety net under
    the rule that no code logs one (an owner key set by hand has no shape to recognise)."""
    return _SECRETS.sub("[redacted]", text)


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Adds ``fields`` (tenant, queue, listener) to the lines logged inside the block, in this
    thread or task; an execution's lines say which tenant and listener they are about."""
    token = _log_fields.set({**_log_fields.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _log_fields.reset(token)


def _request_fields() -> dict[str, str]:
    """The tenant of the Flask request being served (``g.atomq_tenant``, which
    ``atomq.api.auth.current_tenant`` records once it has resolved it, else the tenant of the
    request's key or execution token) and the queue or listener its path names."""
    fields: dict[str, str] = {}
    tenant = g.get("atomq_tenant") or getattr(g.get("principal"), "tenant_id", None)
    if tenant:
        fields["tenant"] = tenant
    name = (request.view_args or {}).get("name")
    if isinstance(name, str):
        if request.path.startswith("/v1/queues/"):
            fields["queue"] = name
        elif request.path.startswith("/v1/listeners/"):
            fields["listener"] = name
    return fields


class ContextFilter(logging.Filter):
    """Gives every record the context fields known where it is logged: the execution's
    (``log_context``), the Flask request's, and the current span's trace and span ids.

    Worked out per line written, not per request: a request that logs
    nothing pays nothing. A field given with ``extra=`` is kept.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        fields = dict(_log_fields.get())
        if has_request_context():
            fields.update(_request_fields())
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            fields["trace_id"] = f"{span.trace_id:032x}"
            fields["span_id"] = f"{span.span_id:016x}"
        for name in CONTEXT_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name))
        return True


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {name: value for name in CONTEXT_FIELDS if (value := getattr(record, name, None)) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``,
    the context fields that are known, and ``exception`` with the traceback.

    Written here rather than taken from python-json-logger: the line's shape
    is fixed and small, and what that library adds (field selection and
    renaming by format string) atomq has no use for; twenty lines spare
    every node and worker a dependency.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
            **_context(record),
        }
        if record.exc_info:
            line["exception"] = redact(self.formatException(record.exc_info))
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message [tenant=... trace_id=...]``, the traceback below."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        context = " ".join(f"{name}={value}" for name, value in _context(record).items())
        return redact(f"{line} [{context}]" if context else line)

    def formatException(self, ei: Any) -> str:
        return redact(super().formatException(ei))


class _AtomqHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``setup_logging`` installs, told apart from others so a second call replaces it."""


def setup_logging(log_format: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Writes the process's log records to stderr (or ``stream``), a line each, as ``text`` or
    ``json``, with the context filter; atomq's own loggers log from INFO, the rest from the
    root logger's level. Replaces the handler of an earlier call; returns the new one."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"the log format is one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    handler = _AtomqHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _AtomqHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    logging.getLogger("atomq").setLevel(logging.INFO)
    return handler


def adopt_handlers(logger: logging.Logger) -> None:
    """Gives the handlers a logger keeps of its own (gunicorn's error log) the format and
    context filter of ``setup_logging``'s handler, so every line of a process looks alike."""
    ours = next((h for h in logging.getLogger().handlers if isinstance(h, _AtomqHandler)), None)
    if ours is None or ours.formatter is None:
        return
    for handler in logger.handlers:
        handler.setFormatter(ours.formatter)
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
