"""OpenAPI links: how one call's answer feeds the next.

The main path of the contract is a chain: the owner creates a tenant and
acts for it (``X-Atomq-Tenant``) to create a queue, sends to it, gets the
messages and acks them by their receipts. The links state that chain in the
OpenAPI document, for readers and for tools that walk it (schemathesis's
stateful tests do).
"""

from __future__ import annotations

from typing import Any

TENANT = "$request.header.X-Atomq-Tenant"
"""The tenant the previous call acted for, carried on to the next."""
QUEUE = "$request.path.name"


def operation(path: str, method: str) -> str:
    """The ``operationRef`` of one operation of this document."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def link(path: str, method: str, description: str, parameters: dict[str, str],
         request_body: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"operationRef": operation(path, method), "description": description,
                           "parameters": parameters}
    if request_body is not None:
        out["requestBody"] = request_body
    return out


def responses(statuses: tuple[int, ...], **named: dict[str, Any]) -> dict[str, Any]:
    """What ``blp.doc`` takes to add the links ``named`` to the responses of ``statuses``."""
    return {"responses": {status: {"links": named} for status in statuses}}


def _same_queue() -> dict[str, str]:
    return {"path.name": QUEUE, "header.X-Atomq-Tenant": TENANT}


AFTER_TENANT_CREATED = responses(
    (201,),
    GetTenant=link("/v1/tenants/{tenant_id}", "get", "the tenant just created",
                   {"path.tenant_id": "$response.body#/id"}),
    PutQueue=link("/v1/queues/{name}", "put", "a queue of the new tenant, the owner acting for it",
                  {"header.X-Atomq-Tenant": "$response.body#/id"}),
)
AFTER_QUEUE_PUT = responses(
    (200, 201),
    GetQueue=link("/v1/queues/{name}", "get", "the queue", _same_queue()),
    Send=link("/v1/queues/{name}/messages", "post", "send to the queue", _same_queue()),
)
AFTER_SEND = responses(
    (201,),
    Get=link("/v1/queues/{name}/get", "post", "take the messages", _same_queue()),
    Browse=link("/v1/queues/{name}/messages", "get", "look at the messages without taking them", _same_queue()),
)
AFTER_GET = responses(
    (200,),
    Ack=link("/v1/queues/{name}/ack", "post", "ack the first delivery by its receipt", _same_queue(),
             {"receipts": ["$response.body#/messages/0/receipt"]}),
    Nack=link("/v1/queues/{name}/nack", "post", "fail the first delivery", _same_queue(),
              {"receipts": ["$response.body#/messages/0/receipt"]}),
    Extend=link("/v1/queues/{name}/extend", "post", "more time for the first delivery", _same_queue(),
                {"receipts": ["$response.body#/messages/0/receipt"]}),
)
