"""Processes the tests register (``ATOMQ_PROCESSES``) to make executions fail, stall or report.

Importable by the work horses of a served node: the tests put this
directory on their ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from atomq.workers.context import ExecutionContext


class Refused(Exception):
    pass


def always_fail(ctx: ExecutionContext) -> None:
    """Raises before doing anything: every delivery of its batch fails."""
    raise Refused(f"refusing {len(ctx.messages)} message(s)")


def stall_first_delivery(ctx: ExecutionContext) -> None:
    """Forwards to ``settings["to"]``; on a first delivery it first writes its pid to
    ``settings["pid_file"]`` and sleeps, so a test can kill its work horse mid-execution."""
    if any(not m.redelivered for m in ctx.messages):
        Path(ctx.settings["pid_file"]).write_text(str(os.getpid()))
        time.sleep(float(ctx.settings.get("sleep_s", 60)))
    for message in ctx.messages:
        for document in message.documents:
            ctx.send(ctx.settings["to"], [document], source=message)
