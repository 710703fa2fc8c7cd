"""The load every driver moves, and several client threads that share it.

All the throughput phases move the same messages in the same batches, so
their figures compare; the HTTP and RabbitMQ drivers run the same threads
from a common start, so their phases are timed alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .serve_node import BenchError, check

PAYLOAD_BYTES = 1024
BATCH = 100
PHASE_DEADLINE_S = 300.0
"""A threaded phase that has not finished by then has hung: it fails instead of waiting for ever."""


def batch_dispenser(n: int) -> Callable[[], tuple[int, int] | None]:
    """Hands out (first message, size) of the next batch to whichever thread asks; None when all are out."""
    lock = threading.Lock()
    starts = iter(range(0, n, BATCH))

    def take() -> tuple[int, int] | None:
        with lock:
            start = next(starts, None)
        return None if start is None else (start, min(BATCH, n - start))

    return take


def threaded_phase(what: str, count: int, work: Callable[[int, Callable[[], Any], threading.Event], tuple[float, Any]],
                   on_start: Callable[[], None] | None = None) -> tuple[float, list[Any]]:
    """Runs ``work(i, ready, stop)`` in ``count`` threads and times them from a common start.

    Each thread sets itself up (connects), calls ``ready()``, which returns
    once all threads are ready, then works and returns (the perf_counter at
    which it finished, its result). The phase lasts from that common start to
    the last thread's finish. The first error in any thread fails the phase
    (the others are told to stop); a phase that hangs fails after
    PHASE_DEADLINE_S.
    """
    started: list[float] = []

    def start() -> None:
        if on_start is not None:
            on_start()
        started.append(time.perf_counter())

    barrier = threading.Barrier(count + 1, action=start, timeout=60)
    stop = threading.Event()
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            results[i] = work(i, barrier.wait, stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)
            stop.set()
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,), name=f"{what}-{i}", daemon=True) for i in range(count)]
    try:
        for t in threads:
            t.start()
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # a thread failed to set up: its error is in errors
        deadline = time.monotonic() + PHASE_DEADLINE_S
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads) and not errors:
            raise BenchError(f"{what} did not finish within {PHASE_DEADLINE_S:.0f} s")
    finally:
        stop.set()
    if errors:
        exc = errors[0]
        if isinstance(exc, (BenchError, KeyboardInterrupt)):
            raise exc
        raise BenchError(f"{what}: {type(exc).__name__}: {exc}") from exc
    check(bool(started), f"{what}: the client threads never started together")
    return max(r[0] for r in results) - started[0], [r[1] for r in results]

