"""Browsing and bulk management of a queue's messages and dead letters, and usage.

A part of QueueServer, apart because it is a concept of its own: what an
operator does to messages (browse, delete, resend) rather than how they
flow. Bulk actions run in bounded chunks, one script each.
"""

from __future__ import annotations

from typing import Any, Sequence

from atomq import defaults
from atomq.errors import InvalidInput, NotFound
from atomq.integer_range import check_integer_range
from atomq.platform.listings import DeadLetterReasons, Page, ReasonCount
from atomq.platform.models import (
    BrowsedMessage,
    DeadLetter,
    InFlight,
    MessageState,
    QueueModel,
)
from atomq.platform.queues.components import Components
from atomq.platform.queues.delivery import check_ids
from atomq.platform.queues.names import check_subscriber_name, check_tenant_id
from atomq.platform.queues.request_records import CALL_RECORD_MS
from atomq.platform.queues.routes import Routes
from atomq.platform.shared import Shared, docs_and_config, manage_record, queue_keys, queue_not_found
from atomq.platform.store import keys as k
from atomq.platform.store.stored_form import decode_messages, in_flight_detail

BROWSE_HEAD = 4
"""Where a browse script's reply has its first message (browse.lua: cursor, n, cut, bytes)."""
OLDEST_SCHEDULED = 100
"""The scheduled messages due first that ``oldest_waiting`` looks at."""
REASONS_READ = 1000
"""The newest dead letters ``dead_letter_reasons`` counts: about a thousand entries, one script's bound."""
REASONS_SHOWN = 20
"""The most reasons ``dead_letter_reasons`` answers, the most frequent: a choice people can read."""


BROWSE_TAGS = {MessageState.READY: "r", MessageState.IN_FLIGHT: "f", MessageState.SCHEDULED: "s"}
"""The states a browse selects by, as browse.lua's state view names them."""
BROWSE_STATES = tuple(state.value for state in BROWSE_TAGS)
"""The same states as the HTTP API and the command line name them."""


def check_browse_state(state: object) -> MessageState:
    """A state to browse by: ready, in_flight or scheduled (dead letters have their own list)."""
    for known in BROWSE_TAGS:
        if state == known.value:
            return known
    raise InvalidInput(f"state must be one of {', '.join(BROWSE_STATES)}; "
                       f"{str(state)[:40]!r} is not one", field="state")


def check_reason(reason: object) -> str:
    """A dead letter reason to select by: as a nack gives one, not empty."""
    if not isinstance(reason, str) or not 0 < len(reason) <= defaults.MAX_NACK_REASON_CHARS:
        raise InvalidInput(f"reason must be a string of 1 to {defaults.MAX_NACK_REASON_CHARS} characters",
                           field="reason")
    return reason


