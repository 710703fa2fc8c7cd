"""A progress line on standard error for work that takes a while: a big send from a file, the drain
of a dead letter queue.

Quick work prints nothing. Past ``every_s`` the line says how far the work is: on a terminal it is
rewritten in place, elsewhere (a log, a CI job) a new line comes every ``LOG_EVERY_S`` at most, so
that a log shows the work alive without a line a batch. Standard output keeps only the result,
for scripts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_EVERY_S = 0.5
LOG_EVERY_S = 5.0


class Progress:
    def __init__(self, doing: str, unit: str, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._doing = doing
        self._unit = unit
        self._stream = stream or sys.stderr
        self._clock = clock
        self._terminal = self._stream.isatty()
        self._every_s = TERMINAL_EVERY_S if self._terminal else LOG_EVERY_S
        self._started = clock()
        self._next = self._started + self._every_s
        self._shown = False

    def update(self, done: int) -> None:
        now = self._clock()
        if now >= self._next:
            self._next = now + self._every_s
            self._show(f"{self._doing}: {done:,} {self._unit} ({done / max(now - self._started, 1e-9):,.0f}/s)")

    def finish(self, done: int) -> None:
        """Ends the line; only when one was shown (quick work stays silent)."""
        if self._shown:
            seconds = self._clock() - self._started
            self._show(f"{self._doing}: {done:,} {self._unit} in {seconds:,.1f} s, done")
            if self._terminal:
                self._stream.write("\n")
                self._stream.flush()

    def _show(self, text: str) -> None:
        self._shown = True
        if self._terminal:
            self._stream.write("\r\033[K" + text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()
