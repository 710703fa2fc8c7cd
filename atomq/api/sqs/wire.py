"""SQS's two request formats read into one form: an action and its parameters as the JSON protocol names them.

- **AWS JSON 1.0** (boto3, the AWS CLI and every current SDK): ``POST /`` with
  ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON object as the body, with or
  without ``x-amzn-query-mode`` (kombu signs its own JSON requests without it).
  A request is read as JSON when it names a target: the header, not the
  Content-Type, is what no query-protocol client sends.
- **The query protocol** (older SDKs): form parameters (``Action=SendMessage&
  Version=2012-11-05&...``) in the body or the query string, on ``/`` or on a
  queue URL. Its lists and maps are flattened into numbered names
  (``AttributeName.1``, ``Attribute.1.Name``/``Attribute.1.Value``,
  ``MessageAttribute.1.Value.StringValue``,
  ``SendMessageBatchRequestEntry.1.Id``); ``unflatten`` folds them back into the
  JSON protocol's members (``AttributeNames``, ``Attributes``,
  ``MessageAttributes``, ``Entries``), so each action is handled once.

Values stay as each protocol sends them (the query protocol's numbers are
text): the handlers check and convert them, with one rule for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from atomq.errors import SqsError

JSON = "json"
QUERY = "query"
TARGET_PREFIX = "AmazonSQS."
API_VERSION = "2012-11-05"

LIST_MEMBERS = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
    "AWSAccountId": "AWSAccountIds",
    "ActionName": "Actions",
}
"""Query-protocol list members: ``<name>.N`` -> the JSON protocol's list."""
VALUE_MAPS = {"MessageAttribute": "MessageAttributes", "MessageSystemAttribute": "MessageSystemAttributes"}
"""Maps of attribute values: ``<name>.N.Name`` and ``<name>.N.Value.{DataType,StringValue,BinaryValue}``."""


@dataclass(frozen=True)
class SqsCall:
    """One SQS request, read: its protocol (``json`` or ``query``), action and parameters."""

    protocol: str
    action: str
    params: dict[str, Any] = field(default_factory=dict)


def is_json(headers: Any) -> bool:
    """Whether a request speaks the JSON protocol (it names an ``X-Amz-Target``)."""
    return bool(headers.get("X-Amz-Target"))


def read_json(target: str, body: bytes) -> SqsCall:
    """A JSON-protocol request: the action its target names, the body's object as parameters."""
    if not target.startswith(TARGET_PREFIX):
        raise SqsError("UnsupportedOperation", f"X-Amz-Target {target!r} is not AmazonSQS.<Action>")
    try:
        params = orjson.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise SqsError("SerializationException", "the body is not a JSON object") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "the body is not a JSON object")
    return SqsCall(JSON, target.removeprefix(TARGET_PREFIX), params)


def read_query(form: dict[str, str]) -> SqsCall:
    """A query-protocol request from its form and query-string parameters, merged."""
    action = form.get("Action", "")
    if not action:
        raise SqsError("MissingParameter", "the request names no Action (Action=<SQS action>&Version=2012-11-05), "
                                           "nor an X-Amz-Target of the JSON protocol")
    rest = {name: value for name, value in form.items() if name not in ("Action", "Version")}
    return SqsCall(QUERY, action, unflatten(rest, action))


def _tree(flat: dict[str, str]) -> dict[str, Any]:
    """``{"A.1.Name": "x"}`` as ``{"A": {"1": {"Name": "x"}}}``; a name both a value and a parent is refused."""
    root: dict[str, Any] = {}
    for name, value in flat.items():
        node = root
        *parents, last = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SqsError("InvalidParameterValue", f"parameter {name!r} conflicts with another of its prefix")
        if isinstance(node.get(last), dict):
            raise SqsError("InvalidParameterValue", f"parameter {name!r} conflicts with another of its prefix")
        node[last] = value
    return root


def _numbered(node: Any, name: str) -> list[Any]:
    """The members of a numbered list (``.1``, ``.2``, ...) in the order of their numbers."""
    if not isinstance(node, dict) or not all(key.isdigit() for key in node):
        raise SqsError("InvalidParameterValue", f"{name} takes numbered members: {name}.1, {name}.2, ...")
    return [node[key] for key in sorted(node, key=int)]


def _pairs(node: Any, name: str, key: str, value: str) -> dict[str, Any]:
    out = {}
    for member in _numbered(node, name):
        if not isinstance(member, dict) or key not in member:
            raise SqsError("MissingParameter", f"each {name}.N needs {name}.N.{key}")
        out[str(member[key])] = member.get(value, "")
    return out


def unflatten(flat: dict[str, str], action: str) -> dict[str, Any]:
    """The query protocol's flattened parameters as the JSON protocol's members."""
    return _fold(_tree(flat), action)


def _fold(tree: dict[str, Any], action: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, node in tree.items():
        if name in LIST_MEMBERS:
            out[LIST_MEMBERS[name]] = _numbered(node, name)
        elif name == "Attribute":
            out["Attributes"] = _pairs(node, name, "Name", "Value")
        elif name in VALUE_MAPS:
            values = _pairs(node, name, "Name", "Value")
            if not all(isinstance(v, dict) for v in values.values()):
                raise SqsError("InvalidParameterValue", f"{name}.N.Value takes DataType and StringValue or "
                                                        "BinaryValue")
            out[VALUE_MAPS[name]] = values
        elif name == "Tag":
            out["tags" if action == "CreateQueue" else "Tags"] = _pairs(node, name, "Key", "Value")
        elif name.endswith("RequestEntry"):
            out["Entries"] = [_fold(entry, action) if isinstance(entry, dict) else entry
                              for entry in _numbered(node, name)]
        else:
            out[name] = _fold(node, action) if isinstance(node, dict) else node
    return out
