"""Browsing and bulk management of a queue's messages and dead letters, and usage.

A mixin of QueueServer, apart because it is a concept of its own: what an
operator does to messages (browse, delete, resend) rather than how they
flow. Bulk actions run in bounded chunks, one script each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from atomq.errors import InvalidInput, NotFound, TooLarge
from atomq.platform import keys as k
from atomq.platform.codec import decode_messages
from atomq.platform.models import BrowsedMessage, DeadLetter, Page, QueueModel
from atomq.platform.names import check_subscriber_name, check_tenant_id

if TYPE_CHECKING:
    from atomq.platform.settings import QueueSettings
    from atomq.platform.storage import Storage


def queue_not_found(queue: str) -> NotFound:
    return NotFound(f"queue {queue!r} does not exist", queue=queue)


MAX_SELECTORS = 10_000
"""Most ids or receipts one call names: a settle is one script, and this bounds it."""


def check_ids(values: Sequence[str], field: str) -> None:
    if isinstance(values, (str, bytes)) or not all(isinstance(v, str) and 0 < len(v) <= 64 for v in values):
        raise InvalidInput(f"{field} must be a list of message id strings", field=field)
    if len(values) > MAX_SELECTORS:
        raise TooLarge(f"{field} holds at most {MAX_SELECTORS} entries", field=field, limit=MAX_SELECTORS)


class Management:
    """Operator actions on messages; QueueServer provides what is declared here."""

    if TYPE_CHECKING:
        storage: Storage
        settings: QueueSettings

        @property
        def client(self) -> Any: ...

        def _queue_keys(self, tenant: str, queue: str) -> tuple[k.TenantKeys, k.QueueKeys]: ...

        def _base(self, tk: k.TenantKeys, qk: k.QueueKeys) -> list[str]: ...

        def _read_config(self, qk: k.QueueKeys) -> tuple[str | None, dict[bytes, bytes], list[str]]: ...

        def _queue_errors(self, queue: str, **more: Any) -> dict[str, Any]: ...

        def tenants(self) -> list[str]: ...

    def _destinations(self, tenant: str, queue: str, subscriber: str | None,
                      require_subscriber: bool) -> tuple[k.TenantKeys, k.QueueKeys, list[k.DestinationKeys]]:
        tk, qk = self._queue_keys(tenant, queue)
        model, _, subs = self._read_config(qk)
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

    def browse(self, tenant: str, queue: str, limit: int = 100, after: str | None = None,
               subscriber: str | None = None) -> Page:
        """Messages waiting or in flight, with their state, without consuming them."""
        return self._list("queued", BrowsedMessage, tenant, queue, limit, after, subscriber)

    def dead_letters(self, tenant: str, queue: str, limit: int = 100, after: str | None = None,
                     subscriber: str | None = None) -> Page:
        """The queue's dead letters with reason and failed deliveries."""
        return self._list("dead", DeadLetter, tenant, queue, limit, after, subscriber)

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
        while rest:
            reply = self.storage.run("browse", self._base(tk, qk) + d.as_list(),
                                     ["ids", len(rest), "", *self._reply_budget(), *rest],
                                     errors=self._queue_errors(queue))
            out += decode_messages(reply, 2, reply[1], BrowsedMessage)
            cut = reply[0].decode()
            rest = rest[rest.index(cut) + 1:] if cut else []
        return out

    def _reply_budget(self) -> tuple[int, int]:
        """The browse and get scripts' bound on a reply: its bytes, and the most one document holds."""
        return self.settings.max_reply_bytes, self.settings.max_document_bytes + 1

    def _list(self, view: str, cls: type, tenant: str, queue: str, limit: int, after: str | None,
              subscriber: str | None) -> Page:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
            raise InvalidInput("limit must be an integer from 1 to 1000", field="limit")
        if after is not None and (not isinstance(after, str) or len(after) > 64):
            raise InvalidInput("after must be a cursor returned as next", field="after")
        tk, qk, (d,) = self._destinations(tenant, queue, subscriber, require_subscriber=True)
        reply = self.storage.run("browse", self._base(tk, qk) + d.as_list(),
                                 [view, limit, after or "", *self._reply_budget()], errors=self._queue_errors(queue))
        cursor, count = reply[0], reply[1]
        items = decode_messages(reply, 2, count, cls)
        return Page(items=items, next=cursor.decode() if cursor else None)

    def delete_messages(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                        all: bool = False, subscriber: str | None = None) -> int:
        """Deletes selected or all waiting and in-flight messages."""
        return self._manage("delete", tenant, queue, ids, all, subscriber)

    def delete_dead_letters(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                            all: bool = False, subscriber: str | None = None) -> int:
        return self._manage("delete_dead", tenant, queue, ids, all, subscriber)

    def resend_dead_letters(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                            all: bool = False, subscriber: str | None = None) -> int:
        """Puts dead letters back to ready: same id, a fresh redelivery budget."""
        return self._manage("resend", tenant, queue, ids, all, subscriber)

    def _manage(self, action: str, tenant: str, queue: str, ids: Sequence[str] | None, all: bool,
                subscriber: str | None) -> int:
        if (ids is None) == (not all):
            raise InvalidInput("give either ids or all: true", field="ids")
        if ids is not None:
            check_ids(ids, "ids")
        tk, qk, dests = self._destinations(tenant, queue, subscriber, require_subscriber=False)
        total = 0
        for d in dests:
            if ids is not None:
                for start in range(0, len(ids), self.settings.chunk_size):
                    chunk = list(ids[start : start + self.settings.chunk_size])
                    total += int(self.storage.run("manage", self._base(tk, qk) + d.as_list() + [tk.usage],
                                                  [action, "ids", "", 0, *chunk])[0])
            else:
                total += self._drain(tk, self._base(tk, qk), d, action, "chunk")
        return total

    def _drain(self, tk: k.TenantKeys, base: list[str], d: k.DestinationKeys, action: str, mode: str,
               bound: str = "") -> int:
        """Applies ``action`` chunk by chunk over a destination's messages; returns the count."""
        total, cursor = 0, bound
        while True:
            count, nxt = self.storage.run(
                "manage", base + d.as_list() + [tk.usage], [action, mode, cursor, self.settings.chunk_size]
            )
            total += int(count)
            if not nxt or (mode == "older" and not count):
                return total
            if mode == "chunk":
                cursor = nxt.decode()

    # -- usage --------------------------------------------------------------------

    def usage(self, tenant: str) -> dict[str, int]:
        """What the tenant stores: ``stored_bytes`` (what its messages, documents, dead-letter
        reasons and de-duplication markers cost the store, see ``atomq.platform.footprint``)
        and ``messages`` (message copies), kept by every script."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        raw = self.storage.call(self.client.hmget, tk.usage, "bytes", "markers", "messages")
        return {"stored_bytes": int(raw[0] or 0) + int(raw[1] or 0), "messages": int(raw[2] or 0)}

    def total_stored_bytes(self) -> int:
        """Bytes stored by all tenants (the sum of their usage counters)."""
        tenants = self.tenants()
        pipe = self.client.pipeline(transaction=False)
        for tenant in tenants:
            pipe.hmget(k.TenantKeys(tenant).usage, "bytes", "markers")
        return sum(int(b or 0) + int(m or 0) for b, m in self.storage.call(pipe.execute))
