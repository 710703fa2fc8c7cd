"""Whether a process runs, by its pid: the data directory's lock, the embedded Valkey and the
node's health records each ask about a process that may have died without a word."""

from __future__ import annotations

import os
from pathlib import Path


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
