"""What an SQS action acts on: the signer's tenant and account, the node's services, and the queue
URLs of this request (built from its Host, resolved by their path whatever the host).

Queue URLs read ``{scheme}://{Host of the request}/{account id}/{name}``: a client in a container
gets URLs that name the host it reached, and a URL made elsewhere (another host name, a proxy) still
finds its queue, since only its path is read. Another tenant's account id in a URL is
QueueDoesNotExist, as an unknown name is: a tenant learns nothing of the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from atomq import defaults
from atomq.api.services import Services
from atomq.api.sqs.errors import NO_SUCH_QUEUE
from atomq.api.sqs.recent_queues import RecentQueues
from atomq.errors import InvalidInput, SqsError
from atomq.platform.models import QueueModel

SQS_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo")
"""A standard queue's name, or a FIFO queue's: one that ends in ``.fifo`` (80 characters in all)."""
FIFO_SUFFIX = ".fifo"

MAX_SIZE_FIELD = "sqs:max_size"
"""The queue's MaximumMessageSize, as SQS measures a message (its native limit leaves room for
the attributes' JSON form; see ``queue_attributes``)."""
WAIT_FIELD = "sqs:wait"
"""The queue's ReceiveMessageWaitTimeSeconds: a receive that names no wait waits this long."""
CREATED_FIELD = "sqs:created"
MODIFIED_FIELD = "sqs:modified"
TAG_PREFIX = "sqs:tag:"
REDELIVER_NOW_FIELD = "redeliver_now"
"""Read by the scripts: a failed delivery (a visibility time-out) is ready again at once."""
ACK_TIMEOUT_FIELD = "ack_timeout_ms"
"""The queue's native ack deadline: a receive that asks for the same visibility moves nothing."""
CONTENT_DEDUPE_FIELD = "sqs:content_dedupe"
"""A FIFO queue's ContentBasedDeduplication, ``true`` or ``false``: a send without a
MessageDeduplicationId is de-duplicated by the SHA-256 of its body."""
THROUGHPUT_FIELD = "sqs:throughput"
"""A FIFO queue's FifoThroughputLimit as it was set (atomq holds no throughput quota of SQS's)."""
SCOPE_FIELD = "sqs:dedupe_scope"
"""A FIFO queue's DeduplicationScope, ``queue`` (absent) or ``messageGroup``: a de-duplication id
counts within its message group only (``message_model.native_dedupe_id``)."""
ALLOW_FIELD = "sqs:redrive_allow"
"""The queue's RedriveAllowPolicy as it was given (JSON; "" or absent: none, which allows all;
``redrive_policies``)."""
QUEUE_FIELDS = (MAX_SIZE_FIELD, WAIT_FIELD, CREATED_FIELD, MODIFIED_FIELD, ACK_TIMEOUT_FIELD, CONTENT_DEDUPE_FIELD,
                THROUGHPUT_FIELD, SCOPE_FIELD, ALLOW_FIELD)
"""The fields an action on a queue reads with its model, in one round trip."""
DEFAULT_MAX_SIZE = 1_048_576
"""SQS's MaximumMessageSize of a queue that sets none: its largest (SQS's own since August 2025; 262,144
before), so that a message SQS takes on a new queue is taken here too."""
LEAST_ACK_TIMEOUT_S = defaults.ACK_TIMEOUT_RANGE_S[0]
"""The native ack deadline of a queue whose VisibilityTimeout is 0 (a deadline is at least this)."""


@dataclass(frozen=True)
class SqsQueue:
    """A point-to-point queue an SQS request names, with the SQS fields of its config."""

    name: str
    fields: dict[str, str]

    @property
    def max_size(self) -> int:
        return int(self.fields.get(MAX_SIZE_FIELD, DEFAULT_MAX_SIZE))

    @property
    def wait_s(self) -> int:
        return int(self.fields.get(WAIT_FIELD, 0))

    @property
    def fifo(self) -> bool:
        """A FIFO queue: its name ends in ``.fifo``, as SQS's clients (kombu) also tell one."""
        return self.name.endswith(FIFO_SUFFIX)

    @property
    def content_dedupe(self) -> bool:
        return self.fields.get(CONTENT_DEDUPE_FIELD) == "true"

    @property
    def dedupe_scope(self) -> str:
        """The queue's DeduplicationScope: ``queue`` or ``messageGroup``."""
        return self.fields.get(SCOPE_FIELD) or "queue"

    @property
    def visibility_s(self) -> float:
        """The queue's VisibilityTimeout, from its native ack deadline (0: the least one)."""
        ack_timeout_s = int(self.fields.get(ACK_TIMEOUT_FIELD, defaults.ACK_TIMEOUT_S * 1000)) / 1000
        return 0 if ack_timeout_s <= LEAST_ACK_TIMEOUT_S else ack_timeout_s


