"""The one error tree of atomq.

Every error carries a stable snake_case ``code``, a message that states the
rule that was broken, and ``details`` with the data a caller needs to act on
it. The HTTP layer maps ``http_status`` and these three fields to the JSON
error body in one place, so library and API users see the same facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class AtomqError(Exception):
    """Base of every error atomq raises on purpose."""

    http_status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """The JSON error body's ``error`` member."""
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidInput(AtomqError):
    """The request breaks a rule about its own content; ``details['field']`` names the field."""

    http_status = 400
    code = "invalid_input"


class Forbidden(AtomqError):
    """The key is valid but may not make this call (a tenant key on an owner-only call)."""

    http_status = 403
    code = "forbidden"


class NotFound(AtomqError):
    """The resource does not exist in the caller's keyspace (another tenant's looks the same)."""

    http_status = 404
    code = "not_found"


class Conflict(AtomqError):
    """The request contradicts the resource's current state."""

    http_status = 409
    code = "conflict"


class TooLarge(AtomqError):
    """The request or one of its parts is over a size limit."""

    http_status = 413
    code = "too_large"


class RateLimited(AtomqError):
    """A rate-limit window is full; ``retry_after`` is whole seconds until it closes."""

    http_status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, **details: Any) -> None:
        super().__init__(message, retry_after=retry_after, **details)
        self.retry_after = retry_after


class QuotaExceeded(AtomqError):
    """Storing the request would pass a tenant quota or the server's disk limit."""

    http_status = 507
    code = "quota_exceeded"

    def __init__(self, message: str, *, limit: int, used: int, **details: Any) -> None:
        super().__init__(message, limit=limit, used=used, **details)
        self.limit = limit
        self.used = used


class QueueFull(QuotaExceeded):
    """A send would pass a limit of its queue, and the queue's overflow refuses it rather than drop
    waiting messages: 507, or 429 with ``Retry-After`` once a ``flow_control`` queue held the send as
    long as it may (raised as :class:`RateLimited` with this code). ``details`` name the setting
    (``limit``), its ``max`` and the ``count`` the queue holds; as a QuotaExceeded, ``limit`` is the
    max and ``used`` the count."""

    code = "queue_full"

    def __init__(self, message: str, *, limit: str, max: int, count: int, **details: Any) -> None:
        AtomqError.__init__(self, message, limit=limit, max=max, count=count, **details)
        self.limit = max
        self.used = count
        self.can_fit = True
        """False when the send alone is past the limit: no wait for room can help it."""


class StorageError(AtomqError):
    """Redis refused or could not be reached; the request changed nothing it reports as done.

    Over HTTP a 503 whose ``Retry-After`` is ``retry_after`` seconds: long enough
    for a failover or a restart of the store, short enough not to stall clients.
    """

    http_status = 503
    code = "storage_unavailable"
    retry_after = 5


class OutcomeUnknown(StorageError):
    """The store did not answer a write in time: it may have stored it or not. A retry with the same
    Idempotency-Key is safe: it answers with what the first stored, or stores it now."""

    code = "outcome_unknown"
    retry_after = 1


class StorageFull(StorageError):
    """Redis reached its ``maxmemory`` and refuses writes (it never evicts our keys)."""

    code = "storage_full"


class MemoryLow(StorageError):
    """The store's memory state refuses this send (by its lowest message priority) or the creation
    of a queue, subscriber or listener: 503 with ``Retry-After``, until consumers free memory.
    ``details``: the ``memory_state``, and the ``priority`` below which sends are refused."""

    code = "memory_low"


class NotDurable(StorageError):
    """A send to a ``sync`` queue was stored but not synced to disk (or to ``min_replicas`` replicas)
    within ``sync_timeout_ms``: 503 with ``Retry-After``. The send may survive or not; a retry with
    the same ``dedupe_id`` is safe (it answers with the original ids, once synced)."""

    code = "not_durable"


class UnsafeStorage(AtomqError):
    """The Redis server could lose data behind atomq's back (it may evict keys)."""

    code = "unsafe_storage"


class FormatVersionError(AtomqError):
    """The stored data was written by a newer atomq whose format this one does not know."""

    code = "format_version"


class EmbeddedServerError(AtomqError):
    """The embedded Valkey server could not be started or stopped."""

    code = "embedded_server_error"


class DataDirInUse(AtomqError):
    """Another atomq process (a running node) holds the data directory; ``details['pid']`` names it."""

    http_status = 409
    code = "data_dir_in_use"


class CannotListen(AtomqError):
    """The node cannot listen on its address: the port is taken (by another node or program), or
    the host is not an address of this machine; ``details`` name the host and port."""

    code = "cannot_listen"


class Unauthorized(AtomqError):
    """The request carries no API key, or one that is malformed, unknown or revoked.

    The message never repeats the key, and says the same for an unknown key
    id and a wrong secret, so a caller learns nothing about which keys exist.
    """

    http_status = 401
    code = "unauthorized"


class SqsError(AtomqError):
    """A refusal of the SQS-compatible front in SQS's own terms, where no native error says it
    (a bad signature, an unknown action, a batch's rules).

    ``shape`` is the name of the error shape AWS SDKs raise (``SignatureDoesNotMatch``,
    ``InvalidParameterValue``); the front's table (``atomq.api.sqs.errors``) gives its legacy
    code and HTTP status. Native errors reach that front as they are and are mapped there.
    """

    http_status = 400
    code = "sqs_error"

    def __init__(self, shape: str, message: str, **details: Any) -> None:
        super().__init__(message, shape=shape, **details)
        self.shape = shape


class JavaMissing(AtomqError):
    """Spark cannot start: no Java 17 or 21 runtime was found."""

    http_status = 503
    code = "java_missing"


class SparkPythonMissing(AtomqError):
    """Spark's Python workers would run an interpreter that cannot import atomq, so the
    ``atomq`` data source would fail inside Spark; the message says which and the fix."""

    http_status = 503
    code = "spark_python_missing"


class ExecutionTimeLimit(AtomqError):
    """An execution ran past its time limit and was stopped: it failed, like any execution
    whose process raised, and its messages count a failed delivery."""

    http_status = 500
    code = "execution_time_limit"


class EngineUnavailable(AtomqError):
    """The engine that runs executions (Spark) is not there: a batch it could not run
    is given back without counting a failed delivery, and the listener waits."""

    http_status = 503
    code = "engine_unavailable"
    retry_after_s = 10.0


STATUS_ERRORS: tuple[type[AtomqError], ...] = (
    InvalidInput, Unauthorized, Forbidden, NotFound, Conflict, TooLarge, RateLimited, StorageError, QuotaExceeded,
)
"""The class each HTTP error status stands for when nothing more is known of an error: a 409 is a
Conflict, though a DataDirInUse is a 409 too. Each class holds its own status."""


def _family(cls: type[AtomqError]) -> Iterator[type[AtomqError]]:
    """``cls`` and its subclasses, each before its own subclasses."""
    yield cls
    for sub in cls.__subclasses__():
        yield from _family(sub)


def class_for_code(code: str) -> type[AtomqError] | None:
    """The class whose own code is ``code``; None for a code one raise chose (``too_many_queues``, say).

    Looked up each time rather than cached, so a subclass defined anywhere is found.
    """
    return next((cls for cls in _family(AtomqError) if cls.code == code), None)


def class_for_status(http_status: int) -> type[AtomqError] | None:
    """The class an HTTP error status stands for (:data:`STATUS_ERRORS`); None for a status no
    atomq error has, like 405."""
    return next((cls for cls in STATUS_ERRORS if cls.http_status == http_status), None)
