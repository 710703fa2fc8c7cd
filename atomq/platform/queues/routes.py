"""What a send fans out to: a queue's model and subscribers, read from its config and cached.

A send must name every destination its script writes, so it needs the
queue's subscribers before it runs. Reading them for every send would cost a
round trip; the cache keeps them per queue, and the send script checks the
route it was given against the stored one, so a stale entry costs one retry,
never a wrong send.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Callable

from atomq.errors import AtomqError, StorageError
from atomq.platform.models import Durability, QueueModel
from atomq.platform.queues.dead_letter_targets import NAME_FIELD as DEAD_LETTER_QUEUE_FIELD
from atomq.platform.shared import Shared, queue_not_found
from atomq.platform.store import keys as k

CONFIG_FIELDS = ("model", "max_redeliveries", "ack_timeout_ms", "gen", "subv", "message_ttl_ms", "on_expire", "lv",
                 "lv_key", "access", "max_messages", "max_bytes", "max_message_bytes", "max_dead_letters", "overflow",
                 "overflow_dl", "durability", "delay_ms", "ordering", DEAD_LETTER_QUEUE_FIELD)

MAX_ROUTE_RETRIES = 5
"""How often a send or a queue's removal reads the route again when its subscribers change under it."""

MAX_CACHED_ROUTES = 10_000
"""Past this many cached routes the cache starts over, so it stays bounded however many queues pass."""

Route = tuple[str, str, list[str]]
"""A queue's model, the route the scripts check (model, generation, subscriber version, :data:`ORDERED`
for a queue that delivers in send order, and ``|sync`` for a queue whose sends wait for the disk),
and its subscribers."""

ORDERED = "|ordered"
"""In the route of an exclusive or group-ordered queue, which delivers in send order: a chunked send
(``send_journal``) owing it copies holds back the sends there until it made them (:exc:`OrderWait`)."""


def queue_config_reads(pipe: Any, qk: k.QueueKeys) -> None:
    """Queues on ``pipe`` the two reads of a queue's config that :func:`parse_queue_config` takes."""
    pipe.hmget(qk.config, CONFIG_FIELDS)  # not HGETALL: the hash holds the queue's counters too
    pipe.smembers(qk.subscribers)


def parse_queue_config(values: list[bytes | None], subs: set[bytes]) -> tuple[str | None, dict[bytes, bytes], list[str]]:
    """The queue's model (None if it does not exist), its config fields and its subscribers, sorted."""
    cfg = {name.encode(): v for name, v in zip(CONFIG_FIELDS, values) if v is not None}
    model = cfg.get(b"model")
    return (model.decode() if model else None), cfg, sorted(s.decode() for s in subs)


class StaleRoute(AtomqError):
    """The script saw another model or subscriber set than the caller passed."""


class OrderWait(AtomqError):
    """The send would land before the copies the named journals (or reservations) owe an exclusive or
    group-ordered destination: its caller goes on with them first (``send_journal``)."""

    def __init__(self, journals: list[str]) -> None:
        super().__init__("an earlier chunked send owes the queue its messages")
        self.journals = journals


ORDER_WAIT_MS = 10_000
"""The longest a send waits for the reservations that owe its ordered destinations to become journals
(which it then finishes): past it, the send stores nothing and answers 503."""


def in_order(run: Callable[[], Any], go_on: Callable[[list[str]], bool],
             release: Callable[[], None] | None = None) -> Any:
    """Runs ``run``, a send script's call or a reservation's steps, until no chunked send owes its
    ordered destinations copies (:exc:`OrderWait`): each time first ``release`` (what the steps
    reserved: no two reservations wait for each other), then ``go_on`` with the journals named (True
    when it finished one); while none is a journal yet (reservations), waits, :data:`ORDER_WAIT_MS`
    at most from the first wait since one was finished."""
    deadline = None
    while True:
        try:
            return run()
        except OrderWait as wait:
            if release is not None:
                release()
            if go_on(wait.journals):
                deadline = None
            else:
                deadline = deadline or time.monotonic() + ORDER_WAIT_MS / 1000
                if time.monotonic() > deadline:
                    raise StorageError("an earlier send to an ordered queue is still reserving; try again") from None
                time.sleep(0.005 + random.random() * 0.02)  # jittered: two reservations that met start apart


class Routes:
    """The route cache of one queue server, and the reading of a queue's config."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        # (tenant, queue) -> route
        self._routes: dict[tuple[str, str], Route] = {}
        self._lock = threading.Lock()

    def read_config(self, qk: k.QueueKeys) -> tuple[str | None, dict[bytes, bytes], list[str]]:
        """The queue's model (None if it does not exist), its config fields and its subscribers, sorted."""
        pipe = self._shared.client.pipeline(transaction=True)
        queue_config_reads(pipe, qk)
        return parse_queue_config(*self._shared.storage.call(pipe.execute))

    def route(self, tenant: str, queue: str, qk: k.QueueKeys, refresh: bool) -> Route:
        """The queue's route, from the cache unless ``refresh``; raises NotFound if the queue does not exist."""
        key = (tenant, queue)
        if not refresh:
            cached = self._routes.get(key)
            if cached is not None:
                return cached
        model, cfg, subs = self.read_config(qk)
        if model is None:
            self.forget(tenant, queue)
            raise queue_not_found(queue)
        # The route names the queue's generation too, so a sender that cached the
        # route of a removed queue never writes into its successor's subscribers; and
        # its durability, so a send never skips the wait of a queue made sync meanwhile.
        subv = cfg.get(b"subv", b"0").decode() if model == QueueModel.PUBLISH_SUBSCRIBE.value else ""
        sync = "|sync" if cfg.get(b"durability") == Durability.SYNC.value.encode() else ""
        ordered = ORDERED if cfg.get(b"access") == b"exclusive" or cfg.get(b"ordering") == b"group" else ""
        route = (model, f"{model}|{cfg[b'gen'].decode()}|{subv}{ordered}{sync}", subs)
        with self._lock:
            if len(self._routes) > MAX_CACHED_ROUTES:
                self._routes.clear()
            self._routes[key] = route
        return route

    def forget(self, tenant: str, queue: str) -> None:
        with self._lock:
            self._routes.pop((tenant, queue), None)
