"""The ``Date`` header of every answer, formatted once a second rather than once an answer.

gunicorn writes each answer's ``Date`` with ``gunicorn.util.http_date()``, which formats the time
anew (``email.utils.formatdate``): about 2.4% of a worker's CPU for a one-message send
(BENCHMARKS.md, "Where a one-message send's worker CPU goes"). The header names the second only,
so within one second the text is the same: a worker of the node replaces ``http_date`` when it
starts (``NodeWorker.init_process``) with :func:`http_date`, which formats a second's text once.
gunicorn looks the function up on its ``util`` module at each answer, as it does ``write_error``
(``atomq.node.refusals``); its source is not changed.
"""

from __future__ import annotations

import time

from gunicorn import util

_FORMAT = util.http_date
_last: tuple[int, str] = (-1, "")
"""The second last formatted and its text: one tuple, so a thread reads both from one assignment."""


def http_date(timestamp: float | None = None) -> str:
    """What ``gunicorn.util.http_date`` returns, the current second's text formatted once."""
    if timestamp is not None:
        return str(_FORMAT(timestamp))
    global _last
    now = time.time()
    second = int(now)
    last = _last
    if last[0] == second:
        return last[1]
    text = str(_FORMAT(second))
    _last = (second, text)
    return text


def install() -> None:
    """Makes this process's gunicorn date its answers with :func:`http_date`."""
    util.http_date = http_date
