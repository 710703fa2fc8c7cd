"""Keeping deliveries in flight while work on them goes on: an execution's batch, a stream's batches."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from atomq.client.http_client import AtomqClient
from atomq.errors import AtomqError

log = logging.getLogger("atomq.execution")
"""Where a failed extension is told: the logger of executions, whose batches (and a streaming
query's, its kin) it keeps in flight."""


class Extender(threading.Thread):
    """Extends deliveries every third of their ack time-out while work on them goes on,
    with its own client (a requests session is not shared between threads); stops when told.

    ``body`` gives the request's body each time, or None to skip this beat. A
    failed extension is logged: the ack time-out is the fallback. ``headers``
    go with every request (an execution's trace context).
    """

    def __init__(self, url: str, key: str, path: str, ack_timeout_s: float,
                 body: Callable[[], Any] = dict, tenant: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(name="atomq-extend", daemon=True)
        self.url, self.key, self.path, self.body, self.tenant = url, key, path, body, tenant
        self.headers = dict(headers or {})
        self.interval_s = max(ack_timeout_s / 3, 0.05)
        self.stopped = threading.Event()

    def run(self) -> None:
        with AtomqClient(self.url, self.key, tenant=self.tenant) as client:
            client.headers.update(self.headers)
            while not self.stopped.wait(self.interval_s):
                body = self.body()
                if body is None:
                    continue
                try:
                    client.request("POST", self.path, body)
                except AtomqError as exc:
                    log.warning("extending deliveries failed (%s); they may time out", exc.code)

    def stop(self) -> None:
        self.stopped.set()
        self.join()