class Management:
    """Operator actions on messages, and what each tenant stores."""

    def __init__(self, shared: Shared, routes: Routes, components: Components) -> None:
        self._shared = shared
        self._routes = routes
        self._components = components

    def _destinations(self, tenant: str, queue: str, subscriber: str | None,
                      require_subscriber: bool) -> tuple[k.TenantKeys, k.QueueKeys, list[k.DestinationKeys]]:
        tk, qk = queue_keys(tenant, queue)
        model, _, subs = self._routes.read_config(qk)
        if model is None:
            raise queue_not_found(queue)
        if model == QueueModel.POINT_TO_POINT.value:
            if subscriber is not None:
                raise InvalidInput("a point-to-point queue has no subscribers; leave subscriber out",
                                   field="subscriber")
            return tk, qk, [qk.destination()]
        if subscriber is None:
            if require_subscriber:
                raise InvalidInput("subscriber is required for a publish/subscribe queue", field="subscriber")
            return tk, qk, [qk.destination(s) for s in subs]
        check_subscriber_name(subscriber)
        if subscriber not in subs:
            raise NotFound(f"subscriber {subscriber!r} of queue {queue!r} does not exist",
                           queue=queue, subscriber=subscriber)
        return tk, qk, [qk.destination(subscriber)]

    def browse(self, tenant: str, queue: str, limit: int = defaults.PAGE_LIMIT, after: str | None = None,
               subscriber: str | None = None, state: MessageState | str | None = None) -> Page:
        """Messages waiting or in flight, with their state, without consuming them; with ``state``
        (ready, in_flight or scheduled), only those in it: a page holds ``limit`` of them while
        there are (it ends early, with ``next``, only where a scan of very many others stops).
        A message in flight says who holds it, since when and until when."""
        if state is None:
            return self._list("queued", BrowsedMessage, tenant, queue, limit, after, subscriber)
        return self._list("state", BrowsedMessage, tenant, queue, limit, after, subscriber,
                          BROWSE_TAGS[check_browse_state(state)])

    def dead_letters(self, tenant: str, queue: str, limit: int = defaults.PAGE_LIMIT, after: str | None = None,
                     subscriber: str | None = None, reason: str | None = None) -> Page:
        """The queue's dead letters with reason and failed deliveries; with ``reason``, only
        those given that reason (``expired``, ``ack timeout``, a consumer's nack reason)."""
        if reason is None:
            return self._list("dead", DeadLetter, tenant, queue, limit, after, subscriber)
        return self._list("dead-reason", DeadLetter, tenant, queue, limit, after, subscriber, check_reason(reason))

    def dead_letter_reasons(self, tenant: str, queue: str, subscriber: str | None = None) -> DeadLetterReasons:
        """The reasons present among the queue's newest ``REASONS_READ`` dead letters, with how many
        of them each, the ``REASONS_SHOWN`` most frequent: the reasons ``dead_letters`` may select."""
        tk, qk, (d,) = self._destinations(tenant, queue, subscriber, require_subscriber=True)
        reply = self._shared.storage.run("dead_reasons", docs_and_config(tk, qk) + d.as_list(),
                                         [REASONS_READ, REASONS_SHOWN], errors=self._shared.queue_errors(queue))
        read, total, found = int(reply[0]), int(reply[1]), int(reply[2])
        reasons = [ReasonCount(reason.decode(), int(n)) for reason, n in zip(reply[3::2], reply[4::2])]
        return DeadLetterReasons(reasons=reasons, counted=read, complete=read == total and found == len(reasons))

    def in_flight(self, tenant: str, queue: str, limit: int = defaults.PAGE_LIMIT,
                  subscriber: str | None = None) -> list[InFlight]:
        """The first ``limit`` deliveries under way by their ack deadline, the most overdue first:
        what an operator looks at to find a message stuck with a consumer that is gone."""
        check_integer_range(limit, "limit", 1, defaults.MAX_PAGE_LIMIT)
        _, _, (d,) = self._destinations(tenant, queue, subscriber, require_subscriber=True)
        storage = self._shared.storage
        ranked = storage.call(storage.client.zrange, d.inflight, 0, limit - 1, withscores=True)
        if not ranked:
            return []
        states = storage.call(storage.client.hmget, d.state, [member for member, _ in ranked])
        out = []
        for (member, deadline_ms), state in zip(ranked, states):
            dc, fails, where = state.decode().split("|", 2) if state else ("", "", "")
            if where[:1] == "f":  # else settled between the two reads
                delivered_at, holder = in_flight_detail(where)
                out.append(InFlight(id=member.decode(), deadline=deadline_ms / 1000, delivery_count=int(dc),
                                    failed_deliveries=int(fails), holder=holder, delivered_at=delivered_at))
        return out

    def oldest_waiting(self, tenant: str, queue: str, subscriber: str | None = None) -> float | None:
        """When the oldest message that waits (ready, or scheduled for redelivery) was sent, in epoch
        seconds; None when none waits. A queue whose oldest waiting message grows old has consumers
        that stopped or fall behind. One round trip: the stream's first entry, the first of each
        priority band of the other ready messages (each band is in send order), and the
        ``OLDEST_SCHEDULED`` scheduled messages due first (a message scheduled further out may be
        older: the figure is then a little young)."""
        _, _, (d,) = self._destinations(tenant, queue, subscriber, require_subscriber=True)
        band = 10**13
        pipe = self._shared.client.pipeline(transaction=False)
        pipe.xrange(d.ready, count=1)
        for b in range(10):
            pipe.zrangebyscore(d.ordered, b * band, (b + 1) * band - 1, start=0, num=1)
        pipe.zrange(d.sched, 0, OLDEST_SCHEDULED - 1)
        first, *ranked = self._shared.storage.call(pipe.execute)
        ids = [fields[b"m"] for _, fields in first] + [i for part in ranked for i in part]
        return min((int(i.split(b"-")[0]) / 1000 for i in ids), default=None)

    def peek(self, tenant: str, queue: str, ids: Sequence[str], subscriber: str | None = None) -> list[BrowsedMessage]:
        """The messages ``ids`` that are queued (ready, in flight or scheduled), in that
        order, without consuming them; others (dead, gone) are left out. At most 1,000."""
        check_ids(ids, "ids")
        if len(ids) > 1000:
            raise InvalidInput("at most 1000 ids", field="ids")
        if not ids:
            return []
        tk, qk, (d,) = self._destinations(tenant, queue, subscriber, require_subscriber=True)
        out: list[BrowsedMessage] = []
        rest = list(ids)
        budget, max_doc = self._shared.reply_budget()
        while rest:
            part = rest[:defaults.GET_PART_MESSAGES]
            reply = self._shared.storage.run("browse", docs_and_config(tk, qk) + d.as_list(),
                                             ["ids", len(part), "", min(budget, defaults.GET_PART_BYTES), max_doc,
                                              defaults.GET_PART_DOCUMENTS, -1, *part],
                                             errors=self._shared.queue_errors(queue))
            out += decode_messages(reply, BROWSE_HEAD, reply[1], BrowsedMessage)
            cut = reply[0].decode()
            rest = rest[rest.index(cut) + 1:] if cut else rest[len(part):]
        return out

    def _list(self, view: str, cls: type, tenant: str, queue: str, limit: int, after: str | None,
              subscriber: str | None, *extra: str) -> Page:
        check_integer_range(limit, "limit", 1, defaults.MAX_PAGE_LIMIT)
        if after is not None and (not isinstance(after, str) or len(after) > 64):
            raise InvalidInput("after must be a cursor returned as next", field="after")
        tk, qk, (d,) = self._destinations(tenant, queue, subscriber, require_subscriber=True)
        # In parts (defaults.GET_PART_MESSAGES), each from where the one before ended, so that no
        # script call holds the store long; a part that ends short of its own bounds ends the page.
        budget, max_doc = self._shared.reply_budget()
        items: list[Any] = []
        cursor, left, alone = after or "", budget, -1
        while True:
            want = min(limit - len(items), defaults.GET_PART_MESSAGES)
            reply = self._shared.storage.run("browse", docs_and_config(tk, qk) + d.as_list(),
                                             [view, want, cursor, min(left, defaults.GET_PART_BYTES), max_doc,
                                              defaults.GET_PART_DOCUMENTS, alone, *extra],
                                             errors=self._shared.queue_errors(queue))
            part = decode_messages(reply, BROWSE_HEAD, reply[1], cls)
            items += part
            cursor = reply[0].decode()
            left -= int(reply[3])
            if not cursor or not part or len(items) >= limit or left <= 0 or (len(part) < want and not reply[2]):
                return Page(items=items, next=cursor or None)
            alone = left

    def delete_messages(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                        all: bool = False, subscriber: str | None = None) -> int:
        """Deletes selected or all waiting and in-flight messages."""
        return self._manage("delete", tenant, queue, ids, all, subscriber)

    def delete_dead_letters(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                            all: bool = False, subscriber: str | None = None, reason: str | None = None) -> int:
        """Deletes the dead letters ``ids``, all of them, or all given ``reason``."""
        return self._manage("delete_dead", tenant, queue, ids, all, subscriber, reason)

    def resend_dead_letters(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                            all: bool = False, subscriber: str | None = None, reason: str | None = None) -> int:
        """Puts dead letters (``ids``, all, or all given ``reason``) back to ready: same id,
        a fresh redelivery budget, no expiry."""
        return self._manage("resend", tenant, queue, ids, all, subscriber, reason)

    def _manage(self, action: str, tenant: str, queue: str, ids: Sequence[str] | None, all: bool,
                subscriber: str | None, reason: str | None = None) -> int:
        if (ids is not None) + bool(all) + (reason is not None) != 1:
            raise InvalidInput("give either ids or all: true" if action == "delete"
                               else "give exactly one of ids, all: true or reason", field="ids")
        if ids is not None:
            check_ids(ids, "ids")
        if reason is not None:
            check_reason(reason)
        tk, qk, dests = self._destinations(tenant, queue, subscriber, require_subscriber=False)
        total = 0
        for d in dests:
            if ids is not None:
                for start in range(0, len(ids), self._shared.settings.chunk_size):
                    chunk = list(ids[start : start + self._shared.settings.chunk_size])
                    total += int(self._shared.storage.run(
                        "manage", docs_and_config(tk, qk) + d.as_list() + [tk.usage, manage_record(tk)],
                        [action, "ids", "", 0, CALL_RECORD_MS, *chunk])[0])
            elif reason is not None:
                total += self._shared.drain(tk, docs_and_config(tk, qk), d, action, "reason", extra=reason)
            else:
                total += self._shared.drain(tk, docs_and_config(tk, qk), d, action, "chunk")
        return total

    # -- usage --------------------------------------------------------------------

    def usage(self, tenant: str) -> dict[str, int]:
        """What the tenant stores: ``stored_bytes`` (what its messages, documents, dead-letter
        reasons and de-duplication markers cost the store, see ``atomq.platform.queues.footprint``)
        and ``messages`` (message copies), kept by every script."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        raw = self._shared.storage.call(self._shared.client.hmget, tk.usage, "bytes", "markers", "messages")
        return {"stored_bytes": int(raw[0] or 0) + int(raw[1] or 0), "messages": int(raw[2] or 0)}

    def total_usage(self) -> dict[str, int]:
        """What all tenants store, their usage counters summed: ``stored_bytes`` and ``messages``
        (message copies, dead letters included), and ``read_at_ms``, the store's time before the
        first was read."""
        seconds, micros = self._shared.storage.call(self._shared.client.time)
        tenants = self._components.tenants()
        pipe = self._shared.client.pipeline(transaction=False)
        for tenant in tenants:
            pipe.hmget(k.TenantKeys(tenant).usage, "bytes", "markers", "messages")
        stored = messages = 0
        for b, m, n in self._shared.storage.call(pipe.execute):
            stored += int(b or 0) + int(m or 0)
            messages += int(n or 0)
        return {"stored_bytes": stored, "messages": messages, "read_at_ms": int(seconds) * 1000 + int(micros) // 1000}
