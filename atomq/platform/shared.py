"""What the parts of the queue server share: the store, the current settings, a
queue's keys and the errors its scripts report.

The queue server is composed of parts (components, routes, sending, delivery,
management, maintenance), each one behaviour. They work through one
:class:`Shared` rather than through a common base class, so each part names
what it needs and nothing reaches into another part's state. The settings
live here alone: the node replaces them when the shared server settings
change, and every part sees the new ones at once.
"""

from __future__ import annotations

from typing import Any

from atomq.errors import Conflict, InvalidInput, NotFound
from atomq.platform.queues.names import check_queue_name, check_tenant_id
from atomq.platform.queues.queue_settings import QueueSettings
from atomq.platform.queues.request_records import CALL_RECORD_MS, made_token
from atomq.platform.store import keys as k
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.storage import Storage


def queue_keys(tenant: str, queue: str) -> tuple[k.TenantKeys, k.QueueKeys]:
    """The keys of a tenant and of its queue, once both names are checked."""
    tk = k.TenantKeys(check_tenant_id(tenant))
    return tk, tk.queue(check_queue_name(queue, field="queue"))


def docs_and_config(tk: k.TenantKeys, qk: k.QueueKeys) -> list[str]:
    """The keys every queue script takes first (``KEYS[1..4]``): the tenant's documents and the queue's config."""
    return [tk.doc, tk.doc_props, tk.doc_refs, qk.config]


class ChunkBudget:
    """How many more chunk scripts one tenant's maintenance may run this round: a tenant
    with a million messages past the retention, or a big queue being removed, gets its
    work done over several rounds instead of holding up every other tenant's."""

    def __init__(self, chunks: int) -> None:
        self.remaining = chunks

    def take(self) -> bool:
        """Spends one chunk; False once none is left (the work resumes next round)."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True

    @property
    def spent(self) -> bool:
        return self.remaining <= 0


def queue_not_found(queue: str) -> NotFound:
    return NotFound(f"queue {queue!r} does not exist", queue=queue)


class Shared:
    """The store and settings of one queue server, and the helpers every part calls."""

    def __init__(self, storage: Storage, settings: QueueSettings) -> None:
        self.storage = storage
        self.settings = settings

    @property
    def client(self) -> RedisClient:
        return self.storage.client

    def queue_errors(self, queue: str, **more: Any) -> dict[str, Any]:
        """The errors a script that works on ``queue`` reports, as the exceptions a caller gets."""
        errors: dict[str, Any] = {
            "NOQUEUE": lambda _: queue_not_found(queue),
            "NOSUBSCRIBER": lambda _: InvalidInput(
                "subscriber is required for a publish/subscribe queue", field="subscriber"),
            "SUBSCRIBERP2P": lambda _: InvalidInput(
                "a point-to-point queue has no subscribers; leave subscriber out", field="subscriber"),
            "TOOMANYSUBS": lambda _: Conflict(
                f"a queue has at most {self.settings.max_subscribers} subscribers", queue=queue,
                limit=self.settings.max_subscribers),
            "NOCONSUMER": lambda _: InvalidInput(
                "consumer is required on an exclusive queue: name the consumer making the call", field="consumer"),
            "TOOMANYCONSUMERS": lambda _: Conflict(
                f"an exclusive queue has at most {self.settings.max_consumers} consumers in line", queue=queue,
                code="too_many_consumers", limit=self.settings.max_consumers),
        }
        errors.update(more)
        return errors

    def reply_budget(self) -> tuple[int, int]:
        """The browse and get scripts' bound on a reply: its bytes, and the most one document holds."""
        return self.settings.max_reply_bytes, self.settings.max_document_bytes + 1

    def drain(self, tk: k.TenantKeys, base: list[str], d: k.DestinationKeys, action: str, mode: str,
              bound: str = "", budget: ChunkBudget | None = None, extra: str | None = None) -> int:
        """Applies ``action`` chunk by chunk over a destination's messages; returns the count.

        Removals, purges and an operator's delete or resend of all messages (or of all dead
        letters given one reason, ``extra`` in mode "reason") run it;
        with a ``budget``, it stops when that is spent (the maintenance resumes it).
        """
        total, cursor = 0, bound
        while budget is None or budget.take():
            count, nxt = self.storage.run(
                "manage", base + d.as_list() + [tk.usage, manage_record(tk)],
                [action, mode, cursor, self.settings.chunk_size, CALL_RECORD_MS,
                 *([] if extra is None else [extra])]
            )
            total += int(count)
            if not nxt or (mode == "older" and not count):
                return total
            if mode in ("chunk", "reason"):
                cursor = nxt.decode()
        return total


def manage_record(tk: k.TenantKeys) -> str:
    """A manage call's record (``scripts/manage.lua``), so that a repeat of it by the store's client
    answers what it did rather than acting on the next messages."""
    return tk.request_record(made_token("manage"))
