"""The server's limits on what all tenants store (``max_messages``, ``max_disk_bytes``), held under
racing sends.

Each tenant's usage lives in its own cluster slot, so no script can read them all; a node sums
them every few seconds. Judged against that sum alone, 120 sends racing for room for 50 were all
taken. So a send first reserves what it is about to store (its message copies and bytes) in one
server-wide key, in a script that refuses it when the last sum and the reservations the sum may
not hold yet would pass a limit (``scripts/reserve.lua``). It costs that key a call per send, and
only while a limit is set.
"""

from __future__ import annotations

from atomq.errors import QuotaExceeded
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage

STORE_WITHIN_MS = 2000
"""Longer than a send takes to be stored once reserved: a sum read since its reservation may still
miss it for that long, so the reservation counts that much before the sum began."""


def reserve_room(storage: Storage, copies: int, incoming_bytes: int, stored: dict[str, int],
                 max_messages: int, max_disk_bytes: int) -> None:
    """Reserves ``copies`` message copies and ``incoming_bytes`` under the server's limits, or refuses
    the send (507 server_full) when they would pass one; ``stored`` is the node's last sum of every
    tenant's usage, with ``read_at_ms``, the store's time when it began."""
    errors = {"SERVERFULL": lambda words: _server_full(words[0], int(words[1]), max_messages, max_disk_bytes)}
    storage.run("reserve", [k.SERVER_RESERVATIONS_KEY],
                [copies, incoming_bytes, stored["messages"], stored["stored_bytes"],
                 stored["read_at_ms"] - STORE_WITHIN_MS, max_messages, max_disk_bytes], errors)


def _server_full(setting: str, held: int, max_messages: int, max_disk_bytes: int) -> QuotaExceeded:
    if setting == "max_messages":
        return QuotaExceeded(f"the server stores at most {max_messages} message copies and holds {held} (with the "
                             "sends under way): consume or delete messages first", code="server_full",
                             limit=max_messages, used=held, scope="server", setting="max_messages")
    return QuotaExceeded(f"the server stores at most {max_disk_bytes} bytes and holds {held} (with the sends under "
                         "way): this send would pass it", code="server_full", limit=max_disk_bytes, used=held,
                         scope="server", setting="max_disk_bytes")
