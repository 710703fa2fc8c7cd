"""Validation of the names that become parts of Redis keys.

Queue, subscriber and tenant names are checked here, with messages that
state the rule, before any key is built: none of them may contain a brace
(the cluster hash tag), a colon (the key separator) or anything outside the
allowed characters, so no name can reach into another keyspace.
"""

from __future__ import annotations

import re

from atomq.errors import InvalidInput

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
TENANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_queue_name(name: str, field: str = "name") -> str:
    """Returns ``name`` if it is a valid queue name, else raises InvalidInput."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidInput(
            f"{field} must start with a letter or digit and contain only letters, digits, "
            "'.', '_' and '-', at most 128 characters",
            field=field,
        )
    return name


def check_subscriber_name(name: str) -> str:
    """Subscriber names follow the queue name rule."""
    return check_queue_name(name, field="subscriber")


def check_tenant_id(tenant: str) -> str:
    """Returns ``tenant`` if it is a valid tenant id, else raises InvalidInput."""
    if not isinstance(tenant, str) or not TENANT_ID.fullmatch(tenant):
        raise InvalidInput(
            "tenant id must start with a letter or digit and contain only letters, digits, "
            "'_' and '-', at most 64 characters",
            field="tenant",
        )
    return tenant
