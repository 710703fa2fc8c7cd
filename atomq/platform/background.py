"""A node's background work under one small supervisor: loops that an error cannot end.

The maintenance loop and the listener supervisor run for the node's whole
life in threads nobody watches. A step that raises something unexpected
(redis-py's cluster exceptions are not ``RedisError``; a bad setting gives an
``OverflowError``) used to end its thread for good while ``/v1/ready`` kept
saying ready. :func:`run_loop` calls a step over and over, catches every
``Exception``, logs each distinct failure once with its cause, backs off
exponentially while it lasts and records the part's health where readiness
reads it. A ``BaseException`` (``SystemExit``, ``KeyboardInterrupt``) still
ends the loop: it asks the process to stop.

gunicorn answers ``/v1/ready`` from any of several worker processes, each
with its own loops, so a :class:`HealthBoard` keeps each process's failing
parts in a small file of its own in a directory of the node, which every
process reads. The files live on local disk, not in Redis, so that they can
say a loop fails when Redis is the reason.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from atomq.platform.store.child_processes import pid_alive

log = logging.getLogger("atomq.background")

HEALTH_EXTENSION = "atomq_health"
"""The Flask extension under which an app keeps its :class:`HealthBoard`."""
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


def describe(exc: BaseException) -> str:
    """One line naming an error: its type and message, and the cause it was raised from."""
    text = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    if cause is not None:
        text += f" (caused by {type(cause).__name__}: {cause})"
    return text


class HealthBoard:
    """The failing parts of a node's loops, as every process of the node sees them.

    Each process writes its own state to ``<directory>/<pid>.json`` when it
    changes (a process that starts overwrites what a dead one with its pid
    left); readers skip, and remove, the files of processes that are gone.
    Without a directory (a node in one process) the state stays in memory.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        self._failing: dict[str, str] = {}
        self._lock = threading.Lock()
        self._path = directory / f"{os.getpid()}.json" if directory is not None else None
        self._write()

    def report(self, part: str, problem: str | None) -> None:
        """Records that ``part`` fails with ``problem``, or works (``None``)."""
        with self._lock:
            if self._failing.get(part) == problem:
                return
            if problem is None:
                del self._failing[part]
            else:
                self._failing[part] = problem
            self._write()

    def problems(self) -> list[str]:
        """``"<part>: <problem>"`` for every part failing in any live process of the node."""
        with self._lock:
            failing = [f"{part}: {problem}" for part, problem in self._failing.items()]
        if self.directory is not None:
            for path in self.directory.glob("*.json"):
                try:
                    pid = int(path.stem)
                except ValueError:
                    continue
                if pid == os.getpid():
                    continue
                if not pid_alive(pid):
                    path.unlink(missing_ok=True)
                    continue
                failing += [f"{part}: {problem}" for part, problem in self._read(path).items()]
        return sorted(set(failing))

    def close(self) -> None:
        """Forgets this process's state (on a clean stop of its loops)."""
        with self._lock:
            self._failing.clear()
            if self._path is not None:
                self._path.unlink(missing_ok=True)

    def _write(self) -> None:
        if self._path is None:
            return
        tmp = self._path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(self._failing))
            os.replace(tmp, self._path)
        except OSError as exc:  # the in-memory state still answers for this process
            log.warning("cannot record the node's health in %s: %s", self._path, exc)

    @staticmethod
    def _read(path: Path) -> dict[str, str]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):  # removed meanwhile; written files are replaced whole
            return {}
        return {str(part): str(problem) for part, problem in data.items()} if isinstance(data, dict) else {}


def run_loop(part: str, step: Callable[[], object], stop: threading.Event, interval_s: float,
             health: HealthBoard | None = None, first_backoff_s: float = FIRST_BACKOFF_S,
             max_backoff_s: float = MAX_BACKOFF_S, pause: Callable[[float], object] | None = None) -> None:
    """Calls ``step`` every ``interval_s`` seconds until ``stop`` is set; ``pause(interval_s)``, when
    given, is the wait between two steps (one that may end early), and must not raise.

    When it raises, the error is logged (once for as long as the same error
    repeats), ``part`` is recorded as failing on ``health``, and the next try
    waits ``first_backoff_s``, twice that after another failure, and so on up
    to ``max_backoff_s``; the first success records the part as working again
    and brings back the normal interval.
    """
    backoff = first_backoff_s
    last_problem: str | None = None
    while not stop.is_set():
        try:
            step()
        except Exception as exc:
            problem = describe(exc)
            if problem != last_problem:
                log.error("%s failed: %s; trying again in %.0f s, and less often while it fails",
                          part, problem, backoff, exc_info=exc)
                last_problem = problem
            if health is not None:
                health.report(part, problem)
            stop.wait(backoff)
            backoff = min(backoff * 2, max_backoff_s)
            continue
        if last_problem is not None:
            log.warning("%s works again", part)
            last_problem = None
        if health is not None:
            health.report(part, None)
        backoff = first_backoff_s
        (pause or stop.wait)(interval_s)
