"""API keys: their format, how they are stored, and how one is checked.

A key reads ``aq_<key id>_<secret>``: the key id finds the stored entry with
one lookup. A key id is 28 lowercase hex: its tenant's 12 (the tenant id
without ``t_``) and 16 random, so the entry lives in the tenant's own cluster
slot (``keys.api_key_table``) and a request touches no primary but its
tenant's; keys issued before format 6 have 16 random hex and keep working
from the shared tables. The secret (``secrets.token_urlsafe(32)``,
256 random bits) proves the holder. Only the SHA-256 of the whole key is
stored: a key that random needs no salt or slow hash to resist guessing,
and a plain digest keeps the per-request check cheap. Digests are compared
with ``hmac.compare_digest``, so the time a check takes says nothing about
how much of a guess was right.

Nothing here logs or repeats a key; errors say what is wrong with it, never
what it was.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from atomq.errors import Unauthorized

KEY_ID = re.compile(r"[0-9a-f]{28}|[0-9a-f]{16}")
API_KEY = re.compile(r"aq_([0-9a-f]{28}|[0-9a-f]{16})_([A-Za-z0-9_-]{43})")
"""``token_urlsafe(32)`` gives 43 characters of the URL-safe alphabet, ``_`` and ``-`` included."""

UNKNOWN_KEY = "the API key is unknown or was revoked"


def new_key_id(tenant_id: str) -> str:
    """A new key id of ``tenant_id`` (``t_`` and 12 hex): those 12, then 16 random hex characters."""
    return tenant_id.removeprefix("t_") + secrets.token_hex(8)


def tenant_of_key_id(key_id: str) -> str | None:
    """The tenant a key id of the current form names (its first 12 hex); None for an id issued
    before format 6, which names none."""
    return "t_" + key_id[:12] if len(key_id) == 28 else None


def new_api_key(key_id: str) -> str:
    """A new key with id ``key_id``; shown to its owner once and never stored."""
    return f"aq_{key_id}_{secrets.token_urlsafe(32)}"


def digest(api_key: str) -> str:
    """The SHA-256 hex of a whole key: the only form in which a key is stored."""
    return hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()


def parse_key_id(api_key: Any) -> str:
    """The key id of a well-formed key; raises Unauthorized for anything else."""
    if not isinstance(api_key, str) or not api_key:
        raise Unauthorized("an API key is required: send 'Authorization: Bearer <key>'")
    match = API_KEY.fullmatch(api_key)
    if match is None:
        raise Unauthorized("the API key is malformed: a key reads aq_<key id>_<secret>")
    return match.group(1)


def entry(tenant_id: str, key_digest: str) -> str:
    """The stored value of one key: its tenant and its digest."""
    return f"{tenant_id}|{key_digest}"


def tenant_of(stored: bytes | None) -> str | None:
    """The tenant id a stored entry names (None for no entry)."""
    return None if stored is None else stored.decode().partition("|")[0]


def verify(api_key: str, stored: str) -> str:
    """Returns the tenant id of a stored entry if ``api_key`` matches it, else raises Unauthorized."""
    tenant_id, _, key_digest = stored.partition("|")
    if not hmac.compare_digest(digest(api_key), key_digest):
        raise Unauthorized(UNKNOWN_KEY)
    return tenant_id


def is_owner_key(api_key: str, owner_digest: str) -> bool:
    """Whether ``api_key`` is the owner's key, compared digest to digest in constant time."""
    return hmac.compare_digest(digest(api_key), owner_digest)
