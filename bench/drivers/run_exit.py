"""How a bench run ends, the same in every script: a failure or a Ctrl-C (or a kill) leaves a line on stderr
and an exit status, and what the run started is stopped and removed without a second Ctrl-C cutting that short.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from types import TracebackType
from typing import Any

from .serve_node import BenchError


def stop_on_sigterm() -> None:
    """A kill cleans up as Ctrl-C does: SIGTERM raises KeyboardInterrupt, so every node is stopped."""
    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def uninterrupted(stop: Callable[[], object]) -> None:
    """Runs a stop with SIGINT and SIGTERM ignored, so a second Ctrl-C does not leave a process behind."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        stop()
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)


class BenchRun:
    """A script's run, as ``with BenchRun() as run:``; after the block, ``run.status`` is the exit status
    when the run failed (1, after "FAILED: ..." on stderr) or was interrupted (130, after "interrupted").

    Those two are caught here so that every script fails alike and still reaches its own stops: the
    callables given to ``at_exit`` run on every way out, the last given first, uninterrupted.
    """

    def __init__(self) -> None:
        self.status: int | None = None
        self._stops = ExitStack()

    def __enter__(self) -> BenchRun:
        stop_on_sigterm()
        return self

    def at_exit(self, stop: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        self._stops.callback(stop, *args, **kwargs)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        if isinstance(exc, BenchError):
            print(f"FAILED: {exc}", file=sys.stderr)
            self.status = 1
        elif isinstance(exc, KeyboardInterrupt):
            print("interrupted", file=sys.stderr)
            self.status = 130
        uninterrupted(self._stops.close)
        return self.status is not None
