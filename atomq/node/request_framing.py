"""Where a request's body ends, told from bytes as they arrive, so that a connection can wait on the
poller until its whole request is in (``slow_clients``) and a thread never waits for a client.

A chunked body is followed through its framing here rather than read by a thread under a time-out:
a thread with a deadline is still a thread held for as long as the deadline, and a few dozen slow
chunked uploads would then stall every tenant for that long. Following the framing costs a scan of
each chunk's size line, never a copy of the data. Only what gunicorn's parser would read is
understood; anything else (a framing gunicorn refuses, a broken chunk) is handed to a thread as it
is, and gunicorn answers it from the bytes already in, without waiting for more.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass

HEX_DIGITS = frozenset(string.hexdigits.encode())
MAX_CHUNK_LINE_BYTES = 16 * 1024
"""Past gunicorn's own bound on a chunk's size line (8190), so it refuses the line itself."""
MAX_TRAILER_BYTES = 8190 * 32 + 4
"""gunicorn's bound on a trailer section, which it refuses past it."""
CRLF = b"\r\n"

Peek = Callable[[int, int], bytes]
"""The body's bytes from one offset to another (as many as are in)."""


@dataclass(frozen=True)
class Framing:
    """How a request says its body ends: ``length`` bytes, or chunked (``length`` None)."""

    length: int | None
    expects_continue: bool


def framing_of(head: bytes) -> Framing | None:
    """The framing of the body that follows ``head`` (a request's line and headers); None when it
    has no body, or one gunicorn's parser refuses before reading it (duplicate or malformed
    lengths, a transfer coding other than chunked last, chunked with a length or in HTTP/1.0).
    Header names are matched more loosely than gunicorn does (any case, spaces around), so a
    header gunicorn reads as a length is never taken for no body here."""
    line, _, fields = head.partition(CRLF)
    lengths: list[bytes] = []
    codings: list[bytes] = []
    expects_continue = False
    for field in fields.split(CRLF):
        name, colon, value = field.partition(b":")
        if not colon:
            continue
        name, value = name.strip().lower(), value.strip(b" \t")
        if name == b"content-length":
            lengths.append(value)
        elif name == b"transfer-encoding":
            codings += [coding.strip(b" \t").lower() for coding in value.split(b",")]
        elif name == b"expect":
            expects_continue = value.lower() == b"100-continue"
    http_1_1 = line.endswith(b"HTTP/1.1")
    if codings:
        if lengths or codings[-1] != b"chunked" or codings.count(b"chunked") > 1 or not http_1_1:
            return None
        return Framing(None, expects_continue)
    if len(lengths) != 1 or not lengths[0].isdigit() or int(lengths[0]) == 0:
        return None
    return Framing(int(lengths[0]), expects_continue and http_1_1)


class ChunkedBody:
    """Follows a chunked body's framing as its bytes arrive: where it ends, how much data it holds.
    ``broken`` once the framing is wrong (the thread's parser then refuses it); each call scans only
    the size lines and trailers that came in since the last, never the chunks' data."""

    def __init__(self) -> None:
        self.scanned = 0
        """Offset into the body of the next size line (or of the trailers, after the last chunk)."""
        self.data_bytes = 0
        """The data of the chunks passed so far."""
        self.chunk_left = 0
        """Of the chunk being received: its data not in yet, and its CRLF."""
        self.in_trailers = False
        self.end: int | None = None
        """The body's length with its framing, once complete."""
        self.broken = False

    def data_in(self, available: int) -> int:
        """The data received so far, the chunk still arriving included."""
        partial = max(0, min(self.chunk_left - 2, available - self.scanned)) if self.chunk_left else 0
        return self.data_bytes + partial

    def follow(self, peek: Peek, available: int) -> None:
        """Moves over the ``available`` bytes of the body in (``peek`` reads them)."""
        while self.end is None and not self.broken:
            if self.chunk_left:
                if self.scanned + self.chunk_left > available:
                    return
                self.scanned += self.chunk_left
                self.broken = peek(self.scanned - 2, self.scanned) != CRLF
                self.data_bytes += self.chunk_left - 2
                self.chunk_left = 0
            elif self.in_trailers:
                self._trailers(peek, available)
                return
            elif not self._size_line(peek, available):
                return

    def _size_line(self, peek: Peek, available: int) -> bool:
        held = peek(self.scanned, min(available, self.scanned + MAX_CHUNK_LINE_BYTES))
        at = held.find(CRLF)
        if at < 0:
            self.broken = len(held) >= MAX_CHUNK_LINE_BYTES
            return False
        size = held[:at].split(b";", 1)[0].rstrip(b" \t")
        if not size or not set(size) <= HEX_DIGITS:
            self.broken = True
            return False
        self.scanned += at + 2
        self.chunk_left = int(size, 16) + 2 if int(size, 16) else 0
        self.in_trailers = not self.chunk_left
        return True

    def _trailers(self, peek: Peek, available: int) -> None:
        held = peek(self.scanned, min(available, self.scanned + MAX_TRAILER_BYTES))
        if held[:2] == CRLF:
            self.end = self.scanned + 2
            return
        at = held.find(CRLF + CRLF)
        if at >= 0:
            self.end = self.scanned + at + 4
        else:
            self.broken = len(held) >= MAX_TRAILER_BYTES