@dataclass(frozen=True)
class SqsContext:
    """One SQS request's caller and place: ``base_url`` is ``{scheme}://{Host}``; ``path_queue`` the
    queue a query-protocol request names by its own path, if any."""

    services: Services
    tenant: str
    key_id: str
    account_id: str
    base_url: str
    path_queue: str | None = None
    content_length: int = 0
    region: str = "us-east-1"
    recent: RecentQueues | None = None
    """This process's queues read a moment ago (``recent_queues``); None reads the store every time."""

    def queue_url(self, name: str) -> str:
        return f"{self.base_url}/{self.account_id}/{name}"

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account_id}:{name}"

    def queue_of(self, params: dict[str, Any], recent: bool = False) -> str:
        """The name of the queue a request names (see :meth:`queue`)."""
        return self.queue(params, recent).name

    def queue(self, params: dict[str, Any], recent: bool = False) -> SqsQueue:
        """The queue a request names by ``QueueUrl`` (or, in the query protocol, by its own path),
        read with its SQS fields in one round trip (``recent``: as this process read it at most a
        second ago, for the message actions); a publish/subscribe queue is InvalidParameterValue,
        an unknown one QueueDoesNotExist."""
        url = params.get("QueueUrl")
        if url is None and self.path_queue is not None:
            name = self.path_queue
        else:
            url = required(params, "QueueUrl")
            if not isinstance(url, str):
                raise SqsError("InvalidParameterValue", "QueueUrl must be a string")
            name = self.name_in_url(url)
        return self.named(name, recent)

    def named(self, name: str, recent: bool = False) -> SqsQueue:
        """The queue ``name`` with its SQS fields (as :meth:`queue`)."""
        fields = self.recent.get(self.tenant, name) if recent and self.recent is not None else None
        if fields is None:
            try:
                fields = self.services.queues.fields.read(self.tenant, name, QUEUE_FIELDS)
            except InvalidInput:  # not a name a queue can have
                fields = None
            if fields is None:
                self.forget(name)
                raise SqsError("QueueDoesNotExist", NO_SUCH_QUEUE, queue=name)
            if self.recent is not None:
                self.recent.keep(self.tenant, name, fields)
        if fields["model"] != QueueModel.POINT_TO_POINT.value:
            raise _pubsub(name)
        return SqsQueue(name, fields)

    def name_in_url(self, url: str) -> str:
        """The queue a QueueUrl names by its path; a bare queue name (which SDK resources built from a
        name send, and SQS takes) names that queue."""
        if SQS_QUEUE_NAME.fullmatch(url):
            return url
        try:
            parts = urlsplit(url).path.strip("/").split("/")
        except ValueError:
            parts = []
        if len(parts) != 2 or parts[0] != self.account_id or not parts[1]:
            raise SqsError("QueueDoesNotExist", NO_SUCH_QUEUE, expected=f"<endpoint>/{self.account_id}/<queue name>")
        return parts[1]

    def forget(self, name: str) -> None:
        """Drops what this process read of queue ``name``: the action changed or deleted it."""
        if self.recent is not None:
            self.recent.forget(self.tenant, name)

    def point_to_point(self, name: str) -> None:
        """QueueDoesNotExist for no such queue; InvalidParameterValue for a publish/subscribe one."""
        self.named(name)


def _pubsub(name: str) -> SqsError:
    return SqsError("InvalidParameterValue", f"queue {name} is a publish/subscribe queue: SQS reaches "
                                             "point-to-point queues only (its subscribers have their own "
                                             "gets natively)")


def required(params: dict[str, Any], name: str) -> Any:
    """The parameter ``name``; MissingParameter when it is absent."""
    if name not in params or params[name] is None:
        raise SqsError("MissingParameter", f"the request must contain the parameter {name}")
    return params[name]


def integer(params: dict[str, Any], name: str, low: int, high: int, default: int) -> int:
    """An integer parameter from ``low`` to ``high`` (text in the query protocol); InvalidParameterValue else."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not re.fullmatch(r"-?\d{1,12}", str(value)):
        raise SqsError("InvalidParameterValue", f"{name} must be an integer from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise SqsError("InvalidParameterValue", f"{name} must be an integer from {low} to {high}, not {number}")
    return number


def string_list(params: dict[str, Any], name: str) -> list[str]:
    value = params.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SqsError("InvalidParameterValue", f"{name} must be a list of strings")
    return value
