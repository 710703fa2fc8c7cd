"""How the dashboard writes numbers, times, message contents and queue settings for people."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

from atomq import defaults
from atomq.platform.models import Durability, OnExpire, QueueAccess, QueueInfo, QueueOrdering

PREVIEW_CHARS = 2000
"""A document shows this much of its data: a page of 50 messages of 1 MiB each would not load."""


def size(n: int | None) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``3.2 GiB``."""
    if n is None:
        return "not measured yet"
    if n < 1024:
        return f"{n:,} B"
    value = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def of_limit(used: int, limit: int, unit: str = "bytes") -> str:
    """``used`` against ``limit`` (0: no limit), as the pages say it."""
    shown = size if unit == "bytes" else count
    if not limit:
        return f"{shown(used)} (no limit)"
    return f"{shown(used)} of {shown(limit)} ({100 * used / limit:.0f}%)"


def count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` of ``noun``: ``1 redelivery``, ``2 redeliveries``, ``0 messages`` (``nouns``: when not ``noun`` + s)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def queue_settings(info: QueueInfo) -> list[str]:
    """What tells a queue apart from the others, in short phrases for a table's cell: exclusive,
    ordered by group, last-value, expiry, limits, durability, where its dead letters go, and its
    redeliveries and ack time-out where they
    are not a new queue's. Its model and topics have columns of their own."""
    out = []
    if info.access is QueueAccess.EXCLUSIVE:
        out.append("exclusive")
    if info.ordering is QueueOrdering.GROUP:
        out.append("ordered by group")
    if info.last_value:
        out.append(f"last-value by {info.last_value_key}" if info.last_value_key else "last-value")
    if info.message_ttl_s:
        then = "discarded" if info.on_expire is OnExpire.DISCARD else "dead-lettered"
        out.append(f"TTL {duration(info.message_ttl_s)}, then {then}")
    lim = info.limits
    held = [plural(lim.max_messages, "message")] if lim.max_messages else []
    held += [size(lim.max_bytes)] if lim.max_bytes else []
    if held:
        out.append(f"holds at most {' and '.join(held)}")
    if info.durability is Durability.SYNC:
        out.append("sends synced to disk")
    if info.dead_letter_queue:
        out.append(f"dead letters to {info.dead_letter_queue}")
    if info.max_redeliveries != defaults.MAX_REDELIVERIES:
        out.append(f"at most {plural(info.max_redeliveries, 'redelivery', 'redeliveries')}")
    if info.ack_timeout_s != defaults.ACK_TIMEOUT_S:
        out.append(f"ack time-out {duration(info.ack_timeout_s)}")
    return out


def per_minute(limit: int) -> str:
    return "no limit" if not limit else f"{limit:,} per minute"


def when(seconds: float | None) -> str:
    """Epoch seconds as UTC, to the second."""
    if not seconds:
        return "-"
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(seconds: float | None) -> str:
    """Epoch seconds for a ``<time datetime>`` attribute."""
    return "" if not seconds else datetime.fromtimestamp(seconds, timezone.utc).isoformat()


def properties(props: dict[str, Any]) -> str:
    return json.dumps(props, ensure_ascii=False, sort_keys=True) if props else ""


def preview(data: str | bytes) -> tuple[str, str]:
    """A document's data as ``(what it is, its start)``: text as it is, bytes in base64."""
    if isinstance(data, bytes):
        text = base64.b64encode(data).decode("ascii")
        kind = f"{len(data):,} bytes, base64"
    else:
        text, kind = data, f"text, {len(data):,} characters"
    if len(text) > PREVIEW_CHARS:
        return f"{kind}; the first {PREVIEW_CHARS:,} characters", text[:PREVIEW_CHARS]
    return kind, text


DURATION_UNITS = (("day", 86_400), ("hour", 3_600), ("minute", 60))
"""The units a duration of a minute or more is written in, largest first; what is left goes in seconds."""


def duration(seconds: float) -> str:
    """A duration as people read it: ``7 days``, ``1 hour 30 minutes``, ``45 s``, ``1.5 s``.

    Server settings are kept in seconds; 604800 says little to a reader, ``7 days``
    says it at a glance. Every non-zero unit is written, so nothing is rounded away.
    """
    if seconds < 60:
        return f"{seconds:g} s"
    parts = []
    rest = seconds
    for unit, unit_s in DURATION_UNITS:
        n, rest = divmod(rest, unit_s)
        if n:
            parts.append(plural(int(n), unit))
    if round(rest, 3):
        parts.append(f"{round(rest, 3):g} s")
    return " ".join(parts)


def due(deadline: float, now: float) -> str:
    """A deadline against now, to the second: ``in 25 s``, ``2 minutes 5 s overdue``."""
    left = round(deadline - now)
    return f"in {duration(left)}" if left >= 0 else f"{duration(-left)} overdue"


def ago(at: float | None, now: float) -> str:
    """How long since ``at``, to the second: ``12 s ago``."""
    return "never" if not at else f"{duration(max(0, round(now - at)))} ago"
