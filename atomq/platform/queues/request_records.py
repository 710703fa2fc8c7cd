"""A request's record: what its script calls stored, found again by the request's token, so that
a request tried again (by the store's client after a time-out, or by its sender with the same
Idempotency-Key) stores once.

A send's record is a hash under ``keys.TenantKeys.request_record``: ``#b`` the digest of the body a
sender's key came with, ``#n`` the repeats answered, and a field per script call, named by the
positions of its messages in the request, holding what the call stored (``scripts/send.lua``).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Iterable

from atomq import defaults
from atomq.errors import Conflict, InvalidInput, OutcomeUnknown

CALL_RECORD_MS = defaults.REQUEST_TOKEN_WINDOW_S * 1000
"""How long the record of a call under a token the node made is kept: past the store client's retries."""


def made_token(kind: str = "") -> str:
    """A token the node makes for a request or a call (``kind`` names which): no sender's key holds a
    NUL, so a made token is never a key's."""
    return f"\0{kind}{uuid.uuid4().hex}"


@dataclass(frozen=True)
class RequestToken:
    """What makes a send store once however often it is tried. Every script call of a send carries
    its request's token and writes what it stored in the request's record under it; a call that
    finds its answer there (the store's client retried it after a time-out, or the sender retried
    the request) stores nothing again and answers the same ids.

    ``key``: the sender's Idempotency-Key, kept for ``defaults.IDEMPOTENCY_WINDOW_S`` and bound to
    the body it came with; None for a request without one, whose token the node makes and keeps
    only while the store's client may retry a call (``defaults.REQUEST_TOKEN_WINDOW_S``)."""

    token: str
    key: str | None

    @classmethod
    def of(cls, key: str | None) -> RequestToken:
        """The token of a request with Idempotency-Key ``key`` (checked), or of one without (None)."""
        if key is None:
            return cls(made_token(), None)
        most = defaults.MAX_IDEMPOTENCY_KEY_CHARS
        if not isinstance(key, str) or not 0 < len(key) <= most or not all(" " <= c <= "~" for c in key):
            raise InvalidInput(f"an Idempotency-Key is 1 to {most} printable ASCII characters",
                               field="Idempotency-Key")
        return cls(key, key)

    @property
    def window_ms(self) -> int:
        return CALL_RECORD_MS if self.key is None else 1000 * defaults.IDEMPOTENCY_WINDOW_S

    def digest(self, *parts: Iterable[Any]) -> str:
        """What binds a key to its request: a digest of the request as the scripts take it ('' for a
        token the node made, which no other request carries)."""
        if self.key is None:
            return ""
        h = hashlib.sha256()
        for part in parts:
            for item in part:
                data = item if isinstance(item, bytes) else str(item).encode("utf-8")
                h.update(b"%d:" % len(data))
                h.update(data)
            h.update(b";")
        return h.hexdigest()


@dataclass(frozen=True)
class RecordedCall:
    """One script call of a send: its request's token and digest, and its field in the request's
    record (``positions_field``)."""

    token: RequestToken
    digest: str
    field: str


def positions_field(positions: Iterable[int]) -> str:
    """A script call's field in its request's record: ``p`` then the positions of its messages in
    the request as ranges (``p0-99``, ``p3,7-9``), so a repeat of the call finds it, and a publish
    retried by its sender knows which of its messages a try stored."""
    ranges: list[list[int]] = []
    for i in positions:
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return "p" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def positions_of(field_name: str) -> list[int]:
    """The positions a record's field names (``positions_field``)."""
    out: list[int] = []
    for part in field_name[1:].split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def stored_answer(answer: bytes) -> tuple[list[str], int, int]:
    """What a call stored, from its answer in the request's record: its ids, the waiting messages it
    dropped, and the destinations each of its messages went to (send.lua: ``<dropped>:<copies>|<stamp>|
    <sequence>|`` then an original id or a run ``+<n>`` of new ids a part). A record an older node
    wrote has no copies: it counts one, what a point-to-point queue takes."""
    head, stamp, seq, parts = answer.decode().split("|", 3)
    dropped, _, copies = head.partition(":")
    ids: list[str] = []
    n = int(seq)
    for part in parts.split(",") if parts else []:
        if part.startswith("+"):
            for n in range(n + 1, n + 1 + int(part[1:])):
                ids.append(f"{stamp}-{n:012d}")
        else:
            ids.append(part)
    return ids, int(dropped), int(copies or 1)


def key_reused(token: RequestToken) -> Conflict:
    return Conflict(f"Idempotency-Key {token.key!r} was used for another request within "
                    f"{defaults.IDEMPOTENCY_WINDOW_S // 3600} hours: a key names one request; make a new one "
                    "for a new request", code="idempotency_key_reused", idempotency_key=token.key)


def outcome_unknown(exc: OutcomeUnknown, token: RequestToken) -> OutcomeUnknown:
    """The store's lost answer, with what the sender can do about it."""
    if token.key is not None:
        advice = "send it again with the same Idempotency-Key: it is then stored once"
    else:
        advice = ("it had no Idempotency-Key, so a repeat cannot be told from a new send: browse the queue before "
                  "sending it again, and give sends an Idempotency-Key")
    return OutcomeUnknown(f"{exc.message}; {advice}", idempotency_key=token.key, **exc.details)
