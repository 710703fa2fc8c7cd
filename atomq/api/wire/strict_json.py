"""JSON as this API reads and writes it: strict both ways, in one place.

Every request body is parsed by :func:`parse` (the app's JSON provider, which
``request.get_json`` and the schemas' parser both use), so no view sees
what JSON itself does not allow and Python's parser does:

- ``NaN``, ``Infinity``, ``-Infinity``, and numbers too large for a double
  (``1e400`` reads as infinity): stored, they would come back as text that
  strict clients cannot parse, and overflow the store's arithmetic;
- arrays and objects nested deeper than :data:`MAX_DEPTH`: Python's C parser
  stops a body nested past the interpreter's recursion limit with a
  RecursionError, and a shallower one is measured once parsed, by a walk over
  its arrays and objects only (a scan of the raw text cost several times the
  parse itself on a send of 100 messages);
- strings holding a lone UTF-16 surrogate (``"\\ud800"``), which no UTF-8
  store can hold.

Each is an InvalidInput naming the field where the body shows it (dotted
path, ``messages.0.expires_at``), else ``body``. Every response is written
with ``allow_nan=False``.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

import orjson
from flask import Flask, Request
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import RequestEntityTooLarge

from atomq.errors import InvalidInput

log = logging.getLogger("atomq.api")

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects a request body may have."""

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _NonFinite:
    """Stands in, while parsing, for a number JSON does not have, so that its place can be named."""

    def __init__(self, text: str) -> None:
        self.text = text


def nests_within(value: Any, levels: int) -> bool:
    """Whether the arrays and objects of ``value`` nest at most ``levels`` deep (a scalar is 0).

    Walks containers only, without recursion, and stops at the first one too deep.
    """
    stack = [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        node, depth = stack.pop()
        if depth > levels:
            return False
        for item in node.values() if type(node) is dict else node:
            if type(item) in (dict, list):
                stack.append((item, depth + 1))
    return True


def too_deep(field: str) -> InvalidInput:
    return InvalidInput(f"{field}: arrays and objects may nest at most {MAX_DEPTH} deep", field=field,
                        max_depth=MAX_DEPTH)


def parse(body: bytes | str, checked_by_caller: bool = False) -> Any:
    """The value of a request body; InvalidInput for what this API does not take, ValueError
    (a JSON syntax or encoding error) for what is not JSON at all.

    ``checked_by_caller`` leaves the depth and the lone surrogates to a caller that checks
    them where its body may hold them (the send: in properties and texts), since scanning
    the whole text for them costs as much again as parsing it.
    """
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
    found: list[_NonFinite] = []

    def constant(text: str) -> _NonFinite:
        found.append(_NonFinite(text))
        return found[-1]

    def number(text: str) -> float | _NonFinite:
        value = float(text)
        return value if math.isfinite(value) else constant(text)

    try:
        value = json.loads(raw, parse_constant=constant, parse_float=number)
    except RecursionError:
        raise too_deep("body") from None
    if not checked_by_caller and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and not nests_within(value, MAX_DEPTH):
        raise too_deep("body")
    if found:
        try:
            field = path_of(value, lambda v: isinstance(v, _NonFinite)) or "body"
        except RecursionError:  # a caller's body of unchecked depth
            field = "body"
        text = found[0].text if len(found[0].text) <= 32 else found[0].text[:29] + "..."
        raise InvalidInput(f"{field}: {text} is not a number this API takes (NaN, Infinity and numbers "
                           "beyond the range of a double are not JSON numbers)", field=field)
    if checked_by_caller:
        return value
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):  # the plain search first: it runs at C speed
        where = path_of(value, unencodable)
        if where is not None:
            raise InvalidInput(f"{where}: holds a lone UTF-16 surrogate, which is no character", field=where)
    return value


def unencodable(value: Any) -> bool:
    """Whether ``value`` is a text no UTF-8 store can hold (it holds a lone surrogate)."""
    if not isinstance(value, str) or value.isascii():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def path_of(value: Any, bad: Any, path: tuple[str, ...] = ()) -> str | None:
    """The dotted path of the first part of ``value`` (keys included) that ``bad`` picks, or None."""
    if bad(value):
        return ".".join(path) or "body"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if bad(key):
            return ".".join((*path, "<key>")) if path else "body"
        found = path_of(item, bad, (*path, str(key)))
        if found is not None:
            return found
    return None


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``value``. A NaN or infinity read from the store (written by an older
    version that let them in) goes out as null, logged, rather than as text no strict client parses."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        log.warning("a response held NaN or an infinity (stored before they were refused); sent as null")
        return json.dumps(_finite(value), allow_nan=False, **kwargs)


def dump_bytes(value: Any) -> bytes:
    """:func:`dumps` (compact, UTF-8) through orjson, which writes a get of 100 messages several
    times faster than the json module; what orjson does not take (keys that are not strings, an
    integer past 64 bits) goes through :func:`dumps`. orjson writes NaN and the infinities as null,
    as :func:`dumps` does, without the log line."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class StrictJSONProvider(DefaultJSONProvider):
    """Flask's JSON, with :func:`parse` for what comes in and :func:`dumps` for what goes out."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return parse(s)

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("default", self.default)
        kwargs.setdefault("ensure_ascii", self.ensure_ascii)
        kwargs.setdefault("sort_keys", self.sort_keys)
        return dumps(obj, **kwargs)


class StrictRequest(Request):
    """A body that is not JSON is a 400 in the one error shape, naming ``body``; a chunked body over
    the size limit is a 413, as one whose Content-Length says so."""

    def get_data(self, cache: bool = True, as_text: bool = False, parse_form_data: bool = False) -> Any:
        """The body; werkzeug reads a chunked one (no Content-Length) up to the limit and stops there
        without a word, which handed the JSON parser a cut body: a byte past the limit is a 413."""
        data = super().get_data(cache=cache, as_text=False, parse_form_data=parse_form_data)
        most = self.max_content_length
        if (self.content_length is None and most is not None and len(data) >= most
                and self.environ["wsgi.input"].read(1)):
            raise RequestEntityTooLarge()
        return data.decode("utf-8", "replace") if as_text else data

    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        if e is None:
            return super().on_json_loading_failed(e)  # not a JSON content type: werkzeug's 415
        raise InvalidInput(f"body: not valid JSON ({_reason(e)})", field="body")


def _reason(e: ValueError) -> str:
    text = str(e)
    return text if len(text) <= 200 else text[:197] + "..."


def install(app: Flask) -> None:
    app.json = StrictJSONProvider(app)
    app.request_class = StrictRequest
