"""A queue's settings as its config hash holds them: checked and turned into the fields a PUT
stores (``config_fields``), and read back (``read_limits``).

The scripts read these fields by name from the config hash (``queue_put.lua`` writes them, the
send script reads the limits), so each setting's field is named here once.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, TypeVar

from atomq import defaults
from atomq.errors import InvalidInput
from atomq.integer_range import check_integer_range
from atomq.platform.models import Durability, OnExpire, Overflow, QueueAccess, QueueLimits, QueueModel, QueueOrdering

LIMIT_FIELDS = {"max_messages": "max_messages", "max_bytes": "max_bytes", "max_message_bytes": "max_message_bytes",
                "max_dead_letters": "max_dead_letters", "overflow": "overflow",
                "overflow_to_dead_letters": "overflow_dl"}
"""Each limit setting's field in the queue's config hash (the send script reads them there)."""

Choice = TypeVar("Choice", bound=Enum)


def config_fields(model: QueueModel, *, max_redeliveries: int | None = None, ack_timeout_s: float | None = None,
                  message_ttl_s: float | None = None, on_expire: OnExpire | str | None = None,
                  last_value: bool | None = None, last_value_key: str | None = None,
                  access: QueueAccess | str | None = None, durability: Durability | str | None = None,
                  delay_s: float | None = None, ordering: QueueOrdering | str | None = None,
                  **limits: Any) -> list[str | int]:
    """The config fields (name, value, ...) of the settings given, each checked (InvalidInput naming
    it); a setting given as None is left out, so the queue keeps what it has. ``limits``: the
    settings of ``LIMIT_FIELDS``."""
    named: list[str | int] = []
    if max_redeliveries is not None:
        named += ["max_redeliveries",
                  check_integer_range(max_redeliveries, "max_redeliveries", *defaults.MAX_REDELIVERIES_RANGE)]
    if ack_timeout_s is not None:
        least_s, most_s = defaults.ACK_TIMEOUT_RANGE_S
        named += ["ack_timeout_ms", _milliseconds(ack_timeout_s, "ack_timeout_s", least_s, most_s,
                                                  f"a number from {least_s:g} to {most_s:g}")]
    if message_ttl_s is not None:
        most_ttl = defaults.MAX_MESSAGE_TTL_S
        named += ["message_ttl_ms", _milliseconds(message_ttl_s, "message_ttl_s", 0, most_ttl,
                                                  f"a number of seconds from 0 (none) to {most_ttl:g}")]
    if on_expire is not None:
        named += ["on_expire", _choice(OnExpire, on_expire, "on_expire").value]
    if delay_s is not None:
        named += ["delay_ms", _milliseconds(delay_s, "delay_s", 0, defaults.MAX_DELAY_S,
                                            f"a number of seconds from 0 (none) to {defaults.MAX_DELAY_S:g}")]
    named += _last_value_fields(model, last_value, last_value_key)
    if access is not None:
        chosen = _choice(QueueAccess, access, "access")
        if chosen is QueueAccess.EXCLUSIVE and model is QueueModel.PUBLISH_SUBSCRIBE:
            raise InvalidInput("an exclusive queue is point-to-point (a publish/subscribe queue's subscribers "
                               "each have their own copy)", field="access")
        named += ["access", chosen.value]
    named += _limit_fields(limits)
    if durability is not None:
        named += ["durability", _choice(Durability, durability, "durability").value]
    if ordering is not None:
        named += ["ordering", _choice(QueueOrdering, ordering, "ordering").value]
    return named


def read_limits(cfg: dict[bytes, bytes]) -> QueueLimits:
    """A queue's limits as its config hash holds them."""
    def number(name: str) -> int:
        return int(cfg.get(LIMIT_FIELDS[name].encode(), 0))
    return QueueLimits(max_messages=number("max_messages"), max_bytes=number("max_bytes"),
                       max_message_bytes=number("max_message_bytes"), max_dead_letters=number("max_dead_letters"),
                       overflow=Overflow(cfg.get(b"overflow", b"reject_new").decode()),
                       overflow_to_dead_letters=cfg.get(b"overflow_dl") == b"1")


def _choice(kind: type[Choice], value: object, field: str) -> Choice:
    """``value`` as a member of the enum ``kind``, else InvalidInput naming ``field`` and the choices."""
    try:
        return kind(value)
    except ValueError:
        raise InvalidInput(f"{field} must be " + " or ".join(repr(c.value) for c in kind), field=field) from None


def _milliseconds(value: object, field: str, least: float, most: float, rule: str) -> int:
    """A number of seconds from ``least`` to ``most`` (not a bool) in whole milliseconds."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not least <= value <= most:
        raise InvalidInput(f"{field} must be {rule}", field=field)
    return round(value * 1000)


def _last_value_fields(model: QueueModel, last_value: bool | None, key: str | None) -> list[str | int]:
    """The config fields of the last-value settings given (those None are kept)."""
    named: list[str | int] = []
    pubsub = model is QueueModel.PUBLISH_SUBSCRIBE
    if last_value is not None:
        if not isinstance(last_value, bool):
            raise InvalidInput("last_value must be true or false", field="last_value")
        if last_value and pubsub:
            raise InvalidInput("a last-value queue is point-to-point", field="last_value")
        named += ["lv", int(last_value)]
    if key is not None:
        if pubsub:
            raise InvalidInput("last_value_key applies to a last-value queue, which is point-to-point",
                               field="last_value_key")
        if not isinstance(key, str) or len(key) > defaults.MAX_PROPERTY_NAME_CHARS:
            raise InvalidInput(f"last_value_key must be a property name of at most "
                               f"{defaults.MAX_PROPERTY_NAME_CHARS} characters (\"\" for none)",
                               field="last_value_key")
        named += ["lv_key", key]
    return named


def _limit_fields(given: dict[str, Any]) -> list[str | int]:
    """The config fields of the limit settings given (those None are kept)."""
    named: list[str | int] = []
    for name, value in given.items():
        if value is None:
            continue
        if name == "overflow":
            stored: str | int = _choice(Overflow, value, name).value
        elif name == "overflow_to_dead_letters":
            if not isinstance(value, bool):
                raise InvalidInput(f"{name} must be true or false", field=name)
            stored = int(value)
        else:
            stored = check_integer_range(value, name, 0, defaults.MAX_EXACT_INT,
                                         rule="a whole number from 0 (no limit) to 2^53")
        named += [LIMIT_FIELDS[name], stored]
    return named
