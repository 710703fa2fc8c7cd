"""The node's child processes: whether one runs, by its pid (the data directory's lock, the
embedded Valkey and the node's health records each ask about a process that may have died
without a word), and that none outlives the node."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


def pid_alive(pid: int) -> bool:
    """True while ``pid`` is a running process (a zombie waiting to be reaped is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return not Path("/proc/self").exists()  # vanished, or no /proc on this system
    return stat.rpartition(")")[2].split()[0] != "Z"


def parent_death_signal() -> Any:
    """A preexec_fn asking Linux to SIGTERM a child (Valkey, an execution worker)
    when atomq dies, even by ``kill -9``.

    SIGTERM makes Valkey fsync its AOF and exit cleanly, and an execution
    worker finish its execution and stop. Linux sends it when the *thread*
    that started the child exits, so start it from a long-lived thread
    (normally the main one).
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork, not in the child
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # atomq died before prctl took effect
            os._exit(1)

    return preexec


def exits_within(pid: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Waits for a process asked to stop; SIGKILL at the deadline. True when it exited in time.

    ``proc``, when this process started it, is reaped; else the pid is watched until it is gone.
    """

    def gone() -> bool:
        return proc.poll() is not None if proc is not None else not pid_alive(pid)

    deadline = time.monotonic() + timeout
    while not gone():
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if proc is not None:
                proc.wait()
            else:
                while pid_alive(pid):
                    time.sleep(0.01)
            return False
        time.sleep(0.01)
    return True
