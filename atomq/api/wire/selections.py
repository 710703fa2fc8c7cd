"""The bodies of get, ack, nack, extend and release, decoded by msgspec into what their schemas load.

Why not the schemas: webargs and marshmallow cost a settle of 10 receipts more
than the store does. msgspec decodes and checks a body in one pass, in C,
against the structs below, which state the same rules as ``GetSchema``,
``Selector``, ``NackSchema``, ``ExtendSchema`` and ``ReleaseSchema`` (the
same constants, patterns and ranges). The schemas stay the contract and the
OpenAPI document: :func:`decode` answers only a body it is sure of, and None
for any other (a bad one, or one it cannot tell), which then goes to the
schema through Flask and gets the one error shape and message. A test
decodes the same bodies, valid and invalid, both ways and finds them agree.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from atomq import defaults
from atomq.api.schemas.common import NAME_PATTERN
from atomq.platform.queues.names import RECEIPT_PATTERN

Name = Annotated[str, Meta(pattern=NAME_PATTERN)]
Ids = Annotated[list[Annotated[str, Meta(min_length=1, max_length=64)]], Meta(max_length=defaults.MAX_SELECTORS)]
Receipts = Annotated[list[Annotated[str, Meta(pattern=RECEIPT_PATTERN)]], Meta(max_length=defaults.MAX_SELECTORS)]


class Selection(Struct, forbid_unknown_fields=True):
    ids: Ids | UnsetType = UNSET
    receipts: Receipts | UnsetType = UNSET


class ReleaseBody(Selection, forbid_unknown_fields=True):
    subscriber: Name | UnsetType = UNSET


class AckBody(ReleaseBody, forbid_unknown_fields=True):
    consumer: Name | UnsetType = UNSET


class NackBody(AckBody, forbid_unknown_fields=True):
    reason: Annotated[str, Meta(max_length=defaults.MAX_NACK_REASON_CHARS)] = ""


class ExtendBody(AckBody, forbid_unknown_fields=True):
    seconds: Annotated[float, Meta(gt=0, le=defaults.ACK_TIMEOUT_RANGE_S[1])] | UnsetType = UNSET


class GetBody(Struct, forbid_unknown_fields=True):
    max: Annotated[int, Meta(ge=1, le=defaults.MAX_GET)] = defaults.GET_MAX_MESSAGES
    wait_ms: Annotated[int, Meta(ge=0, le=defaults.MAX_WAIT_MS)] = defaults.GET_WAIT_MS
    subscriber: Name | UnsetType = UNSET
    consumer: Name | UnsetType = UNSET
    ack: Selection | UnsetType = UNSET


DECODERS = {kind: msgspec.json.Decoder(body) for kind, body in (
    ("get", GetBody), ("ack", AckBody), ("nack", NackBody), ("extend", ExtendBody), ("release", ReleaseBody))}
"""By the last part of the route's path."""


def _loaded(struct: Struct) -> dict[str, Any] | None:
    """The fields given (or defaulted), as the schema loads them; None when the selection is not
    one of ids or receipts (the schemas' ``one_selector``)."""
    out: dict[str, Any] = {}
    for name in struct.__struct_fields__:
        value = getattr(struct, name)
        if value is UNSET:
            continue
        if isinstance(value, Struct):
            value = _loaded(value)
            if value is None:
                return None
        out[name] = value
    if isinstance(struct, Selection) and ("ids" in out) == ("receipts" in out):
        return None
    return out


def decode(kind: str, body: bytes) -> dict[str, Any] | None:
    """The body of a ``kind`` request (get, ack, nack, extend, release) as its schema loads it, or
    None when this decoder does not take it (the schema, through Flask, has the last word)."""
    try:
        struct = DECODERS[kind].decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return _loaded(struct)
