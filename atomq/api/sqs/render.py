"""SQS's answers and errors, in the protocol the request spoke.

JSON: the result object as it is, ``Content-Type: application/x-amz-json-1.0``.
Query: ``<{Action}Response><{Action}Result>...</{Action}Result><ResponseMetadata>``,
where lists are flattened into repeated elements (``<QueueUrl>`` per queue URL,
``<Message>`` per message) and maps into ``<Attribute><Name/><Value/></Attribute>``
(``<Tag><Key/><Value/></Tag>`` for tags), as botocore's query parser and the old
SDKs read them. Text is escaped for XML and a carriage return written as
``&#xD;``, so a body keeps its ``\\r`` (an XML reader turns a bare one into ``\\n``).

Every answer carries ``x-amzn-RequestId``, a UUID. Errors: JSON ``{"__type":
"com.amazonaws.sqs#<Shape>", "message"}`` with ``x-amzn-query-error: <legacy
code>;Sender``; XML ``<ErrorResponse>`` with the legacy code (``atomq.api.sqs.errors``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson
from flask import Response

from atomq.api.sqs import errors
from atomq.api.sqs.wire import API_VERSION, JSON
from atomq.errors import SqsError

JSON_TYPE = "application/x-amz-json-1.0"
XML_TYPE = "text/xml"
NAMESPACE = f"http://queue.amazonaws.com/doc/{API_VERSION}/"

LIST_ELEMENTS = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
    "Results": "ListMessageMoveTasksResultEntry",
}
"""The element each member of a result list is written as; ``Successful`` takes its action's entry."""
MAP_ELEMENTS = {
    "Attributes": ("Attribute", "Name", "Value"),
    "MessageAttributes": ("MessageAttribute", "Name", "Value"),
    "Tags": ("Tag", "Key", "Value"),
}


def new_request_id() -> str:
    return str(uuid.uuid4())


def xml_text(value: Any) -> str:
    """A value as XML text: booleans as SQS writes them, markup escaped, ``\\r`` as ``&#xD;``."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    text = str(value)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#xD;")


def _xml_member(name: str, value: Any, action: str) -> str:
    if isinstance(value, list):
        element = f"{action}ResultEntry" if name == "Successful" else LIST_ELEMENTS.get(name, name)
        return "".join(_xml_member(element, item, action) for item in value)
    if isinstance(value, dict) and name in MAP_ELEMENTS:
        element, key, inner = MAP_ELEMENTS[name]
        return "".join(f"<{element}><{key}>{xml_text(k)}</{key}>{_xml_member(inner, v, action)}</{element}>"
                       for k, v in value.items())
    if isinstance(value, dict):
        return f"<{name}>{_xml_fields(value, action)}</{name}>"
    return f"<{name}>{xml_text(value)}</{name}>"


def _xml_fields(result: dict[str, Any], action: str) -> str:
    return "".join(_xml_member(name, value, action) for name, value in result.items() if value is not None)


def answer(protocol: str, action: str, result: dict[str, Any], request_id: str) -> Response:
    """A successful answer of ``action`` with ``result`` (the JSON protocol's members)."""
    if protocol == JSON:
        response = Response(orjson.dumps(result), 200, content_type=JSON_TYPE)
    else:
        inner = f"<{action}Result>{_xml_fields(result, action)}</{action}Result>" if result else ""
        response = Response(f'<?xml version="1.0" encoding="UTF-8"?><{action}Response xmlns="{NAMESPACE}">{inner}'
                            f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata>"
                            f"</{action}Response>", 200, content_type=XML_TYPE)
    response.headers["x-amzn-RequestId"] = request_id
    return response


def error(protocol: str, exc: SqsError, request_id: str) -> Response:
    """An error answer in SQS's shape for ``protocol``."""
    shape, status = exc.shape, errors.status_of(exc.shape)
    code, fault = errors.legacy_code(shape), errors.fault_of(shape)
    if protocol == JSON:
        body = json.dumps({"__type": errors.SHAPE_PREFIX + shape, "message": exc.message})
        response = Response(body, status, content_type=JSON_TYPE)
        response.headers["x-amzn-query-error"] = f"{code};{fault}"
    else:
        response = Response(f'<?xml version="1.0" encoding="UTF-8"?><ErrorResponse xmlns="{NAMESPACE}"><Error>'
                            f"<Type>{fault}</Type><Code>{xml_text(code)}</Code><Message>{xml_text(exc.message)}"
                            f"</Message><Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>",
                            status, content_type=XML_TYPE)
    response.headers["x-amzn-RequestId"] = request_id
    return response
