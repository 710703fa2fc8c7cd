"""Every API key's SQS credential pair, and every tenant's SQS account id.

SQS clients sign each request with SigV4: an access key id names the
credential and an HMAC made with the secret access key proves its holder. To
check such a signature the node must hold the secret itself (a digest, as the
API keys are stored, cannot recompute an HMAC), so the secret is stored,
beside its key's entry in the key's own slot (``keys.sqs_secret_table``).

- The **access key id** is ``AQ`` and the key id in upper case (30
  characters; 18 for a key issued before format 6): it maps back to its key
  id without any lookup, and so to the key's entry, which is also what
  revocation deletes. AWS's own ids are 20 characters, too few to hold a key
  id of 112 bits; the SDKs take any length (IAM allows 16 to 128).
- The **secret access key** is derived from the API key (HMAC-SHA256 of the
  whole key with a fixed label, the last 40 of its base-62 digits, about 238
  bits): derived rather than random so that the pair of a key issued before
  this version can be stored the first time its holder presents the key
  (``GET /v1/credentials/sqs``) and is the same pair on every call, with
  nothing to remember from the call before. It is not derived from the
  stored digest: the digest is what the store and a dashboard session hold,
  and a reader of either must not get a working credential from it. It is 40
  characters of ``[A-Za-z0-9]`` so that it stands unquoted in a broker URL
  (``sqs://ID:SECRET@host:port``).
- The **account id** (12 digits) is drawn at random for a tenant on first
  need (its creation, or the first credentials call of a tenant made
  before), claimed in ``keys.SQS_ACCOUNTS_KEY`` so no two tenants share one,
  never reused, and kept in the tenant's record: stable for its life.

A pair works while its key's entry exists: revoking or rotating the key
(which revokes the old one) deletes the entry first. ``identity`` reads the
entry every time; the SigV4 check reads it through ``signer``, which keeps
what it read for at most ``SIGNER_CACHE_S`` (1 s) in the process: the
contract lets a revocation take up to 2 s to reach every node, and the
request path saves a store round trip on nearly every request. A revocation
made through this process's ``TenantStore`` is seen here at once
(``forget``); only an unknown or revoked id is never kept, so a pair stored
a moment ago works at once.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
import time
from dataclasses import dataclass

from atomq.errors import Conflict, Unauthorized
from atomq.platform.store import keys as k
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.storage import Storage
from atomq.tenants import api_keys, scripts

ACCESS_KEY_PREFIX = "AQ"
ACCESS_KEY_ID = re.compile(rf"{ACCESS_KEY_PREFIX}([0-9A-F]{{28}}|[0-9A-F]{{16}})")
SECRET_LABEL = b"atomq SQS secret access key, version 1"
SECRET_CHARS = 40
BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
ACCOUNT_DIGITS = 12
ACCOUNT_CLAIM_TRIES = 20
"""Draws of an account id before giving up: 9 * 10**11 of them, so a clash is rare and 20 in a row never."""
SIGNER_CACHE_S = 1.0
"""How long ``signer`` keeps an identity it read: half the 2 s a revocation may take to reach every node."""
CACHE_ENTRIES = 10_000
"""Identities (and account ids) one process keeps at most: past it, the cache starts again empty."""


@dataclass(frozen=True)
class SqsCredentials:
    """One API key's SQS pair and its tenant's account id."""

    access_key_id: str
    secret_access_key: str
    account_id: str


@dataclass(frozen=True)
class SqsIdentity:
    """Who an access key id names now: its tenant, its API key's id, and the secret that signs."""

    tenant_id: str
    key_id: str
    secret_access_key: str


def access_key_id(key_id: str) -> str:
    """The access key id of API key ``key_id``."""
    return ACCESS_KEY_PREFIX + key_id.upper()


def key_id_of(access_key: str) -> str | None:
    """The API key id an access key id names; None if it cannot name one."""
    match = ACCESS_KEY_ID.fullmatch(access_key)
    return None if match is None else match.group(1).lower()


def secret_access_key(api_key: str) -> str:
    """The SQS secret of ``api_key``: the same on every call, never the same for two keys."""
    number = int.from_bytes(hmac.new(api_key.encode("utf-8", "surrogatepass"), SECRET_LABEL, hashlib.sha256).digest())
    digits = []
    for _ in range(SECRET_CHARS):
        number, digit = divmod(number, 62)
        digits.append(BASE62[digit])
    return "".join(digits)


def new_account_id() -> str:
    """A random 12-digit account id that does not start with 0 (tools that read it as a number keep it)."""
    return str(10 ** (ACCOUNT_DIGITS - 1) + secrets.randbelow(9 * 10 ** (ACCOUNT_DIGITS - 1)))


