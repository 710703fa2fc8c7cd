"""The process ``atomq demo`` registers on the node it starts (and nowhere else): the echo-service,
dying once on purpose.

Seed 002's failure: an execution has processed part of a batch, its outputs and its checkpoint
are stored, and the Atom dies before the batch is acknowledged. Here the work horse kills itself
(SIGKILL, so nothing of it runs on) once the demo has armed it, right after the outputs and the
checkpoint of its batch are stored; it leaves a note of what it processed for the demo to print.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from atomq.workers.builtin import echo_service, validate_echo
from atomq.workers.context import ExecutionContext

MARKER_SETTING = "die_once_marker"
"""A path: the process dies when ``<path>.armed`` exists and ``<path>`` does not, writing ``<path>``."""


def echo_service_dying_once(ctx: ExecutionContext) -> None:
    echo_service(ctx)
    marker = Path(ctx.settings[MARKER_SETTING])
    if marker.exists() or not marker.with_name(marker.name + ".armed").exists():
        return
    ctx.flush()  # the outputs and the checkpoint are stored: now the crash
    marker.write_text(json.dumps({"messages": [m.id for m in ctx.messages]}))
    os.kill(os.getpid(), signal.SIGKILL)


echo_service_dying_once.validate_settings = validate_echo  # type: ignore[attr-defined]
