"""Delivery: a get hands messages out, and a settle (ack, nack, release, extend) ends or moves each one.

A delivered message is in flight until it is settled or its ack deadline
passes. A call names what it settles by message id or by receipt (the id
with its delivery count); a receipt of an earlier delivery settles nothing,
so a consumer that was too slow cannot settle the redelivery another now holds.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Sequence

from atomq import defaults
from atomq.errors import AtomqError, InvalidInput, NotFound, TooLarge
from atomq.integer_range import check_integer_range
from atomq.platform.models import Delivery, NackResult, Taken
from atomq.platform.queues.components import Components
from atomq.platform.queues.dead_letter_targets import STALE_ERRORS, DeadLetterTargets, StaleDeadLetterTarget
from atomq.platform.queues.names import check_consumer_name, check_receipts, check_subscriber_name
from atomq.platform.queues.request_records import CALL_RECORD_MS, made_token
from atomq.platform.shared import Shared, docs_and_config, queue_keys
from atomq.platform.store.stored_form import decode_messages

HOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,159}")
"""Who holds a delivery, as its in-flight state keeps it: a consumer's name, or what the caller
says made the get (``key:<key id>``, ``owner``); never a ',' or a '|', which end the state's parts."""


def check_holder(holder: str) -> str:
    if not isinstance(holder, str) or not HOLDER.fullmatch(holder):
        raise InvalidInput("holder must start with a letter or digit and contain only letters, digits, "
                           "'.', '_', ':' and '-', at most 160 characters", field="holder")
    return holder


def check_ids(values: Sequence[str], field: str) -> None:
    if isinstance(values, (str, bytes)) or not all(isinstance(v, str) and 0 < len(v) <= 64 for v in values):
        raise InvalidInput(f"{field} must be a list of message id strings", field=field)
    if len(values) > defaults.MAX_SELECTORS:
        raise TooLarge(f"{field} holds at most {defaults.MAX_SELECTORS} entries", field=field,
                       limit=defaults.MAX_SELECTORS)