class SqsKeys:
    """Reads and stores the SQS side of the API keys of one store."""

    def __init__(self, client: RedisClient, storage: Storage) -> None:
        self.client = client
        self.storage = storage
        self._read = client.register_script(scripts.SQS_READ)
        self._store_secret = client.register_script(scripts.SQS_STORE_SECRET)
        self._set_account = client.register_script(scripts.SET_ACCOUNT)
        self._signers: dict[str, tuple[float, SqsIdentity]] = {}
        self._accounts: dict[str, str] = {}

    def issued(self, tenant_id: str, key_id: str, api_key: str) -> SqsCredentials:
        """The pair of a key just issued (its secret stored with it, see ``TenantStore``)."""
        return SqsCredentials(access_key_id(key_id), secret_access_key(api_key), self.account_id(tenant_id))

    def presented(self, api_key: str) -> SqsCredentials:
        """The pair of a key its holder presents: checked as ``TenantStore.authenticate`` checks it;
        a key issued before SQS credentials existed gets its secret stored now."""
        key_id = api_keys.parse_key_id(api_key)
        entry, stored_secret = self._entry_and_secret(key_id)
        if entry is None:
            raise Unauthorized(api_keys.UNKNOWN_KEY)
        tenant_id = api_keys.verify(api_key, entry)
        secret = secret_access_key(api_key)
        if stored_secret is None and not self.storage.call(
                self._store_secret, keys=[k.api_key_table(key_id), k.sqs_secret_table(key_id)],
                args=[key_id, entry, secret]):
            raise Unauthorized(api_keys.UNKNOWN_KEY)  # revoked meanwhile
        return SqsCredentials(access_key_id(key_id), secret, self.account_id(tenant_id))

    def identity(self, access_key: str) -> SqsIdentity | None:
        """Who ``access_key`` names now; None for an id that names no live key or a key whose
        pair was never stored (its holder has not yet asked for it)."""
        key_id = key_id_of(access_key)
        if key_id is None:
            return None
        entry, secret = self._entry_and_secret(key_id)
        if entry is None or secret is None:
            return None
        return SqsIdentity(api_keys.tenant_of(entry.encode()) or "", key_id, secret)

    def signer(self, access_key: str) -> SqsIdentity | None:
        """``identity``, as read at most ``SIGNER_CACHE_S`` ago in this process (see the module's
        docstring for why that is within the contract); None is never kept."""
        now = time.monotonic()
        held = self._signers.get(access_key)
        if held is not None and held[0] > now:
            return held[1]
        identity = self.identity(access_key)
        if identity is None:
            self._signers.pop(access_key, None)
            return None
        if len(self._signers) >= CACHE_ENTRIES:
            self._signers.clear()
        self._signers[access_key] = (now + SIGNER_CACHE_S, identity)
        return identity

    def forget(self, key_id: str) -> None:
        """Drops what ``signer`` keeps of key ``key_id``: its revocation, made here, holds here at once."""
        self._signers.pop(access_key_id(key_id), None)

    def _entry_and_secret(self, key_id: str) -> tuple[str | None, str | None]:
        entry, secret = self.storage.call(self._read, keys=[k.api_key_table(key_id), k.sqs_secret_table(key_id)],
                                          args=[key_id])
        return (entry.decode() if entry else None), (secret.decode() if secret else None)

    def account_id(self, tenant_id: str) -> str:
        """The tenant's account id, drawn and claimed on first need; Unauthorized once the tenant is gone.
        Kept in the process once read: it never changes in the tenant's life, and a tenant id is never
        issued again."""
        known = self._accounts.get(tenant_id)
        if known is not None:
            return known
        account = self._account_id(tenant_id)
        if len(self._accounts) >= CACHE_ENTRIES:
            self._accounts.clear()
        self._accounts[tenant_id] = account
        return account

    def _account_id(self, tenant_id: str) -> str:
        record = k.tenant_record(tenant_id)
        held = self.storage.call(self.client.hget, record, "sqs_account")
        if held is not None:
            return str(held.decode())
        for _ in range(ACCOUNT_CLAIM_TRIES):
            drawn = new_account_id()
            if self.storage.call(self.client.hsetnx, k.SQS_ACCOUNTS_KEY, drawn, tenant_id):
                break
        else:
            raise Conflict(f"no free SQS account id in {ACCOUNT_CLAIM_TRIES} draws: try again")
        kept = self.storage.call(self._set_account, keys=[record], args=[drawn])
        if kept is None:
            raise Unauthorized(api_keys.UNKNOWN_KEY)  # the tenant's removal began
        # Another call gave the tenant its id first: this draw stays claimed (never reused), unused.
        return str(kept.decode())
