"""Where a connection's request waits while it arrives (``slow_clients``): its bytes, read ahead
of gunicorn's parser, and the count of such bytes by client address."""

from __future__ import annotations

import io
import socket
import threading
from collections import Counter

from gunicorn.http.unreader import SocketUnreader


class BodyBudget:
    """The bytes of bodies still arriving, by client address, in one worker. Threads reserve (a
    request being read) and the main thread releases (a connection closed), so it takes a lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def reserve(self, address: str, size: int) -> bool:
        with self._lock:
            if self._held[address] + size > self.limit:
                return False
            self._held[address] += size
            return True

    def release(self, address: str, size: int) -> None:
        with self._lock:
            self._held[address] -= size
            if self._held[address] <= 0:
                del self._held[address]

    def held(self, address: str) -> int:
        with self._lock:
            return self._held[address]


HELD_PIECE_BYTES = 64 * 1024
"""What one read of held bytes takes: gunicorn's reader copies what is left of a piece on each
read of the app (64 KiB at a time), so larger pieces cost more copying (9 MB: 5 ms in pieces of
64 KiB, 30 ms in pieces of 1 MiB)."""


class ReadAhead(SocketUnreader):  # type: ignore[misc]  # gunicorn has no type information
    """gunicorn's reader of a connection, serving what the poller read ahead before the socket.

    Kept apart from gunicorn's own buffer, which copies all it holds on every read: a body of
    10 MiB held there and read 64 KiB at a time cost half a second of copying. Here a read takes
    a piece of at most ``HELD_PIECE_BYTES``."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.held = bytearray()
        self.start = 0

    @property
    def size(self) -> int:
        return len(self.held) - self.start

    def add(self, data: bytes) -> None:
        self.held += data

    def peek(self, start: int, end: int) -> bytes:
        return bytes(self.held[self.start + start:self.start + min(end, self.size)])

    def drop(self) -> None:
        self.held, self.start = bytearray(), 0
        self.buf = io.BytesIO()

    def take_back(self) -> None:
        """What gunicorn's parser put back (the bytes past the request it read) comes first."""
        if self.buf.seek(0, io.SEEK_END):
            self.held[:self.start] = self.buf.getvalue()
            self.start = 0
            self.buf = io.BytesIO()

    def give_back(self) -> None:
        """What is held goes to gunicorn's buffer, where gunicorn looks for a next request already in."""
        if self.size:
            self.buf.seek(0, io.SEEK_END)
            self.buf.write(self.held[self.start:])
            self.held, self.start = bytearray(), 0

    def chunk(self, size_hint: int | None = None) -> bytes:
        if not self.size:
            return super().chunk(size_hint)  # type: ignore[no-any-return]
        size = min(self.size, max(self.mxchunk, min(size_hint or 0, HELD_PIECE_BYTES)))
        with memoryview(self.held) as view:
            piece = bytes(view[self.start:self.start + size])
        self.start += size
        if self.start == len(self.held):
            self.held, self.start = bytearray(), 0
        elif self.start > len(self.held) // 2:
            del self.held[:self.start]
            self.start = 0
        return piece