class Deliveries:
    """Gets and settles the messages of every tenant's queues."""

    def __init__(self, shared: Shared, components: Components, targets: DeadLetterTargets) -> None:
        self._shared = shared
        self._components = components
        self._targets = targets

    def get(
        self,
        tenant: str,
        queue: str,
        max_messages: int = defaults.GET_MAX_MESSAGES,
        wait_ms: int = defaults.GET_WAIT_MS,
        subscriber: str | None = None,
        stop: threading.Event | None = None,
        consumer: str | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        """Delivers up to ``max_messages`` ready messages, waiting up to ``wait_ms`` for the first.

        Each delivered message is in flight until acked, nacked or its
        ``ack_timeout_s`` runs out (then it counts as a failed delivery).
        A wait ends early, empty, within a second of ``stop`` being set.
        ``consumer`` names the caller: required on an exclusive queue (see ``take``).
        """
        return self.take(tenant, queue, max_messages, wait_ms, subscriber, stop, consumer,
                         holder=holder).deliveries

    def take(
        self,
        tenant: str,
        queue: str,
        max_messages: int = defaults.GET_MAX_MESSAGES,
        wait_ms: int = defaults.GET_WAIT_MS,
        subscriber: str | None = None,
        stop: threading.Event | None = None,
        consumer: str | None = None,
        ack_ids: Sequence[str] | None = None,
        ack_receipts: Sequence[str] | None = None,
        holder: str | None = None,
    ) -> Taken:
        """A get that also says, on an exclusive queue, whether ``consumer`` is the active one:
        only the active consumer gets messages; a standby waits its turn (its get answers empty,
        after ``wait_ms``) and takes over when the active one makes no call for ``ack_timeout_s``.

        With ``ack_ids`` or ``ack_receipts`` it first acks those (the previous batch, as a
        consumer loop does), in the same round trip to the store as its first look for messages:
        one call a batch instead of two. ``Taken.acked`` says how many it acked.

        Each delivery keeps, until it is settled, when it was made and who holds it: ``consumer``
        when given, else ``holder`` (what the caller knows made the get: an API key's id, say),
        else nobody named; ``in_flight`` and ``browse`` show them, so an operator can tell a
        delivery stuck with a consumer that is gone.

        A get of more than ``defaults.GET_PART_MESSAGES`` messages (or of more documents or bytes than
        a part takes, ``GET_PART_DOCUMENTS``, ``GET_PART_BYTES``) runs as several script calls, each
        atomic, each taking the next messages in delivery order, so that no call holds the store's
        single thread long: one tenant's largest get does not stall the others. The get is not one
        snapshot: a message sent between two parts may be among the later parts'. It stops at the
        first part that finds fewer ready than it could take, and only the first part waits. A part
        that fails answers what the parts before it took (those are in flight, and come back at
        their deadline when nobody gets the answer)."""
        tk, qk = queue_keys(tenant, queue)
        if subscriber is not None:
            check_subscriber_name(subscriber)
        if consumer is not None:
            check_consumer_name(consumer)
        if holder is not None:
            check_holder(holder)
        s = self._shared.settings
        check_integer_range(max_messages, "max", 1, s.max_get)
        check_integer_range(wait_ms, "wait_ms", 0, s.max_wait_ms)
        d = qk.destination(subscriber)
        budget, max_doc = self._shared.reply_budget()

        def part_args(wanted: int, left: int, first_most: int) -> list[Any]:
            """A part's arguments: up to ``wanted`` messages within ``left`` bytes of the reply, a
            first message of at most ``first_most`` bytes (-1: any, the get's first part)."""
            return [min(wanted, defaults.GET_PART_MESSAGES), s.delays_ms_arg, subscriber or "", s.max_subscribers,
                    min(left, defaults.GET_PART_BYTES), max_doc, d.member, consumer or "", s.max_consumers,
                    CALL_RECORD_MS, consumer or holder or "", first_most, defaults.GET_PART_DOCUMENTS,
                    defaults.SWEEP_PART]
        args = part_args(max_messages, budget, -1)
        acks = None
        acked = None
        if ack_ids is not None or ack_receipts is not None:
            mode, items = _selector(ack_ids, ack_receipts, "ack.")
            # All but the last part of the acks first; the last goes with the get's first part.
            tail = (len(items) - 1) // defaults.SETTLE_PART_IDS * defaults.SETTLE_PART_IDS
            if tail:
                acked = self._settle_items("ack", "", tenant, queue, mode, items[:tail], subscriber, consumer,
                                           absent_subscriber_ok=True)[0]
            acks = mode, items[tail:]
        deadline = time.monotonic() + wait_ms / 1000
        stale = 0
        while True:
            # The keys of the queue's dead_letter_queue: a get fails expired deliveries first.
            target = self._targets.keys(tk, qk)
            get = self._get_call(tk, qk, queue, subscriber, args, target)
            if acks is not None:
                settle = self._settle_call("ack", "", tenant, queue, *acks, subscriber, consumer, target)
                settled, reply = self._shared.storage.run_together([settle, get])
                if isinstance(settled, StaleDeadLetterTarget) or isinstance(reply, StaleDeadLetterTarget):
                    if not isinstance(reply, AtomqError):
                        self._give_back(tenant, queue, reply, subscriber, consumer)
                    if not isinstance(settled, AtomqError):
                        acks, acked = None, (acked or 0) + int(settled[0])
                    stale = self._targets.stale(tk, qk, stale)
                    continue
                acks = None
                if isinstance(reply, AtomqError):
                    raise reply
                if isinstance(settled, NotFound) and "subscriber" in settled.details:
                    settled = [0, 0]  # a subscriber the get has just made: nothing of it was in flight
                if isinstance(settled, AtomqError):
                    self._give_back(tenant, queue, reply, subscriber, consumer)
                    raise settled
                acked = (acked or 0) + int(settled[0])
            else:
                try:
                    reply = self._shared.storage.run(*get[:3], errors=get[3])
                except StaleDeadLetterTarget:
                    stale = self._targets.stale(tk, qk, stale)
                    continue
            count, wake, last_id, last_wake_id = reply[0], reply[1], reply[2], reply[3]
            active = None if int(reply[4]) < 0 else int(reply[4]) == 1
            if count:
                taken = decode_messages(reply, HEAD, count, Delivery)
                if reply[5] and count < max_messages:
                    taken += self._later_parts(tk, qk, queue, subscriber, part_args, max_messages - count,
                                               budget - int(reply[6]))
                return Taken(taken, active, acked)
            if reply[5] and not (stop is not None and stop.is_set()):
                continue  # the part did work (a sweep's bound, expired candidates) the next goes on from
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                return Taken([], active, acked)
            # At most a second at a time: a removed queue has no entry to wake us,
            # and the next script run reports it.
            block_ms = min(round(remaining * 1000), 1000)
            if wake >= 0:
                block_ms = min(block_ms, wake + 1)
            # Blocks until an entry newer than the last one the script saw arrives on
            # either stream, so a send between the script and this call is never missed.
            self._shared.storage.call(self._shared.client.xread, {d.ready: last_id, d.wake: last_wake_id},
                                      count=1, block=max(1, block_ms))

    def _get_call(self, tk: Any, qk: Any, queue: str, subscriber: str | None, args: list[Any],
                  target: list[str]) -> tuple[str, list[str], list[Any], Any]:
        """One part's get script call; its record lets a repeat of it by the store's client answer
        what that part delivered (each part has its own)."""
        d = qk.destination(subscriber)
        record = tk.request_record(made_token("get"))
        keys = docs_and_config(tk, qk) + d.as_list() + [qk.subscribers, tk.usage, tk.due, record, tk.seq, *target]
        return "get", keys, args, {**self._shared.queue_errors(queue), **STALE_ERRORS}

    def _later_parts(self, tk: Any, qk: Any, queue: str, subscriber: str | None,
                     part_args: Callable[[int, int, int], list[Any]], wanted: int,
                     left: int) -> list[Delivery]:
        """The parts of a get after its first: up to ``wanted`` more messages within ``left`` bytes of
        documents, while each part ends at its own bounds (``more``). A part that fails ends the get
        with what the parts before it took: they are the caller's, in flight."""
        out: list[Delivery] = []
        more = True
        while more and wanted > 0 and left > 0:
            part = part_args(wanted, left, left)
            try:
                reply = self._shared.storage.run(*self._get_call(tk, qk, queue, subscriber, part,
                                                                 self._targets.keys(tk, qk)))
            except AtomqError:
                break
            count = int(reply[0])
            out += decode_messages(reply, HEAD, count, Delivery)
            wanted, left, more = wanted - count, left - int(reply[6]), bool(reply[5])
        return out

    def _give_back(self, tenant: str, queue: str, reply: Any, subscriber: str | None, consumer: str | None) -> None:
        """What a get took in the round trip of an ack that failed (the store failed between the
        two, say) goes back at once, without counting as a failed delivery: the caller gets the
        ack's error, not these messages."""
        if reply[0]:
            taken = decode_messages(reply, HEAD, reply[0], Delivery)
            self.release(tenant, queue, receipts=[m.receipt for m in taken], subscriber=subscriber, delay_s=0,
                         consumer=consumer)

    def ack(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
            receipts: Sequence[str] | None = None, subscriber: str | None = None,
            consumer: str | None = None) -> int:
        """Acks in-flight messages; a receipt of an earlier delivery acks nothing. On an exclusive
        queue ``consumer`` is required, and only the active consumer's call settles anything
        (as for nack, release and extend)."""
        return self._settle("ack", "", tenant, queue, ids, receipts, subscriber, consumer)[0]

    def nack(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
             receipts: Sequence[str] | None = None, subscriber: str | None = None,
             reason: str = "", consumer: str | None = None) -> NackResult:
        """Fails deliveries now: each is redelivered after its delay or dead-lettered."""
        if not isinstance(reason, str) or len(reason) > defaults.MAX_NACK_REASON_CHARS:
            raise InvalidInput(f"reason must be a string of at most {defaults.MAX_NACK_REASON_CHARS} characters",
                               field="reason")
        done, dead = self._settle("nack", reason or defaults.NACK_REASON, tenant, queue, ids, receipts, subscriber,
                                  consumer)
        return NackResult(requeued=done, dead_lettered=dead)

    def release(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                receipts: Sequence[str] | None = None, subscriber: str | None = None,
                delay_s: float = 1.0, consumer: str | None = None) -> int:
        """Gives deliveries back without counting a failed delivery: each is redelivered
        after ``delay_s``. For a consumer that could not work for a reason that is not the
        message's, such as its own rate limit, so the message does not drift to the dead
        letter queue; and for an operator freeing a message stuck with a consumer that is
        gone: without ``consumer``, an exclusive queue's deliveries are released whoever holds
        them (their order is kept: nothing sent later is delivered before them)."""
        most_s = defaults.MAX_REDELIVERY_DELAY_S
        if not isinstance(delay_s, (int, float)) or isinstance(delay_s, bool) or not 0 <= delay_s <= most_s:
            raise InvalidInput(f"delay_s must be a number from 0 to {most_s:g}", field="delay_s")
        return self._settle("release", round(delay_s * 1000), tenant, queue, ids, receipts, subscriber,
                            consumer)[0]

    def extend(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
               receipts: Sequence[str] | None = None, subscriber: str | None = None,
               seconds: float | None = None, consumer: str | None = None) -> int:
        """Moves the ack deadline of in-flight messages to ``seconds`` from now."""
        most_s = defaults.ACK_TIMEOUT_RANGE_S[1]
        if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                                    or not 0 < seconds <= most_s):
            raise InvalidInput(f"seconds must be a number from 0 to {most_s:g}", field="seconds")
        if seconds is None:
            seconds = self._components.get_queue(tenant, queue).ack_timeout_s
        return self._settle("extend", round(seconds * 1000), tenant, queue, ids, receipts, subscriber,
                            consumer)[0]

    def _settle(self, action: str, arg: Any, tenant: str, queue: str, ids: Sequence[str] | None,
                receipts: Sequence[str] | None, subscriber: str | None, consumer: str | None) -> tuple[int, int]:
        if subscriber is not None:
            check_subscriber_name(subscriber)
        if consumer is not None:
            check_consumer_name(consumer)
        mode, items = _selector(ids, receipts)
        return self._settle_items(action, arg, tenant, queue, mode, items, subscriber, consumer)

    def _settle_items(self, action: str, arg: Any, tenant: str, queue: str, mode: str, items: list[str],
                      subscriber: str | None, consumer: str | None,
                      absent_subscriber_ok: bool = False) -> tuple[int, int]:
        """Settles ``items`` in parts of ``defaults.SETTLE_PART_IDS``, a script call each (each atomic,
        with its own record, so the store client's repeat of a part settles nothing twice); the
        sums of their counts. A part that fails raises: the parts before it stay settled, and a
        settle tried again finds those no longer in flight. ``absent_subscriber_ok``: a subscriber
        that does not exist settles nothing (a get with acks makes it)."""
        tk, qk = queue_keys(tenant, queue)
        done = dead = 0
        for first in range(0, max(len(items), 1), defaults.SETTLE_PART_IDS):
            part = items[first:first + defaults.SETTLE_PART_IDS]

            def attempt(target: list[str], part: list[str] = part) -> tuple[int, int]:
                name, keys, args, errors = self._settle_call(action, arg, tenant, queue, mode, part, subscriber,
                                                             consumer, target)
                settled, deads = self._shared.storage.run(name, keys, args, errors=errors)
                return int(settled), int(deads)
            try:
                n, m = self._targets.retrying(tk, qk, attempt)
            except NotFound as exc:
                if absent_subscriber_ok and "subscriber" in exc.details:
                    return done, dead
                raise
            done, dead = done + n, dead + m
        return done, dead

    def _settle_call(self, action: str, arg: Any, tenant: str, queue: str, mode: str, items: list[str],
                     subscriber: str | None, consumer: str | None,
                     target: list[str]) -> tuple[str, list[str], list[Any], Any]:
        """The settle script's name, keys, args and errors, its names already checked; ``target``: the
        keys of the queue's dead_letter_queue (``DeadLetterTargets.keys``)."""
        tk, qk = queue_keys(tenant, queue)
        d = qk.destination(subscriber)
        s = self._shared.settings
        # The call's record lets a repeat of it by the store's client answer what it settled.
        record = tk.request_record(made_token("settle"))
        return ("settle", docs_and_config(tk, qk) + d.as_list() + [qk.subscribers, tk.usage, tk.due, record, tk.seq,
                                                                    *target],
                [action, arg, s.delays_ms_arg, mode, subscriber or "", d.member, consumer or "", s.max_consumers,
                 CALL_RECORD_MS, defaults.SWEEP_PART, *items],
                self._shared.queue_errors(queue, UNKNOWNSUBSCRIBER=lambda _: NotFound(
                    f"subscriber {subscriber!r} of queue {queue!r} does not exist", queue=queue,
                    subscriber=subscriber), **STALE_ERRORS))


HEAD = 7
"""Where a get script's reply has its first message (get.lua: n, wake, last ids, active, more, bytes)."""


def _selector(ids: Sequence[str] | None, receipts: Sequence[str] | None, prefix: str = "") -> tuple[str, list[str]]:
    """``("id" | "receipt", items)``, checked; ``prefix`` names where they were given (``ack.``)."""
    if (ids is None) == (receipts is None):
        raise InvalidInput("give either ids or receipts", field=f"{prefix}ids")
    if ids is not None:
        check_ids(ids, f"{prefix}ids")
        return "id", list(ids)
    checked = check_receipts(receipts, f"{prefix}receipts")
    if len(checked) > defaults.MAX_SELECTORS:
        raise TooLarge(f"{prefix}receipts holds at most {defaults.MAX_SELECTORS} entries", field=f"{prefix}receipts",
                       limit=defaults.MAX_SELECTORS)
    return "receipt", checked


