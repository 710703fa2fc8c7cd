"""Pieces shared by the resource schemas."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

from atomq import defaults
from atomq.platform.queues.names import RECEIPT_PATTERN

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
NAME_RULE = "1 to 128 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"
"""What ``NAME_PATTERN`` says, in words: the error of a name that breaks it."""


def name_rule(what: str) -> validate.Regexp:
    """``NAME_PATTERN`` for the names of ``what``, whose error states the rule: a Regexp's own error
    says only that the pattern did not match, which leaves the sender to guess the syntax."""
    return validate.Regexp(NAME_PATTERN, error=f"{what} names are {NAME_RULE}")


QUEUE_NAME = name_rule("queue")
SUBSCRIBER_NAME = name_rule("subscriber")
CONSUMER_NAME = name_rule("consumer")
RECEIPT_RULE = ("a receipt is spelled as a get wrote it: <message id>~<delivery count>, "
                "e.g. 1795461670403-000000000002~1")
CONSUMER_DOC = {"description": "who makes the call: required on an exclusive queue (only its active consumer gets "
                               "and settles messages), accepted and ignored on others"}
SUBSCRIBER_DOC = {"description": "the subscriber, for a publish/subscribe queue (required there); a "
                                  "point-to-point queue has none and answers 400 when one is named"}
LATEST_TIME_S = defaults.LATEST_TIME_S


class Int(fields.Integer):
    """An integer that must be a JSON integer: no strings, no booleans, no 5.0."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if type(value) is not int:
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class Number(fields.Float):
    """A number that must be a JSON number: no strings, no booleans."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if type(value) not in (int, float):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


def above_zero(most: float, **kwargs: Any) -> Number:
    """A number above 0 and at most ``most``. apispec writes a Range's ``min_inclusive=False``
    as a plain ``minimum``, which would let the document promise 0: it says
    ``exclusiveMinimum`` here itself (OpenAPI 3.0: a flag beside ``minimum``)."""
    metadata = {"exclusiveMinimum": True, **kwargs.pop("metadata", {})}
    return Number(validate=validate.Range(0, most, min_inclusive=False), metadata=metadata, **kwargs)


class Bool(fields.Boolean):
    """A boolean that must be JSON true or false: no "yes", no 1."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if type(value) is not bool:
            raise self.make_error("invalid")
        return value


class StringList(fields.List[str]):
    """A list of strings, each checked by the validators of ``inner`` (a plain ``fields.String``).

    fields.List sends every item through the inner field's whole deserialize: for
    the 100 receipts of a get that acks, 0.25 ms a request. A list that is all strings
    goes through the validators alone; a list that is not, or has an item they refuse,
    goes through fields.List, so the errors are the same.
    """

    def __init__(self, inner: fields.String, **kwargs: Any) -> None:
        if type(inner) is not fields.String:
            raise TypeError("StringList checks a plain fields.String's validators only")
        super().__init__(inner, **kwargs)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if type(value) is list and all(type(item) is str for item in value):
            try:
                for check in self.inner.validators:
                    for item in value:
                        check(item)
            except ma.ValidationError:
                return super()._deserialize(value, attr, data, **kwargs)
            return list(value)
        return super()._deserialize(value, attr, data, **kwargs)


class Strict(ma.Schema):
    """Unknown fields are refused: a typo in a field name is an error, not a silent default."""

    class Meta:
        unknown = ma.RAISE


class ErrorBody(ma.Schema):
    code = fields.String(required=True, metadata={"description": "snake_case error code"})
    message = fields.String(required=True, metadata={"description": "the rule that was broken, for people"})
    details = fields.Dict(required=True, metadata={"description": "data about the error, e.g. the field"})


class ErrorSchema(ma.Schema):
    error = fields.Nested(ErrorBody, required=True)


class Selection(Strict):
    """Messages by id or by receipt."""

    # What ``validates_schema`` checks, as the OpenAPI document states it (see atomq.api).
    ONE_OF = [{"required": ["ids"]}, {"required": ["receipts"]}]

    ids = StringList(fields.String(validate=validate.Length(1, 64)),
                     validate=validate.Length(max=defaults.MAX_SELECTORS))
    receipts = StringList(fields.String(validate=validate.Regexp(RECEIPT_PATTERN, error=RECEIPT_RULE),
                                         metadata={"description": "as a get wrote it: <message id>~<delivery "
                                                                  "count>"}),
                         validate=validate.Length(max=defaults.MAX_SELECTORS))

    @ma.validates_schema
    def one_selector(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("ids" in data) == ("receipts" in data):
            raise ma.ValidationError("give either ids or receipts", "ids")


class Selector(Selection):
    """Selects messages by id or by receipt, for the subscriber where that applies."""

    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)
    consumer = fields.String(validate=CONSUMER_NAME, metadata=CONSUMER_DOC)


class BulkSelector(Strict):
    """Selects messages by id, or all of them."""

    ONE_OF = [{"required": ["ids"]}, {"required": ["all"], "properties": {"all": {"enum": [True]}}}]

    ids = StringList(fields.String(validate=validate.Length(1, 64)),
                     validate=validate.Length(max=defaults.MAX_SELECTORS))
    all = fields.Boolean()
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)

    @ma.validates_schema
    def one_selector(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("ids" in data) == bool(data.get("all")):
            raise ma.ValidationError("give either ids or all: true", "ids")


class ListArgs(Strict):
    """A page of a list (queues, tenants, listeners): ``next`` of one page is ``after`` of the next."""

    limit = fields.Integer(load_default=defaults.MAX_PAGE_LIMIT, validate=validate.Range(1, defaults.MAX_PAGE_LIMIT),
                           metadata={"description": "most items on the page"})
    after = fields.String(validate=validate.Length(1, 128), metadata={
        "description": "the ``next`` of the page before: this page starts after it"})


NEXT_DOC = {"description": "the ``after`` of the next page; null on the last"}


class SubscriberArgs(Strict):
    subscriber = fields.String(validate=SUBSCRIBER_NAME, metadata=SUBSCRIBER_DOC)


class PageArgs(SubscriberArgs):
    limit = fields.Integer(load_default=defaults.PAGE_LIMIT,  # a query string: text
                           validate=validate.Range(1, defaults.MAX_PAGE_LIMIT))
    after = fields.String(validate=validate.Length(max=64))


REASON_DOC = {"description": "the dead letters given this reason only: expired, ack timeout, nacked or "
                             "a consumer's nack reason, matched whole"}


def _reason() -> fields.String:
    return fields.String(validate=validate.Length(1, defaults.MAX_NACK_REASON_CHARS), metadata=REASON_DOC)


class DeadLetterPageArgs(PageArgs):
    reason = _reason()


class DeadLetterSelector(BulkSelector):
    """Selects dead letters by id, all of them, or all of them given one reason."""

    ONE_OF = [*BulkSelector.ONE_OF, {"required": ["reason"]}]

    reason = _reason()

    @ma.validates_schema
    def one_selector(self, data: dict[str, Any], **kwargs: Any) -> None:
        if ("ids" in data) + bool(data.get("all")) + ("reason" in data) != 1:
            raise ma.ValidationError("give exactly one of ids, all: true or reason", "ids")
