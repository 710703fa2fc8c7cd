"""The stored format version: written on first start, checked on every start.

A newer atomq migrates older data here before it serves; an older atomq
refuses data written in a format it does not know, instead of misreading it.
"""

from __future__ import annotations

from atomq.errors import FormatVersionError, StorageError
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.keys import FORMAT_VERSION_KEY
from atomq.platform.store.storage import STORE_ERRORS

FORMAT_VERSION = 9
"""1: the first. 2: usage counts the store's per-message bookkeeping (``atomq.platform.queues.footprint``),
and the maintenance works from per-tenant indexes of due destinations: data of format 1 has its
usage recounted and its indexes built (``QueueServer``) before a node serves it. 3: an envelope's
head may carry a priority and an expiry (``<documents>,<priority>,<expiry ms>``), and ready
messages wait in a sorted set beside the stream; data of format 2 is read as it is (an older
atomq would misread the new heads, so the number goes up). 4: each destination counts the bytes of
its messages neither acked nor dead (``D:held``, what ``max_bytes`` holds): the migration's
recount of usage counts them for data of format 3 (``audit.repair_usage``). 5: the API keys'
entries are spread over 256 hashes (``keys.api_key_table``) instead of one, which an older atomq
would not find; ``TenantStore`` moves them on start. 6: a new API key's id names its tenant and its
entry is in the tenant's own slot (``keys.api_key_table``), which an older atomq would refuse as
malformed; the entries of older keys stay where they are and keep working. 7: a delivery's in-flight
state keeps when it was made and who holds it (``f<since ms>,<holder>``, see ``_lib_state.lua``), which an
older atomq would not take for in flight (it could not ack it); a bare ``f`` of format 6 reads as
a delivery of unknown holder and time. 8: a copy its send delays waits in the schedule never
delivered (state ``0|0|s``), counted in ``D:delayed``, and joins the ready ones with a new sequence
number; an older atomq would make it ready at its send's place and leave the count behind. Data of
format 7 holds no delayed copy and is read as it is (the migration's recount sets the counts). 9: a
message of a group may wait behind its group's head (state ``w<place>``, in ``D:gw``, see
``_lib_groups.lua``), which an older atomq would never deliver; data of format 8 has no groups and
is read as it is."""


def check_format(client: RedisClient) -> int:
    """Records the format version of new data and refuses data of an unknown one."""
    try:
        client.set(FORMAT_VERSION_KEY, FORMAT_VERSION, nx=True)
        stored = int(client.get(FORMAT_VERSION_KEY) or FORMAT_VERSION)
    except STORE_ERRORS as exc:
        raise StorageError(f"Redis failed while reading the format version: {exc}") from None
    if stored > FORMAT_VERSION:
        raise FormatVersionError(
            f"the data was written in format {stored} by a newer atomq; this one reads format "
            f"{FORMAT_VERSION} at most: upgrade atomq",
            stored=stored, supported=FORMAT_VERSION,
        )
    return stored


def record_format(client: RedisClient) -> None:
    """Marks the data as migrated to this atomq's format."""
    try:
        client.set(FORMAT_VERSION_KEY, FORMAT_VERSION)
    except STORE_ERRORS as exc:
        raise StorageError(f"Redis failed while writing the format version: {exc}") from None
