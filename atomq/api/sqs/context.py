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

from atomq.api.services import Services
from atomq.errors import SqsError
from atomq.platform.models import QueueModel

SQS_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")


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

    def queue_url(self, name: str) -> str:
        return f"{self.base_url}/{self.account_id}/{name}"

    def queue_of(self, params: dict[str, Any]) -> str:
        """The queue a request names by ``QueueUrl`` (or, in the query protocol, by its own path);
        a publish/subscribe queue is InvalidParameterValue, an unknown one QueueDoesNotExist."""
        url = params.get("QueueUrl")
        if url is None and self.path_queue is not None:
            name = self.path_queue
        else:
            name = self.name_in_url(required(params, "QueueUrl"))
        self.point_to_point(name)
        return name

    def name_in_url(self, url: str) -> str:
        parts = urlsplit(url).path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != self.account_id or not parts[1]:
            raise SqsError("QueueDoesNotExist", "the queue URL names no queue of this account: it reads "
                                                f"<endpoint>/{self.account_id}/<queue name>")
        return parts[1]

    def point_to_point(self, name: str) -> None:
        """NotFound (QueueDoesNotExist) for no such queue; InvalidParameterValue for a publish/subscribe one."""
        if self.services.queues.get_queue(self.tenant, name).model != QueueModel.POINT_TO_POINT:
            raise SqsError("InvalidParameterValue", f"queue {name} is a publish/subscribe queue: SQS reaches "
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
