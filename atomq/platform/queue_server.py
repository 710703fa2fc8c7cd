"""The queue server: per-tenant queues in Redis streams, used as a library.

Every operation that changes more than one key is one Lua script, so a crash
between any two calls leaves every count exact. Time comes from Redis
``TIME`` inside the scripts, never from this process's clock, so several
processes and restarts agree on deadlines and redelivery times.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Sequence

import redis

from atomq.errors import AtomqError, Conflict, InvalidInput, NotFound, QuotaExceeded, TooLarge
from atomq.platform import keys as k
from atomq.platform.audit import repair_usage
from atomq.platform.codec import decode_messages, encode_document
from atomq.platform.counters import MessageCounters
from atomq.platform.format import FORMAT_VERSION, check_format, record_format
from atomq.platform.management import MAX_SELECTORS, Management, check_ids
from atomq.platform.management import queue_not_found as _not_found
from atomq.platform.models import (
    Delivery,
    DestinationCounts,
    NackResult,
    OutgoingMessage,
    QueueInfo,
    QueueModel,
)
from atomq.platform.names import check_queue_name, check_receipts, check_subscriber_name, check_tenant_id
from atomq.platform.settings import QueueSettings
from atomq.platform.storage import Storage

MAX_SEND_RETRIES = 5
CONFIG_FIELDS = ("model", "max_redeliveries", "ack_timeout_ms", "gen", "subv")
MAX_DEDUPE_ID_LENGTH = 256


@dataclass(frozen=True)
class DueWork:
    """One tenant's maintenance due now: destinations (by index name) to sweep, destinations
    holding messages past the retention, removals under way, and the bytes of expired
    de-duplication markers just taken off its usage."""

    due: list[str]
    old: list[str]
    removals: list[str]
    marker_bytes: int


class _StaleRoute(AtomqError):
    """The send script saw another model or subscriber set than the caller passed."""


class _QuotaRefused(AtomqError):
    """The send script refused the batch: it would pass the tenant's disk quota."""


