"""SQS's errors as the SDKs read them, and the native errors in SQS's terms.

An SDK of the JSON protocol reads the error shape from ``__type``
(``com.amazonaws.sqs#QueueDoesNotExist``) and, SQS being "query compatible",
the legacy code from the ``x-amzn-query-error`` header (``<code>;Sender``):
botocore then raises ``client.exceptions.QueueDoesNotExist`` with
``Error.Code`` the legacy ``AWS.SimpleQueueService.NonExistentQueue`` (see its
``parsers.py``, ``_do_query_compatible_error_parse``). Without ``__type`` it
reports the HTTP status as the code, which is what the emulators got wrong.
The query protocol reads the same code from an XML ``ErrorResponse``.

``SHAPES`` is the table: shape -> (legacy code, HTTP status). The modelled
shapes and their codes are those of SQS's service model of 2012-11-05 (its
``awsQueryError`` traits, which the SDKs' generated error types carry); the
others are AWS's common errors (authentication, throttling, bad parameters).
"""

from __future__ import annotations

from atomq.errors import (
    AtomqError,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    QuotaExceeded,
    RateLimited,
    SqsError,
    StorageError,
    TooLarge,
    Unauthorized,
)

_LEGACY = "AWS.SimpleQueueService."

SHAPES: dict[str, tuple[str, int]] = {
    # modelled in SQS's service model
    "QueueDoesNotExist": (_LEGACY + "NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": (_LEGACY + "QueueDeletedRecently", 400),
    "PurgeQueueInProgress": (_LEGACY + "PurgeQueueInProgress", 403),
    "BatchEntryIdsNotDistinct": (_LEGACY + "BatchEntryIdsNotDistinct", 400),
    "BatchRequestTooLong": (_LEGACY + "BatchRequestTooLong", 400),
    "EmptyBatchRequest": (_LEGACY + "EmptyBatchRequest", 400),
    "InvalidBatchEntryId": (_LEGACY + "InvalidBatchEntryId", 400),
    "TooManyEntriesInBatchRequest": (_LEGACY + "TooManyEntriesInBatchRequest", 400),
    "MessageNotInflight": (_LEGACY + "MessageNotInflight", 400),
    "UnsupportedOperation": (_LEGACY + "UnsupportedOperation", 400),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", 400),
    "InvalidIdFormat": ("InvalidIdFormat", 400),
    "InvalidMessageContents": ("InvalidMessageContents", 400),
    "InvalidAttributeName": ("InvalidAttributeName", 400),
    "InvalidAttributeValue": ("InvalidAttributeValue", 400),
    "OverLimit": ("OverLimit", 403),
    "RequestThrottled": ("RequestThrottled", 400),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    # AWS's common errors
    "InvalidParameterValue": ("InvalidParameterValue", 400),
    "MissingParameter": ("MissingParameter", 400),
    "InvalidAction": ("InvalidAction", 400),
    "SerializationException": ("SerializationException", 400),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "RequestExpired": ("RequestExpired", 403),
    "AccessDenied": ("AccessDenied", 403),
    "ServiceUnavailable": ("ServiceUnavailable", 503),
    "InternalFailure": ("InternalFailure", 500),
}

SHAPE_PREFIX = "com.amazonaws.sqs#"
NO_SUCH_QUEUE = "The specified queue does not exist."
"""SQS's own message for QueueDoesNotExist, word for word: clients and tests compare it."""
INVALID_RECEIPT = "The input receipt handle is invalid."
"""SQS's own message for a malformed receipt handle (ReceiptHandleIsInvalid)."""


def legacy_code(shape: str) -> str:
    """The code the query protocol and ``x-amzn-query-error`` carry for ``shape``."""
    return SHAPES.get(shape, (shape, 400))[0]


def status_of(shape: str) -> int:
    return SHAPES.get(shape, (shape, 400))[1]


def fault_of(shape: str) -> str:
    """``Sender`` for the caller's mistakes, ``Receiver`` for the node's (SQS's error types)."""
    return "Receiver" if status_of(shape) >= 500 else "Sender"


def as_sqs_error(exc: AtomqError) -> SqsError:
    """A native error in SQS's terms: a missing queue is QueueDoesNotExist, a full window
    RequestThrottled (which the SDKs retry), a quota OverLimit, a store in trouble
    ServiceUnavailable (which they retry too), any other bad input InvalidParameterValue."""
    if isinstance(exc, SqsError):
        return exc
    if isinstance(exc, NotFound) and ("queue" in exc.details or "queue" in exc.message):
        return SqsError("QueueDoesNotExist", NO_SUCH_QUEUE, **exc.details)
    shape = next((shape for kinds, shape in _SHAPES if isinstance(exc, kinds)),
                 "InternalFailure" if exc.http_status >= 500 else "InvalidParameterValue")
    return SqsError(shape, exc.message, **exc.details)


_SHAPES: tuple[tuple[type[AtomqError] | tuple[type[AtomqError], ...], str], ...] = (
    ((NotFound, InvalidInput, TooLarge, Conflict), "InvalidParameterValue"),
    (RateLimited, "RequestThrottled"),
    (QuotaExceeded, "OverLimit"),
    (StorageError, "ServiceUnavailable"),
    (Unauthorized, "InvalidClientTokenId"),
    (Forbidden, "AccessDenied"),
)
"""The native errors' SQS shapes, the first that an error is an instance of."""
