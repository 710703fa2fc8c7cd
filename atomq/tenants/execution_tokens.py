"""Execution tokens: the short-lived credential a work horse uses instead of a tenant key.

An execution job carries no tenant key. The supervisor that schedules it
signs a token that names the tenant, the listener and the execution, and
expires; the main node accepts it only for that execution's own calls
(taking its batch, sending, extending, finishing). The signing key is
random, kept in Redis and shared by every node, so any node can check a
token another node signed. A token is ``aqx_<payload>.<signature>``, both
base64url; the payload is JSON and no secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time

from atomq.errors import Unauthorized
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.storage import Storage
from atomq.tenants.records import ExecutionGrant

PREFIX = "aqx_"
INVALID = "the execution token is malformed, forged or expired"


def is_execution_token(key: str) -> bool:
    return isinstance(key, str) and key.startswith(PREFIX)


def unverified_tenant(token: str) -> str | None:
    """The tenant a token names, read without checking its signature: for the holder's
    own spans and log lines only (the payload is no secret; the node checks the signature)."""
    payload = token.removeprefix(PREFIX).partition(".")[0]
    try:
        tenant = json.loads(_unb64(payload))["t"]
    except (ValueError, KeyError, TypeError):
        return None
    return tenant if isinstance(tenant, str) else None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ExecutionTokens:
    """Signs and checks execution tokens with the key shared through Redis."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._secret: bytes | None = None

    def _key(self) -> bytes:
        if self._secret is None:
            client = self._storage.client
            self._storage.call(client.set, lk.EXECUTION_SECRET_KEY, secrets.token_hex(32), nx=True)
            stored = self._storage.call(client.get, lk.EXECUTION_SECRET_KEY)
            self._secret = stored if isinstance(stored, bytes) else str(stored).encode()
        return self._secret

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key(), payload.encode("ascii"), hashlib.sha256).digest())

    def mint(self, tenant: str, listener: str, execution: str, ttl_s: float) -> str:
        body = json.dumps({"t": tenant, "l": listener, "e": execution, "x": round(time.time() + ttl_s)},
                          separators=(",", ":"))
        payload = _b64(body.encode("utf-8"))
        return f"{PREFIX}{payload}.{self._sign(payload)}"

    def verify(self, token: str) -> ExecutionGrant:
        """The grant a token carries; Unauthorized when it is malformed, forged or expired."""
        payload, _, signature = token[len(PREFIX):].partition(".")
        if not (payload.isascii() and signature.isascii() and payload and signature):
            raise Unauthorized(INVALID)
        if not hmac.compare_digest(self._sign(payload), signature):
            raise Unauthorized(INVALID)
        try:
            body = json.loads(_unb64(payload))
            grant = ExecutionGrant(tenant=str(body["t"]), listener=str(body["l"]), execution=str(body["e"]),
                                   expires_at=float(body["x"]))
        except (ValueError, KeyError, TypeError):
            raise Unauthorized(INVALID) from None
        if grant.expires_at < time.time():
            raise Unauthorized(INVALID)
        return grant
