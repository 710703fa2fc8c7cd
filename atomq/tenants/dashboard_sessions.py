"""Dashboard sessions: a record in Redis behind a cookie that holds only a random id.

Kept beside the accounts because a session stands for a key that signed in
and lives only while that key works; the cookie is the dashboard's
(``atomq.api.dashboard.sessions``).

The cookie carries ``secrets.token_urlsafe(32)`` and nothing else; the record
lives under the SHA-256 of that id (``keys.dashboard_session``), so whoever
reads Redis still holds no cookie that signs in. Neither holds the API key:
the record keeps the key's id and SHA-256 digest, which is what
``TenantStore.reauthenticate`` needs to check on every request that the key
still works, so revoking a key ends its sessions at the next request.

A record expires ``IDLE_S`` after its last use (every page view and action
renews it; the pages' own refreshes do not, so an open tab nobody looks at
signs out) and never lives past ``MAX_AGE_S`` after sign-in, however busy. Each record also
holds the session's CSRF token and, for one page view, a notice saying what
the last action did.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass

from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage
from atomq.tenants.records import Principal

IDLE_S = 30 * 60
MAX_AGE_S = 12 * 3600
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")
"""What ``secrets.token_urlsafe(32)`` gives; anything else in the cookie names no session."""


def new_token() -> str:
    """A random token for a session id or a CSRF token: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class DashboardSession:
    """A signed-in session: whose key it was opened with, and its CSRF token.

    ``tenant_id`` and ``key_id`` are None for the runtime owner.
    """

    id: str
    tenant_id: str | None
    key_id: str | None
    key_digest: str
    csrf_token: str
    created_at: float

    @property
    def is_owner(self) -> bool:
        return self.tenant_id is None


class SessionStore:
    """Opens, finds (renewing) and ends dashboard sessions in Redis."""

    def __init__(self, storage: Storage, idle_s: float = IDLE_S, max_age_s: float = MAX_AGE_S) -> None:
        self.storage = storage
        self.idle_s = idle_s
        self.max_age_s = max_age_s

    def create(self, principal: Principal, key_digest: str) -> DashboardSession:
        """A new session for ``principal``, who signed in with the key of digest ``key_digest``."""
        session = DashboardSession(id=new_token(), tenant_id=principal.tenant_id, key_id=principal.key_id,
                                   key_digest=key_digest, csrf_token=new_token(), created_at=time.time())
        pipe = self.storage.client.pipeline(transaction=True)
        key = k.dashboard_session(session.id)
        pipe.hset(key, mapping={"tenant_id": session.tenant_id or "", "key_id": session.key_id or "",
                                "key_digest": key_digest, "csrf_token": session.csrf_token,
                                "created_at": repr(session.created_at)})
        pipe.expire(key, round(self.idle_s))
        self.storage.call(pipe.execute)
        return session

    def load(self, session_id: str | None, renew: bool = True) -> DashboardSession | None:
        """The live session ``session_id`` names, its idle time renewed unless ``renew``
        is False; None when there is none (never issued, signed out, idle too long or too old)."""
        if session_id is None or not SESSION_ID.fullmatch(session_id):
            return None
        key = k.dashboard_session(session_id)
        fields = self.storage.call(self.storage.client.hgetall, key)
        if b"key_digest" not in fields:  # none, or a notice set as the record expired
            return None
        session = DashboardSession(
            id=session_id, tenant_id=fields[b"tenant_id"].decode() or None, key_id=fields[b"key_id"].decode() or None,
            key_digest=fields[b"key_digest"].decode(), csrf_token=fields[b"csrf_token"].decode(),
            created_at=float(fields[b"created_at"]))
        left = session.created_at + self.max_age_s - time.time()
        if left <= 0:
            self.delete(session_id)
            return None
        if renew:
            self.storage.call(self.storage.client.expire, key, max(1, round(min(self.idle_s, left))))
        return session

    def delete(self, session_id: str) -> None:
        """Ends a session (sign-out, or its key stopped working)."""
        self.storage.call(self.storage.client.delete, k.dashboard_session(session_id))

    def set_notice(self, session: DashboardSession, text: str) -> None:
        """What the last action did, for the next page to say once."""
        pipe = self.storage.client.pipeline(transaction=True)
        key = k.dashboard_session(session.id)
        pipe.hset(key, "notice", text)
        pipe.expire(key, round(self.idle_s), nx=True)  # a record that expired meanwhile leaves no orphan
        self.storage.call(pipe.execute)

    def take_notice(self, session: DashboardSession) -> str | None:
        """The notice left for this page view, removed so it shows once."""
        pipe = self.storage.client.pipeline(transaction=True)
        key = k.dashboard_session(session.id)
        pipe.hget(key, "notice")
        pipe.hdel(key, "notice")
        notice, _ = self.storage.call(pipe.execute)
        return None if notice is None else str(notice.decode())
