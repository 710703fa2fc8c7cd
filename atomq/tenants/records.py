"""What a tenant account is, who a request acts as, and the rules for their fields.

Pure logic, no Redis: the checks run before any key is built, so a value
that breaks a rule changes nothing and never reaches a key name.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from atomq import defaults
from atomq.errors import InvalidInput, NotFound
from atomq.integer_range import check_integer_range

TENANT_ID = re.compile(r"t_[0-9a-f]{12}")


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """A tenant account. It holds no key material: keys live apart, hashed.

    ``rate_limit_per_minute`` and ``disk_quota_bytes`` are 0 for no limit.
    ``spark_weight`` (1 to 1000) is the weight of the tenant's FAIR scheduler
    pool when its listeners run on Spark.
    ``created_at`` is seconds since the epoch by the Redis clock, so every
    node agrees on the order of creation.
    """

    id: str
    name: str
    rate_limit_per_minute: int = defaults.TENANT_RATE_LIMIT_PER_MINUTE
    disk_quota_bytes: int = defaults.TENANT_DISK_QUOTA_BYTES
    spark_weight: int = defaults.SPARK_WEIGHT
    created_at: float


@dataclass(frozen=True)
class ExecutionGrant:
    """What a valid execution token allows: one execution of one listener of one tenant."""

    tenant: str
    listener: str
    execution: str
    expires_at: float


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a tenant through one of its keys, a tenant's
    execution through its token, or the runtime owner.

    It names the key by its id only (the id is no secret: it appears in the
    URL that revokes the key), so logging a principal leaks nothing.
    """

    tenant_id: str | None
    key_id: str | None
    execution: ExecutionGrant | None = None

    @property
    def is_owner(self) -> bool:
        """True for the runtime owner, who acts for no tenant of its own."""
        return self.tenant_id is None


def tenant_from_record(tenant_id: str, fields: dict[bytes, bytes]) -> Tenant | None:
    """A stored record (its hash fields) as a Tenant; None for no record or one being removed."""
    if not fields or b"deleting" in fields:
        return None
    return Tenant(
        id=tenant_id,
        name=fields[b"name"].decode(),
        rate_limit_per_minute=int(fields[b"rate_limit_per_minute"]),
        disk_quota_bytes=int(fields[b"disk_quota_bytes"]),
        # Records stored before Spark weights existed have no field: the default weight.
        spark_weight=int(fields.get(b"spark_weight", 1)),
        created_at=float(fields[b"created_at"]),
    )


def new_tenant_id() -> str:
    """A random tenant id, ``t_`` and 12 lowercase hex characters."""
    return "t_" + secrets.token_hex(6)


def tenant_not_found(tenant_id: str) -> NotFound:
    """The one error for a well-formed tenant id that names no tenant (or no longer does)."""
    return NotFound(f"tenant {tenant_id!r} does not exist", tenant=tenant_id)


def check_issued_tenant_id(tenant_id: Any) -> str:
    """Returns ``tenant_id`` if it has the form of an issued id.

    Anything else cannot name a tenant, so it is NotFound (as an unknown
    id is), and no key is ever built from it. The error does not repeat it:
    a caller that pasted a secret in the wrong place must not see it echoed.
    """
    if not isinstance(tenant_id, str) or not TENANT_ID.fullmatch(tenant_id):
        raise NotFound("that tenant does not exist: a tenant id reads t_ and 12 lowercase hex characters")
    return tenant_id


def check_name(name: Any) -> str:
    """Returns ``name`` if it is 1 to ``MAX_TENANT_NAME_CHARS`` printable characters, else raises InvalidInput."""
    if not isinstance(name, str) or not 0 < len(name) <= defaults.MAX_TENANT_NAME_CHARS or not name.isprintable():
        raise InvalidInput(
            f"name is required and must be 1 to {defaults.MAX_TENANT_NAME_CHARS} printable characters", field="name"
        )
    if TENANT_ID.fullmatch(name):  # where a name or an id is taken (--tenant), it would read as an id
        raise InvalidInput("a name may not have the form of a tenant id (t_ and 12 lowercase hex characters)",
                           field="name")
    return name


def check_limit(value: Any, field: str) -> int:
    """Returns ``value`` if it is an integer from 0 (no limit) up; bools are refused."""
    return check_integer_range(value, field, 0, defaults.MAX_TENANT_LIMIT,
                               rule=f"an integer from 0 to {defaults.MAX_TENANT_LIMIT} (0 means no limit)")


def check_spark_weight(value: Any) -> int:
    """Returns ``value`` if it is an integer from 1 to ``MAX_SPARK_WEIGHT``; bools are refused."""
    return check_integer_range(value, "spark_weight", 1, defaults.MAX_SPARK_WEIGHT)