class QueueServer(Management):
    """The queue server core, shared by every tenant.

    Args:
        client: a redis-py client (standalone or cluster) with
            ``decode_responses=False``: documents may be bytes.
        settings: server-wide settings; defaults as in API.md.
    """

    def __init__(self, client: redis.Redis, settings: QueueSettings | None = None) -> None:
        self.settings = settings or QueueSettings()
        self.storage = Storage(client)
        stored_format = check_format(client)
        self.storage.scripts.load_all(client)
        self.counters = MessageCounters(self.storage)
        # (tenant, queue) -> (model, route, subscribers): what a send
        # fans out to. Scripts verify it, so a stale entry costs one retry, never a wrong send.
        self._routes: dict[tuple[str, str], tuple[str, str, list[str]]] = {}
        self._routes_lock = threading.Lock()
        if stored_format < FORMAT_VERSION:
            self._migrate_from_format_1()

    def _migrate_from_format_1(self) -> None:
        """Recounts every tenant's usage with the bookkeeping and builds its due indexes.

        Idempotent, so nodes that start together may both run it; run the upgrade
        while no older node still writes, since it would count usage the old way.
        """
        for tenant in self.tenants():
            repair_usage(self.client, tenant)
            self.sweep(tenant)
            self.purge(tenant)
        record_format(self.client)

    @property
    def client(self) -> redis.Redis:
        return self.storage.client

    # -- keys -----------------------------------------------------------------

    @staticmethod
    def _queue_keys(tenant: str, queue: str) -> tuple[k.TenantKeys, k.QueueKeys]:
        tk = k.TenantKeys(check_tenant_id(tenant))
        return tk, tk.queue(check_queue_name(queue, field="queue"))

    @staticmethod
    def _base(tk: k.TenantKeys, qk: k.QueueKeys) -> list[str]:
        return [tk.doc, tk.doc_props, tk.doc_refs, qk.config]

    # -- queue components -----------------------------------------------------

    def put_queue(
        self,
        tenant: str,
        name: str,
        model: QueueModel | str,
        max_redeliveries: int = 6,
        ack_timeout_s: float = 30,
    ) -> tuple[QueueInfo, bool]:
        """Creates or updates a queue component; returns it and whether it was created."""
        tk, qk = self._queue_keys(tenant, name)
        try:
            model = QueueModel(model)
        except ValueError:
            raise InvalidInput(
                "model must be 'point_to_point' or 'publish_subscribe'", field="model"
            ) from None
        if not isinstance(max_redeliveries, int) or isinstance(max_redeliveries, bool) or not 0 <= max_redeliveries <= 1000:
            raise InvalidInput("max_redeliveries must be an integer from 0 to 1000", field="max_redeliveries")
        if not isinstance(ack_timeout_s, (int, float)) or isinstance(ack_timeout_s, bool) or not 0.01 <= ack_timeout_s <= 86400:
            raise InvalidInput("ack_timeout_s must be a number from 0.01 to 86400", field="ack_timeout_s")
        self.storage.call(self.client.sadd, k.TENANTS_KEY, tk.tenant)
        created = self.storage.run(
            "queue_put",
            self._base(tk, qk) + [tk.queues, qk.subscribers, qk.destination().msg, tk.seq],
            [name, model.value, max_redeliveries, round(ack_timeout_s * 1000), self.settings.max_queues_per_tenant],
            errors={
                "CONFLICT": lambda: Conflict(
                    "the model of a queue that holds messages or subscribers cannot change", queue=name
                ),
                "TOOMANYQUEUES": lambda: Conflict(
                    f"a tenant has at most {self.settings.max_queues_per_tenant} queues: delete one first",
                    code="too_many_queues", limit=self.settings.max_queues_per_tenant),
            },
        )
        self._forget_route(tenant, name)
        return self.get_queue(tenant, name), bool(created)

    def get_queue(self, tenant: str, name: str) -> QueueInfo:
        """A queue with its counts; publish/subscribe counts are summed over subscribers."""
        tk, qk = self._queue_keys(tenant, name)
        model, cfg, subs = self._read_config(qk)
        if model is None:
            raise _not_found(name)
        dests = [None] if model == QueueModel.POINT_TO_POINT.value else sorted(subs)
        pipe = self.client.pipeline(transaction=True)
        for sub in dests:
            d = qk.destination(sub)
            pipe.xlen(d.ready)
            pipe.zcard(d.sched)
            pipe.zcard(d.inflight)
            pipe.xlen(d.dlq)
        raw = self.storage.call(pipe.execute)
        per_sub: dict[str, DestinationCounts] = {}
        total = [0, 0, 0, 0]
        for i, sub in enumerate(dests):
            ready, sched, flight, dead = raw[i * 4 : i * 4 + 4]
            counts = DestinationCounts(depth=ready + sched, in_flight=flight, dead_letters=dead, scheduled=sched)
            total[0] += counts.depth
            total[1] += counts.in_flight
            total[2] += counts.dead_letters
            total[3] += counts.scheduled
            if sub is not None:
                per_sub[sub] = counts
        return QueueInfo(
            name=name,
            model=QueueModel(model),
            max_redeliveries=int(cfg[b"max_redeliveries"]),
            ack_timeout_s=int(cfg[b"ack_timeout_ms"]) / 1000,
            depth=total[0],
            in_flight=total[1],
            dead_letters=total[2],
            scheduled=total[3],
            subscribers=per_sub,
        )

    def list_queues(self, tenant: str) -> list[QueueInfo]:
        tk = k.TenantKeys(check_tenant_id(tenant))
        names = sorted(n.decode() for n in self.storage.call(self.client.smembers, tk.queues))
        out = []
        for name in names:
            try:
                out.append(self.get_queue(tenant, name))
            except NotFound:
                continue  # removed while listing
        return out

    def delete_queue(self, tenant: str, name: str) -> None:
        """Removes a queue with its messages, dead letters and subscribers.

        The name is free as soon as this starts: the queue's keys move aside
        in one script and are dropped in chunks after it.
        """
        tk, qk = self._queue_keys(tenant, name)
        for _ in range(MAX_SEND_RETRIES):
            model, cfg, subs = self._read_config(qk)
            if model is None:
                raise _not_found(name)
            route = f"{model}|{cfg[b'gen'].decode()}|{cfg.get(b'subv', b'0').decode()}"
            sources = [qk.destination()] + [qk.destination(s) for s in subs]
            try:
                marker = self._unlink(tk, qk, "queue", name, route, sources)
                break
            except _StaleRoute:
                continue
        else:
            raise Conflict("the queue's subscribers kept changing during its removal; try again", queue=name)
        self._forget_route(tenant, name)
        if marker is None:
            raise _not_found(name)
        self._finish_removal(tk, marker)

    def put_subscriber(self, tenant: str, queue: str, subscriber: str) -> bool:
        """Creates a subscriber ahead of its first get; returns whether it was created."""
        tk, qk = self._queue_keys(tenant, queue)
        check_subscriber_name(subscriber)
        created = self.storage.run(
            "subscriber_put", self._base(tk, qk) + [qk.subscribers],
            [subscriber, self.settings.max_subscribers], errors=self._queue_errors(queue),
        )
        return bool(created)

    def delete_subscriber(self, tenant: str, queue: str, subscriber: str) -> None:
        """Removes a subscriber and its messages; later sends no longer copy to it."""
        tk, qk = self._queue_keys(tenant, queue)
        check_subscriber_name(subscriber)
        marker = self._unlink(tk, qk, "subscriber", subscriber, "", [qk.destination(subscriber)])
        if marker is None:
            raise NotFound(f"subscriber {subscriber!r} of queue {queue!r} does not exist",
                           queue=queue, subscriber=subscriber)
        self._finish_removal(tk, marker)

    def _unlink(self, tk: k.TenantKeys, qk: k.QueueKeys, kind: str, name: str, route: str,
                sources: list[k.DestinationKeys]) -> str | None:
        """Moves a component's destinations aside atomically; returns the removal marker, or None if absent."""
        removal_id = uuid.uuid4().hex
        keys = self._base(tk, qk) + [tk.queues, qk.subscribers, tk.deleting, tk.due, tk.oldest]
        for i, d in enumerate(sources):
            keys += d.as_list() + tk.removed_destination(removal_id, i).as_list()
        marker = f"{removal_id}:{len(sources)}"
        existed = self.storage.run("unlink_component", keys, [kind, name, route, marker, *(d.member for d in sources)],
                                   errors={"STALESUBS": lambda: _StaleRoute("stale")})
        return marker if existed else None

    def _finish_removal(self, tk: k.TenantKeys, marker: str) -> None:
        """Drops a removal's messages in chunks, then its keys and its marker.

        Idempotent: an interrupted removal resumes from whatever is left.
        """
        removal_id, _, count = marker.partition(":")
        # manage.lua reads no queue config (KEYS[4]); the marker set stands in for it.
        base = [tk.doc, tk.doc_props, tk.doc_refs, tk.deleting]
        for i in range(int(count)):
            d = tk.removed_destination(removal_id, i)
            self._drain(tk, base, d, "drop", "chunk")
            self.storage.call(self.client.delete, *d.as_list())
        self.storage.call(self.client.srem, tk.deleting, marker)

    def resume_removals(self, tenant: str) -> int:
        """Finishes removals that a crash interrupted; returns how many it finished."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        markers = [m.decode() for m in self.storage.call(self.client.smembers, tk.deleting)]
        for marker in markers:
            self._finish_removal(tk, marker)
        return len(markers)

    # -- routes (what a send fans out to) -----------------------------------

    def _read_config(self, qk: k.QueueKeys) -> tuple[str | None, dict[bytes, bytes], list[str]]:
        pipe = self.client.pipeline(transaction=True)
        pipe.hmget(qk.config, CONFIG_FIELDS)  # not HGETALL: the hash holds the queue's counters too
        pipe.smembers(qk.subscribers)
        values, subs = self.storage.call(pipe.execute)
        cfg = {name.encode(): v for name, v in zip(CONFIG_FIELDS, values) if v is not None}
        model = cfg.get(b"model")
        return (model.decode() if model else None), cfg, sorted(s.decode() for s in subs)

    def _route(self, tenant: str, queue: str, qk: k.QueueKeys, refresh: bool) -> tuple[str, str, list[str]]:
        key = (tenant, queue)
        if not refresh:
            cached = self._routes.get(key)
            if cached is not None:
                return cached
        model, cfg, subs = self._read_config(qk)
        if model is None:
            self._forget_route(tenant, queue)
            raise _not_found(queue)
        # The route names the queue's generation too, so a sender that cached the
        # route of a removed queue never writes into its successor's subscribers.
        subv = cfg.get(b"subv", b"0").decode() if model == QueueModel.PUBLISH_SUBSCRIBE.value else ""
        route = (model, f"{model}|{cfg[b'gen'].decode()}|{subv}", subs)
        with self._routes_lock:
            if len(self._routes) > 10_000:
                self._routes.clear()
            self._routes[key] = route
        return route

    def _forget_route(self, tenant: str, queue: str) -> None:
        with self._routes_lock:
            self._routes.pop((tenant, queue), None)

    def _queue_errors(self, queue: str, **more: Any) -> dict[str, Any]:
        errors: dict[str, Any] = {
            "NOQUEUE": lambda: _not_found(queue),
            "NOSUBSCRIBER": lambda: InvalidInput(
                "subscriber is required for a publish/subscribe queue", field="subscriber"),
            "SUBSCRIBERP2P": lambda: InvalidInput(
                "a point-to-point queue has no subscribers; leave subscriber out", field="subscriber"),
            "TOOMANYSUBS": lambda: Conflict(
                f"a queue has at most {self.settings.max_subscribers} subscribers", queue=queue,
                limit=self.settings.max_subscribers),
        }
        errors.update(more)
        return errors

    # -- send -----------------------------------------------------------------

    def send(self, tenant: str, queue: str, messages: Sequence[OutgoingMessage], quota_bytes: int = 0) -> list[str]:
        """Stores a batch of messages, all or nothing; returns their ids in order.

        A message whose ``dedupe_id`` was sent to this queue within the
        de-duplication window is not stored again; its original id comes back.
        With ``quota_bytes``, a batch that would take the tenant's stored bytes
        past it is refused whole (QuotaExceeded) and stores nothing.
        """
        tk, qk = self._queue_keys(tenant, queue)
        args_tail, dedupe_keys = self._encode_batch(qk, messages)
        refresh = False
        for _ in range(MAX_SEND_RETRIES):
            model, expected, subs = self._route(tenant, queue, qk, refresh)
            if model == QueueModel.POINT_TO_POINT.value:
                dests = [qk.destination()]
            else:
                dests = [qk.destination(s) for s in subs]
            keys = self._base(tk, qk) + [tk.seq, qk.subscribers]
            for d in dests:
                keys.extend(d.as_list())
            keys.extend(dedupe_keys)
            keys += [tk.oldest, tk.marker_ledger, tk.usage]
            window_ms = round(self.settings.dedupe_window_s * 1000)
            try:
                ids = self.storage.run(
                    "send",
                    keys,
                    [expected, len(dests), window_ms, args_tail[0], quota_bytes, *(d.member for d in dests),
                     *args_tail[1:]],
                    errors={"NOQUEUE": lambda: _not_found(queue), "STALESUBS": lambda: _StaleRoute("stale"),
                            "QUOTA": lambda: _QuotaRefused("quota")},
                )
            except NotFound:
                self._forget_route(tenant, queue)
                raise
            except _StaleRoute:
                refresh = True
                continue
            except _QuotaRefused:
                used = self.usage(tenant)["stored_bytes"]
                raise QuotaExceeded(
                    f"the tenant's disk quota is {quota_bytes} bytes and {used} are stored: "
                    "this send would pass it; ack or delete messages first",
                    limit=quota_bytes, used=used) from None
            return [i.decode() for i in ids]
        raise Conflict("the queue's subscribers kept changing during the send; try again", queue=queue)

    def _encode_batch(self, qk: k.QueueKeys, messages: Sequence[OutgoingMessage]) -> tuple[list[Any], list[str]]:
        s = self.settings
        if not messages:
            raise InvalidInput("messages must hold at least one message", field="messages")
        if len(messages) > s.max_messages_per_send:
            raise TooLarge(
                f"a send holds at most {s.max_messages_per_send} messages",
                field="messages", limit=s.max_messages_per_send,
            )
        args: list[Any] = [len(messages)]
        dedupe_index: dict[str, int] = {}
        documents = 0
        for i, m in enumerate(messages):
            if not m.documents:
                raise InvalidInput("a message refers to at least one document",
                                   field=f"messages.{i}.documents")
            if len(m.documents) > s.max_documents_per_message:
                raise TooLarge(f"a message refers to at most {s.max_documents_per_message} documents",
                               field=f"messages.{i}.documents", limit=s.max_documents_per_message)
            documents += len(m.documents)
            if documents > s.max_documents_per_send:
                raise TooLarge(f"a send holds at most {s.max_documents_per_send} documents",
                               field="messages", limit=s.max_documents_per_send)
            dd = 0
            if m.dedupe_id is not None:
                if not isinstance(m.dedupe_id, str) or not 0 < len(m.dedupe_id) <= MAX_DEDUPE_ID_LENGTH:
                    raise InvalidInput(f"dedupe_id must be a string of 1 to {MAX_DEDUPE_ID_LENGTH} characters",
                                       field=f"messages.{i}.dedupe_id")
                dd = dedupe_index.setdefault(m.dedupe_id, len(dedupe_index) + 1)
            try:
                envelope = m.envelope_json()
            except (TypeError, ValueError):
                raise InvalidInput("message properties must be JSON values",
                                   field=f"messages.{i}.properties") from None
            args += [dd, envelope, len(m.documents)]
            for j, doc in enumerate(m.documents):
                data, props = encode_document(doc, s.max_document_bytes, f"messages.{i}.documents.{j}")
                args += [data, props]
        return args, [qk.dedupe(d) for d in dedupe_index]

    # -- get, ack, nack, extend -------------------------------------------------

    def get(
        self,
        tenant: str,
        queue: str,
        max_messages: int = 10,
        wait_ms: int = 0,
        subscriber: str | None = None,
        stop: threading.Event | None = None,
    ) -> list[Delivery]:
        """Delivers up to ``max_messages`` ready messages, waiting up to ``wait_ms`` for the first.

        Each delivered message is in flight until acked, nacked or its
        ``ack_timeout_s`` runs out (then it counts as a failed delivery).
        A wait ends early, empty, within a second of ``stop`` being set.
        """
        tk, qk = self._queue_keys(tenant, queue)
        if subscriber is not None:
            check_subscriber_name(subscriber)
        s = self.settings
        if not isinstance(max_messages, int) or isinstance(max_messages, bool) or not 1 <= max_messages <= s.max_get:
            raise InvalidInput(f"max must be an integer from 1 to {s.max_get}", field="max")
        if not isinstance(wait_ms, int) or isinstance(wait_ms, bool) or not 0 <= wait_ms <= s.max_wait_ms:
            raise InvalidInput(f"wait_ms must be an integer from 0 to {s.max_wait_ms}", field="wait_ms")
        d = qk.destination(subscriber)
        keys = self._base(tk, qk) + d.as_list() + [qk.subscribers, tk.usage, tk.due]
        args = [max_messages, s.delays_ms_arg, subscriber or "", s.max_subscribers, *self._reply_budget(), d.member]
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            reply = self.storage.run("get", keys, args, errors=self._queue_errors(queue))
            count, wake, last_id = reply[0], reply[1], reply[2]
            if count:
                return decode_messages(reply, 3, count, Delivery)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                return []
            # At most a second at a time: a removed queue has no entry to wake us,
            # and the next script run reports it.
            block_ms = min(round(remaining * 1000), 1000)
            if wake >= 0:
                block_ms = min(block_ms, wake + 1)
            # Blocks until an entry newer than the last one the script saw arrives,
            # so a send between the script and this call is never missed.
            self.storage.call(self.client.xread, {d.ready: last_id}, count=1, block=max(1, block_ms))

    def ack(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
            receipts: Sequence[str] | None = None, subscriber: str | None = None) -> int:
        """Acks in-flight messages; a receipt of an earlier delivery acks nothing."""
        return self._settle("ack", "", tenant, queue, ids, receipts, subscriber)[0]

    def nack(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
             receipts: Sequence[str] | None = None, subscriber: str | None = None,
             reason: str = "") -> NackResult:
        """Fails deliveries now: each is redelivered after its delay or dead-lettered."""
        if not isinstance(reason, str) or len(reason) > 4096:
            raise InvalidInput("reason must be a string of at most 4096 characters", field="reason")
        done, dead = self._settle("nack", reason or "nacked", tenant, queue, ids, receipts, subscriber)
        return NackResult(requeued=done, dead_lettered=dead)

    def release(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
                receipts: Sequence[str] | None = None, subscriber: str | None = None,
                delay_s: float = 1.0) -> int:
        """Gives deliveries back without counting a failed delivery: each is redelivered
        after ``delay_s``. For a consumer that could not work for a reason that is not the
        message's, such as its own rate limit, so the message does not drift to the dead
        letter queue."""
        if not isinstance(delay_s, (int, float)) or isinstance(delay_s, bool) or not 0 <= delay_s <= 86400:
            raise InvalidInput("delay_s must be a number from 0 to 86400", field="delay_s")
        return self._settle("release", round(delay_s * 1000), tenant, queue, ids, receipts, subscriber)[0]

    def extend(self, tenant: str, queue: str, ids: Sequence[str] | None = None,
               receipts: Sequence[str] | None = None, subscriber: str | None = None,
               seconds: float | None = None) -> int:
        """Moves the ack deadline of in-flight messages to ``seconds`` from now."""
        if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                                    or not 0 < seconds <= 86400):
            raise InvalidInput("seconds must be a number from 0 to 86400", field="seconds")
        if seconds is None:
            seconds = self.get_queue(tenant, queue).ack_timeout_s
        return self._settle("extend", round(seconds * 1000), tenant, queue, ids, receipts, subscriber)[0]

    def _settle(self, action: str, arg: Any, tenant: str, queue: str, ids: Sequence[str] | None,
                receipts: Sequence[str] | None, subscriber: str | None) -> tuple[int, int]:
        tk, qk = self._queue_keys(tenant, queue)
        if subscriber is not None:
            check_subscriber_name(subscriber)
        mode, items = _selector(ids, receipts)
        d = qk.destination(subscriber)
        done, dead = self.storage.run(
            "settle",
            self._base(tk, qk) + d.as_list() + [qk.subscribers, tk.usage, tk.due],
            [action, arg, self.settings.delays_ms_arg, mode, subscriber or "", d.member, *items],
            errors=self._queue_errors(queue, UNKNOWNSUBSCRIBER=lambda: NotFound(
                f"subscriber {subscriber!r} of queue {queue!r} does not exist", queue=queue, subscriber=subscriber)),
        )
        return int(done), int(dead)

    # -- maintenance --------------------------------------------------------------

    def readiness_problems(self) -> list[str]:
        """Why this server cannot do its work now: Redis unreachable, scripts gone, memory full."""
        try:
            memory = self.client.info("memory")
            if self.storage.scripts.missing(self.client):  # Redis restarted or flushed its scripts
                self.storage.scripts.load_all(self.client)
        except redis.RedisError as exc:
            return [f"Redis does not answer or refuses the scripts: {exc}"]
        limit = int(memory.get("maxmemory", 0))
        if limit and int(memory.get("used_memory", 0)) >= limit:
            return ["Redis is at its maxmemory and refuses writes"]
        return []

    def tenants(self) -> list[str]:
        """Tenants that have (or had) queues: what the maintenance sweeps visit."""
        return sorted(t.decode() for t in self.storage.call(self.client.smembers, k.TENANTS_KEY))

    def destinations(self, tenant: str) -> list[tuple[k.QueueKeys, k.DestinationKeys]]:
        """Every destination of a tenant: each point-to-point queue and each subscriber."""
        return self._all_destinations(k.TenantKeys(check_tenant_id(tenant)))

    def _all_destinations(self, tk: k.TenantKeys) -> list[tuple[k.QueueKeys, k.DestinationKeys]]:
        out = []
        for raw in self.storage.call(self.client.smembers, tk.queues):
            qk = tk.queue(raw.decode())
            out.append((qk, qk.destination()))
            for s in self.storage.call(self.client.smembers, qk.subscribers):
                out.append((qk, qk.destination(s.decode())))
        return out

    def sweep(self, tenant: str) -> int:
        """Moves due redeliveries to ready and fails expired deliveries of every queue.

        Visits every destination and sets each one's place in the due index:
        the maintenance round visits only the due ones (:meth:`maintain`);
        this full walk is for the format migration and for operators.
        Returns the number of messages moved.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        return sum(self._sweep(tk, qk, d) for qk, d in self._all_destinations(tk))

    def _sweep(self, tk: k.TenantKeys, qk: k.QueueKeys, d: k.DestinationKeys) -> int:
        moved = 0
        while True:
            try:
                n = int(self.storage.run("sweep", self._base(tk, qk) + d.as_list() + [tk.usage, tk.due, tk.oldest],
                                         [self.settings.delays_ms_arg, self.settings.chunk_size, d.member],
                                         errors={"NOQUEUE": lambda: _not_found(qk.name)}))
            except NotFound:
                return moved  # removed since it was indexed; the script took it out of the indexes
            moved += n
            if n < self.settings.chunk_size:
                return moved

    def _retention_cutoff_ms(self) -> int:
        seconds, micros = self.storage.call(self.client.time)
        return int(seconds * 1000 + micros // 1000 - round(self.settings.document_retention_s * 1000))

    def purge(self, tenant: str) -> int:
        """Removes every message, queued or dead, whose documents are past the retention,
        visiting every destination and setting each one's place in the index of oldest
        messages (the maintenance round visits only those past the retention).

        Documents are created with their message, so a message id (which
        starts with its send time) dates its documents. Returns the count removed.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        cutoff_ms = self._retention_cutoff_ms()
        return sum(self._purge(tk, qk, d, cutoff_ms) for qk, d in self._all_destinations(tk))

    def _purge(self, tk: k.TenantKeys, qk: k.QueueKeys, d: k.DestinationKeys, cutoff_ms: int) -> int:
        removed = self._drain(tk, self._base(tk, qk), d, "drop", "older", bound=str(cutoff_ms))
        self.storage.run("oldest", [d.all, tk.oldest], [d.member])
        return removed

    def due_work(self, tenants: Sequence[str], limit: int = 100) -> dict[str, DueWork]:
        """What each tenant's maintenance has to do now, read from its indexes for all of
        ``tenants`` in one round trip; takes expired de-duplication markers off their usage."""
        args = [round(self.settings.document_retention_s * 1000), limit]
        calls = [(t, k.TenantKeys(check_tenant_id(t))) for t in tenants]
        keys = {t: [tk.due, tk.oldest, tk.marker_ledger, tk.usage, tk.deleting] for t, tk in calls}
        pipe = self.client.pipeline(transaction=False)
        for tenant, _ in calls:
            self.storage.scripts.queue(pipe, "due", keys[tenant], args)
        replies = self.storage.call(pipe.execute, raise_on_error=False)
        out = {}
        for (tenant, _), reply in zip(calls, replies):
            if isinstance(reply, Exception):  # NOSCRIPT on a node that lost its scripts, say: once more alone
                reply = self.storage.run("due", keys[tenant], args)
            due, old, removals, freed = reply
            out[tenant] = DueWork(due=[m.decode() for m in due], old=[m.decode() for m in old],
                                  removals=[m.decode() for m in removals], marker_bytes=int(freed))
        return out

    def maintain(self, tenant: str, work: DueWork | None = None) -> dict[str, int]:
        """One round of maintenance for one tenant: finishes removals, sweeps the destinations
        that have something due, purges those holding messages past the retention.

        Visits only what the tenant's indexes say is due, so an idle queue costs
        nothing and a tenant with many queues does not slow the others' rounds.
        """
        tk = k.TenantKeys(check_tenant_id(tenant))
        if work is None:
            work = self.due_work([tenant])[tenant]
        for marker in work.removals:
            self._finish_removal(tk, marker)
        moved = sum(self._sweep(tk, *tk.destination_named(m)) for m in work.due)
        purged = 0
        if work.old:
            cutoff_ms = self._retention_cutoff_ms()
            purged = sum(self._purge(tk, *tk.destination_named(m), cutoff_ms) for m in work.old)
        return {"removals": len(work.removals), "moved": moved, "purged": purged,
                "marker_bytes": work.marker_bytes}


def _selector(ids: Sequence[str] | None, receipts: Sequence[str] | None) -> tuple[str, list[str]]:
    if (ids is None) == (receipts is None):
        raise InvalidInput("give either ids or receipts", field="ids")
    if ids is not None:
        check_ids(ids, "ids")
        return "id", list(ids)
    checked = check_receipts(receipts)
    if len(checked) > MAX_SELECTORS:
        raise TooLarge(f"receipts holds at most {MAX_SELECTORS} entries", field="receipts", limit=MAX_SELECTORS)
    return "receipt", checked


