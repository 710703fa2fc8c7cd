"""One owner per data directory: the lock ``DIR/atomq.lock``.

An embedded Valkey started on a directory shuts down any server it finds
running there (one left by a crashed atomq), so a second ``atomq serve``, an
offline ``atomq audit`` or ``atomq selftest`` on the directory of a running
node used to take that node's store away from it. Whoever runs on a data
directory first takes an exclusive ``flock`` on its lock file and keeps it
for its life; the file says who holds it (pid, command) and, once it runs,
where the embedded Valkey listens, so that others can refuse with a useful
message or, like ``audit``, work through the running node's store.

The kernel releases a ``flock`` when its holder dies, even by ``kill -9``,
so a lock is never stale: the next owner takes it, and its embedded Valkey
still stops an old server it finds on the directory (see
``EmbeddedValkey.start``). A forked child (a gunicorn worker) closes its copy
of the lock, so that it cannot keep the directory after its master died.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from atomq.errors import DataDirInUse
from atomq.platform.store.child_processes import pid_alive

LOCK_FILE = "atomq.lock"
HOLDER_WAIT_S = 10.0
"""How long a lock held past the death of the pid it names is waited for (a child still exiting)."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds a data directory, as its lock file says."""

    pid: int
    command: str
    valkey_socket: str | None = None
    valkey_port: int | None = None
    redis_url_given: bool = False
    """True when the node uses a Redis of its own (``--redis-url``), not the embedded Valkey."""


def _forget_in_child(ref: weakref.ReferenceType[DataDirLock]) -> None:
    lock = ref()
    if lock is not None and lock._fd is not None:
        os.close(lock._fd)  # only this copy: the lock stays with the parent
        lock._fd = None


class DataDirLock:
    """The exclusive lock on a data directory, taken by :meth:`acquire`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.path = self.data_dir / LOCK_FILE
        self._fd: int | None = None
        self._holder: LockHolder | None = None
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=functools.partial(_forget_in_child, weakref.ref(self)))

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def try_acquire(self, command: str) -> bool:
        """Takes the lock if nobody holds it, writing ``command`` and this pid into the file."""
        if self._fd is not None:
            return True
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        self.record(LockHolder(pid=os.getpid(), command=command))
        return True

    def acquire(self, command: str, wait_s: float = HOLDER_WAIT_S) -> None:
        """Takes the lock, or raises :class:`DataDirInUse` naming its holder.

        A lock whose file names a process that is gone is held by a child of
        that process still exiting, and one whose file names nobody is being
        taken or given up this instant: both are waited for, up to ``wait_s``.
        """
        deadline = time.monotonic() + wait_s
        while not self.try_acquire(command):
            holder = read_holder(self.data_dir)
            if (holder is not None and pid_alive(holder.pid)) or time.monotonic() > deadline:
                raise in_use(self.data_dir, holder)
            time.sleep(0.1)

    def record(self, holder: LockHolder) -> None:
        """Writes what others should know of the holder (its Valkey, once it runs) into the file."""
        if self._fd is None:
            raise RuntimeError("the lock is not held")
        data = json.dumps(asdict(holder)).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        self._holder = holder

    def note_valkey(self, socket_path: str, port: int | None) -> None:
        """Adds where the embedded Valkey listens to the holder's record."""
        assert self._holder is not None
        self.record(LockHolder(**{**asdict(self._holder), "valkey_socket": socket_path, "valkey_port": port}))

    def note_redis_url(self) -> None:
        """Records that the holder uses a Redis of its own, not the directory's embedded Valkey."""
        assert self._holder is not None
        self.record(LockHolder(**{**asdict(self._holder), "redis_url_given": True}))

    def release(self) -> None:
        """Gives the directory up (the file stays: removing it would race with the next owner)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> DataDirLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def read_holder(data_dir: Path, wait_s: float = 2.0) -> LockHolder | None:
    """What the lock file of ``data_dir`` says of its holder (``None`` if it says nothing).

    The holder rewrites the file in place, so a read may fall between its
    truncation and its write: an empty or partial file is read again, for
    up to ``wait_s``.
    """
    path = Path(data_dir) / LOCK_FILE
    deadline = time.monotonic() + wait_s
    while True:
        try:
            data: Any = json.loads(path.read_text())
            return LockHolder(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def in_use(data_dir: Path, holder: LockHolder | None,
           advice: str = "stop it first, or give another --data-dir") -> DataDirInUse:
    """The error that says who holds ``data_dir``, and what to do about it."""
    who = f"atomq {holder.command} (pid {holder.pid})" if holder is not None else "another atomq process"
    return DataDirInUse(f"the data directory {data_dir} is in use by {who}; {advice}",
                        data_dir=str(data_dir), pid=holder.pid if holder is not None else None)
