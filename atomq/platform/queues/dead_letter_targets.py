"""Dead letters moved to another queue: a queue's ``dead_letter_queue`` setting, and the keys of
its target that every script which may dead-letter is given.

A message that becomes a dead letter (its redeliveries spent, an ack deadline past the limit, a
nack past it, an expiry) moves, in the script that fails it, into the point-to-point queue the
setting names, as an ordinary message with ``models.DEAD_LETTER_PROPERTIES``
(``_lib_failures.lua``, ``move_dead_letter``). Queues without the setting keep their own dead
letters. The target is a queue of the same tenant, so its keys share the tenant's hash tag and
one script reaches both on a cluster too.

A script names every key it touches, so the callers of the scripts that may dead-letter (a get,
a settle, a sweep) pass the target's keys, which they take from this process's cache of each
queue's setting: a setting changed elsewhere makes the script refuse (``STALEDLQ``) before it
writes anything, and the call reads the setting again and runs once more. A cached target costs
nothing; a queue's first call in a process, one read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from atomq.errors import AtomqError, Conflict, InvalidInput
from atomq.platform.queues.names import check_queue_name
from atomq.platform.shared import Shared
from atomq.platform.store import keys as k

NAME_FIELD = "dlq_to"
"""The config field holding the target's name ("" for none)."""
KEY_FIELD = "dlq_key"
"""The config field holding the target's cfg key, which the scripts compare the keys they were given with."""
SOURCES_FIELD = "dlq_sources"
"""The config field naming the queues whose dead letters a queue takes: absent or ``*`` any, ``""`` none,
else ``|<name>|<name>|`` (SQS's RedriveAllowPolicy); ``queue_put.lua`` holds a new setting to it."""

MAX_RETRIES = 5
"""How often a call reads the setting again when it keeps changing under it."""
MAX_CACHED = 10_000
"""Past this many cached settings the cache starts over, so it stays bounded however many queues pass."""

Result = TypeVar("Result")


class StaleDeadLetterTarget(AtomqError):
    """The script was given another target's keys than the queue's setting names."""


STALE_ERRORS = {"STALEDLQ": lambda _: StaleDeadLetterTarget("the queue's dead_letter_queue changed")}
"""What the scripts that may dead-letter answer when given a stale target (for their ``errors``)."""


def target_keys(tk: k.TenantKeys, name: str) -> list[str]:
    """The keys a script is given for target ``name`` (``dead_letter_target`` in the scripts): its
    cfg, its destination, the tenant's index of oldest messages, hash of pending copies, due index
    and message counter."""
    qk = tk.queue(name)
    return [qk.config, *qk.destination().as_list(), tk.oldest, tk.pending_copies, tk.due, tk.seq]


def setting_fields(tk: k.TenantKeys, queue: str, target: str) -> tuple[list[str], str | None]:
    """The config fields of a ``dead_letter_queue`` setting of ``queue``, and the target's cfg key that
    ``queue_put.lua`` checks the target in (None when the setting is cleared, ``""``)."""
    if target == "":
        return [NAME_FIELD, "", KEY_FIELD, ""], None
    if not isinstance(target, str):
        raise InvalidInput("dead_letter_queue must be a queue name, or \"\" for the queue's own dead letters",
                           field="dead_letter_queue")
    check_queue_name(target, field="dead_letter_queue")
    if target == queue:
        raise InvalidInput("a queue's dead letters cannot move to the queue itself: name another queue, or \"\" "
                           "to keep them in its own dead letters", field="dead_letter_queue")
    cfg = tk.queue(target).config
    return [NAME_FIELD, target, KEY_FIELD, cfg], cfg


def setting_errors(target: str | None) -> dict[str, Callable[[list[str]], AtomqError]]:
    """The refusals of ``queue_put.lua`` for a ``dead_letter_queue`` setting naming ``target``."""
    def refused(why: str) -> Callable[[list[str]], AtomqError]:
        return lambda _: InvalidInput(f"dead_letter_queue {target!r} {why}", field="dead_letter_queue")
    return {"DLQNOQUEUE": refused("does not exist: make it first"),
            "DLQPUBSUB": refused("is a publish/subscribe queue: dead letters move to a point-to-point queue"),
            "DLQLASTVALUE": refused("is a last-value queue, which would drop dead letters of the same key: name "
                                    "another"),
            "DLQDENIED": refused("does not take this queue's dead letters (its RedriveAllowPolicy)")}


class DeadLetterTargets:
    """This process's cache of each queue's ``dead_letter_queue``, and the retries when it is stale."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared
        # (tenant, queue) -> the target's name, "" for none
        self._names: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def keys(self, tk: k.TenantKeys, qk: k.QueueKeys) -> list[str]:
        """The target's keys as the scripts take them, none when the queue names no target."""
        key = (tk.tenant, qk.name)
        name = self._names.get(key)
        if name is None:
            raw = self._shared.storage.call(self._shared.client.hget, qk.config, NAME_FIELD)
            name = raw.decode() if raw else ""
            with self._lock:
                if len(self._names) > MAX_CACHED:
                    self._names.clear()
                self._names[key] = name
        return target_keys(tk, name) if name else []

    def forget(self, tenant: str, queue: str) -> None:
        with self._lock:
            self._names.pop((tenant, queue), None)

    def stale(self, tk: k.TenantKeys, qk: k.QueueKeys, times: int) -> int:
        """Forgets the queue's setting after a script found it stale ``times`` times before in one
        call; returns ``times + 1``, or gives up (Conflict) past ``MAX_RETRIES``."""
        self.forget(tk.tenant, qk.name)
        if times + 1 >= MAX_RETRIES:
            raise Conflict(f"queue {qk.name}'s dead_letter_queue kept changing during the call; try again",
                           queue=qk.name)
        return times + 1

    def retrying(self, tk: k.TenantKeys, qk: k.QueueKeys, attempt: Callable[[list[str]], Result]) -> Result:
        """``attempt(target keys)``, again with the setting read anew while it answers stale."""
        times = 0
        while True:
            try:
                return attempt(self.keys(tk, qk))
            except StaleDeadLetterTarget:
                times = self.stale(tk, qk, times)
