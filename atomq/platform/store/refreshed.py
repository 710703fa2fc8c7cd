"""A figure every request reads but that lives on one shared key (the server settings, the sum of
all tenants' usage), kept per process and read again every few seconds without a request waiting.

Read in the request that finds it old, such a figure made every request of every tenant wait
while the primary holding that key failed over (seconds, in the failover test), though each
tenant's own data was elsewhere. Here the held value serves while one background thread reads it
again; a read that fails keeps the held value (logged once) and is tried again a period later.
Only the first read, when nothing is held yet, is made in the caller's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from atomq.errors import AtomqError

log = logging.getLogger("atomq.refreshed")

T = TypeVar("T")


class Refreshed(Generic[T]):
    """``read()``'s value, read again in the background once older than ``every_s``."""

    def __init__(self, read: Callable[[], T], every_s: float, what: str) -> None:
        self._read = read
        self._every_s = every_s
        self._what = what
        self._held: tuple[float, T] | None = None
        self._refreshing = threading.Lock()
        self._failing = False
        self._sets = 0
        """How often :meth:`set` held a value: a read that began before one does not replace it."""

    def get(self) -> T:
        held = self._held
        if held is None:
            return self.set(self._read())
        if time.monotonic() - held[0] > self._every_s and self._refreshing.acquire(blocking=False):
            threading.Thread(target=self._refresh, name=f"atomq-refresh-{self._what}", daemon=True).start()
        return held[1]

    def set(self, value: T) -> T:
        """Holds ``value`` as just read (a change this process made itself)."""
        self._sets += 1
        self._held = (time.monotonic(), value)
        return value

    def _refresh(self) -> None:
        sets = self._sets
        try:
            value = self._read()
            if self._sets == sets:  # else this process changed it meanwhile: that value is newer
                self._held = (time.monotonic(), value)
            if self._failing:
                self._failing = False
                log.info("reading the %s works again", self._what)
        except Exception as exc:  # whatever it is, the held value serves and the read is tried again
            held = self._held
            if held is not None:
                self._held = (time.monotonic(), held[1])  # tried again a period from now
            if not self._failing:
                self._failing = True
                reason = exc.message if isinstance(exc, AtomqError) else repr(exc)
                log.warning("cannot read the %s (%s); the last one read serves meanwhile", self._what, reason)
        finally:
            self._refreshing.release()
