"""The child processes tests start: where they run, what they can import, whether they still run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
"""tests/, the directory that holds ``support``."""

REPO = TESTS_DIR.parent
"""The repository's root, the working directory of the ``atomq`` commands tests run."""


def support_pythonpath() -> str:
    """A child's ``PYTHONPATH`` under which ``support`` imports as it does in the tests."""
    return os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))


def pid_running(pid: int) -> bool:
    """True while pid runs (a zombie that nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its ``ATOMQ_`` settings, with ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("ATOMQ_")}, **extra}


def no_java_env(tmp: Path) -> dict[str, str]:
    """An environment in which no Java runtime can be found: a stale JAVA_HOME, a PATH without java."""
    empty = tmp / "no-java-here"
    empty.mkdir(exist_ok=True)
    return {"JAVA_HOME": str(empty), "PATH": os.path.dirname(sys.executable)}
