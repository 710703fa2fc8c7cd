"""Validation of the names that become parts of Redis keys.

Queue, subscriber and tenant names are checked here, with messages that
state the rule, before any key is built: none of them may contain a brace
(the cluster hash tag), a colon (the key separator) or anything outside the
allowed characters, so no name can reach into another keyspace. A message's
group, which names members of its destination's keys, is checked here too.
"""

from __future__ import annotations

import re

from atomq import defaults
from atomq.errors import InvalidInput

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
GROUP_PATTERN = rf"^[!-~]{{1,{defaults.MAX_GROUP_CHARS}}}$"
GROUP = re.compile(GROUP_PATTERN[1:-1])
"""SQS's MessageGroupId alphabet: letters, digits and punctuation (printable ASCII but the space), so a
group's messages in the waiting set are one range after "<group>\\0" (see ``_lib_state.lua``)."""
GROUP_RULE = (f"must be 1 to {defaults.MAX_GROUP_CHARS} characters of letters, digits and punctuation "
              "(printable ASCII, no space)")
TENANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MESSAGE_ID = r"[0-9]{1,15}-[0-9]{12}"
RECEIPT_PATTERN = rf"^({MESSAGE_ID})~([1-9][0-9]{{0,8}})$"
RECEIPT = re.compile(RECEIPT_PATTERN[1:-1])
"""A receipt as a get writes it: ``<message id>~<delivery count>``, the count without
leading zeros, so one delivery has one spelling and a call cannot name it twice."""


def check_queue_name(name: str, field: str = "name") -> str:
    """Returns ``name`` if it is a valid queue name, else raises InvalidInput."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidInput(
            f"{field} must start with a letter or digit and contain only letters, digits, "
            "'.', '_' and '-', at most 128 characters",
            field=field,
        )
    return name


def check_group(group: object, field: str = "group") -> str:
    """Returns ``group`` if it is a valid message group, else raises InvalidInput."""
    if not isinstance(group, str) or not GROUP.fullmatch(group):
        raise InvalidInput(f"{field} {GROUP_RULE}", field=field)
    return group


def check_subscriber_name(name: str) -> str:
    """Subscriber names follow the queue name rule."""
    return check_queue_name(name, field="subscriber")


def check_consumer_name(name: str) -> str:
    """An exclusive queue's consumer names follow the queue name rule (they are hash fields,
    never keys, but a name that starts with '#' would clash with the active one's field)."""
    return check_queue_name(name, field="consumer")


def check_tenant_id(tenant: str) -> str:
    """Returns ``tenant`` if it is a valid tenant id, else raises InvalidInput."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise InvalidInput(
            "tenant id must start with a letter or digit and contain only letters, digits, "
            "'_' and '-', at most 64 characters",
            field="tenant",
        )
    return tenant


def check_receipts(receipts: object, field: str = "receipts") -> list[str]:
    """The receipts of a settle call, each in the one spelling a get gives it.

    Settling compares the count as a number: ``<id>~01`` would name the same
    delivery as ``<id>~1`` under a second spelling, so anything but the
    canonical form is refused here, before a script counts it twice.
    """
    if isinstance(receipts, (str, bytes)) or not isinstance(receipts, (list, tuple)):
        raise InvalidInput(f"{field} must be a list of receipts", field=field)
    for r in receipts:
        if not isinstance(r, str) or not RECEIPT.fullmatch(r):
            raise InvalidInput(
                f"{field} must be given as a get wrote them: '<message id>~<delivery count>', "
                f"the count a whole number without leading zeros; {str(r)[:80]!r} is not one",
                field=field)
    return list(receipts)
