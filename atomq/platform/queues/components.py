"""A tenant's queue components: queues and subscribers, their counts, and their removal.

A removal frees the name at once: one script moves the component's keys
aside under a removal marker, and the messages are dropped in chunks after
it. A crash between the two leaves the marker, and the removal resumes from
whatever is left (on the next maintenance round or :meth:`Components.resume_removals`).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence

from atomq import defaults
from atomq.errors import Conflict, InvalidInput, NotFound
from atomq.platform.models import (
    CountsNow,
    Durability,
    OnExpire,
    Overflow,
    QueueAccess,
    QueueInfo,
    QueueModel,
    QueueOrdering,
)
from atomq.platform.queues.dead_letter_targets import DeadLetterTargets, setting_errors, setting_fields
from atomq.platform.queues.names import check_subscriber_name, check_tenant_id
from atomq.platform.queues.queue_config import config_fields
from atomq.platform.queues.queue_info_reads import PER_DEST, queue_info_from_reads
from atomq.platform.queues.routes import MAX_ROUTE_RETRIES, Routes, StaleRoute, parse_queue_config, queue_config_reads
from atomq.platform.queues.topics import check_patterns
from atomq.platform.shared import (
    ChunkBudget,
    Shared,
    docs_and_config,
    queue_keys,
    queue_not_found,
)
from atomq.platform.store import keys as k
from atomq.platform.watch.counters import QUEUE_COUNTS

class Components:
    """Creates, counts, lists and removes the queues and subscribers of every tenant."""

    def __init__(self, shared: Shared, routes: Routes, targets: DeadLetterTargets) -> None:
        self._shared = shared
        self._routes = routes
        self._targets = targets

    def put_queue(
        self,
        tenant: str,
        name: str,
        model: QueueModel | str,
        max_redeliveries: int | None = None,
        ack_timeout_s: float | None = None,
        message_ttl_s: float | None = None,
        on_expire: OnExpire | str | None = None,
        topics: Sequence[str] | None = None,
        last_value: bool | None = None,
        last_value_key: str | None = None,
        access: QueueAccess | str | None = None,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        max_message_bytes: int | None = None,
        max_dead_letters: int | None = None,
        overflow: Overflow | str | None = None,
        overflow_to_dead_letters: bool | None = None,
        durability: Durability | str | None = None,
        delay_s: float | None = None,
        ordering: QueueOrdering | str | None = None,
        dead_letter_queue: str | None = None,
        extra_fields: Mapping[str, str | int] | None = None,
    ) -> tuple[QueueInfo, bool]:
        """Creates or updates a queue component; returns it and whether it was created.

        A setting given as None keeps what the queue has (a new queue: its default).
        ``topics``: the topic patterns the queue attracts (``atomq.platform.queues.topics``).
        ``last_value``: the queue keeps one waiting message per value of the property
        ``last_value_key`` ("" for one message in all), a new one replacing the last.
        ``access``: exclusive, one consumer at a time gets the queue's messages, in send order.
        ``max_messages`` ... ``overflow_to_dead_letters``: the queue's limits (``QueueLimits``).
        ``durability``: sync, a send is answered once its data is synced to disk (``Durability``).
        ``delay_s``: each message sent to the queue is delivered no sooner than this long after its
        send, unless it gives a delay of its own (not on an exclusive queue, which delivers in send order).
        ``ordering``: group, one message of a group out at a time, in send order (``QueueOrdering``);
        a change applies to the messages sent after it, those sent before go out as they went.
        ``dead_letter_queue``: another point-to-point queue of the tenant, which the queue's dead
        letters move to as ordinary messages ("": back to the queue's own dead letters;
        ``dead_letter_targets``); it must exist and take them (``queue_put.lua``).
        ``extra_fields``: config fields another front keeps with the queue (``QueueFields``),
        stored as they are in the same script, so a queue is never seen without them.
        """
        tk, qk = queue_keys(tenant, name)
        try:
            model = QueueModel(model)
        except ValueError:
            raise InvalidInput(
                "model must be 'point_to_point' or 'publish_subscribe'", field="model"
            ) from None
        named = config_fields(model, max_redeliveries=max_redeliveries, ack_timeout_s=ack_timeout_s,
                              message_ttl_s=message_ttl_s, on_expire=on_expire, last_value=last_value,
                              last_value_key=last_value_key, access=access, durability=durability, delay_s=delay_s,
                              ordering=ordering,
                              max_messages=max_messages, max_bytes=max_bytes, max_message_bytes=max_message_bytes,
                              max_dead_letters=max_dead_letters, overflow=overflow,
                              overflow_to_dead_letters=overflow_to_dead_letters)
        target_cfg = None
        if dead_letter_queue is not None:
            fields, target_cfg = setting_fields(tk, name, dead_letter_queue)
            named += fields
        named += [part for field, value in (extra_fields or {}).items() for part in (field, value)]
        patterns = "" if topics is None else json.dumps(list(check_patterns(topics)), separators=(",", ":"))
        self._shared.storage.call(self._shared.client.sadd, k.TENANTS_KEY, tk.tenant)
        created = self._shared.storage.run(
            "queue_put",
            docs_and_config(tk, qk) + [tk.queues, qk.subscribers, qk.destination().msg, tk.seq, tk.topic_patterns,
                                        tk.topic_changes, tk.pending_copies] + ([target_cfg] if target_cfg else []),
            [name, model.value, defaults.MAX_REDELIVERIES, round(defaults.ACK_TIMEOUT_S * 1000),
             self._shared.settings.max_queues_per_tenant, patterns, defaults.MAX_TOPIC_PATTERNS_PER_TENANT, *named],
            errors={
                "CONFLICT": lambda _: Conflict(
                    "the model of a queue that holds messages or subscribers cannot change", queue=name
                ),
                "EXCLUSIVEPUBSUB": lambda _: InvalidInput(
                    "an exclusive queue is point-to-point: set access non_exclusive to make it publish/subscribe",
                    field="access"),
                "EXCLUSIVEDELAY": lambda _: InvalidInput(
                    "an exclusive queue delivers in send order, so it delays no message: set delay_s 0 or access "
                    "non_exclusive", field="delay_s" if delay_s else "access"),
                "LASTVALUEPUBSUB": lambda _: InvalidInput(
                    "a last-value queue is point-to-point: set last_value false to make it publish/subscribe",
                    field="last_value"),
                "ORDERPENDING": lambda _: Conflict(
                    "a send in steps still owes the queue messages, which would lose their send order: "
                    "try again in a moment", queue=name),
                "TOOMANYPATTERNS": lambda words: Conflict(
                    f"a tenant's queues attract at most {defaults.MAX_TOPIC_PATTERNS_PER_TENANT} topic patterns "
                    f"together, and these would make {words[0]}: remove patterns from its queues first",
                    code="too_many_topic_patterns", limit=defaults.MAX_TOPIC_PATTERNS_PER_TENANT, field="topics"),
                "TOOMANYQUEUES": lambda _: Conflict(
                    f"a tenant has at most {self._shared.settings.max_queues_per_tenant} queues: delete one first",
                    code="too_many_queues", limit=self._shared.settings.max_queues_per_tenant),
                **setting_errors(dead_letter_queue),
            },
        )
        self._routes.forget(tenant, name)
        self._targets.forget(tenant, name)
        return self.get_queue(tenant, name), bool(created)

    def get_queue(self, tenant: str, name: str) -> QueueInfo:
        """A queue with its counts; publish/subscribe counts are summed over subscribers."""
        queue_keys(tenant, name)  # checks both names
        infos = self._queue_infos(tenant, [name])
        if not infos:
            raise queue_not_found(name)
        return infos[0]

    def counts_now(self, tenant: str, name: str) -> CountsNow:
        """A point-to-point queue's counts at this moment, by the store's clock (``CountsNow``): what a
        get would take now, where ``get_queue`` counts the messages where they were put last."""
        tk, qk = queue_keys(tenant, name)
        d = qk.destination()
        ready, due, ahead, overdue, flight, delayed = (int(n) for n in self._shared.storage.run(
            "counts_now", docs_and_config(tk, qk) + d.as_list(), [], errors=self._shared.queue_errors(name)))
        return CountsNow(waiting=ready + due + overdue, in_flight=flight, scheduled=ahead, delayed=delayed)

    def _queue_infos(self, tenant: str, names: list[str]) -> list[QueueInfo]:
        """The queues of ``names`` that exist, with their counts, in two round trips however many
        they are (three when some hold ranked messages): a tenant's list, and the metrics scrape
        over every tenant, used to cost two a queue."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        qks = [tk.queue(name) for name in names]
        pipe = self._shared.client.pipeline(transaction=True)
        for qk in qks:
            queue_config_reads(pipe, qk)
        raw_configs = self._shared.storage.call(pipe.execute)
        found = []
        for i, (name, qk) in enumerate(zip(names, qks)):
            model, cfg, subs = parse_queue_config(raw_configs[2 * i], raw_configs[2 * i + 1])
            if model is not None:  # one removed meanwhile is left out
                dests: list[str | None] = [None] if model == QueueModel.POINT_TO_POINT.value else list(subs)
                found.append((name, qk, model, cfg, dests))
        pipe = self._shared.client.pipeline(transaction=True)
        for name, qk, _, cfg, dests in found:
            for sub in dests:
                d = qk.destination(sub)
                pipe.xlen(d.ready)
                pipe.zcard(d.ordered)
                pipe.zcard(d.sched)
                pipe.zcard(d.inflight)
                pipe.xlen(d.dlq)
                pipe.get(d.held)
                pipe.get(d.delayed)
                pipe.zcard(d.group_waiting)
                pipe.hlen(d.groups)
            if cfg.get(b"access") == QueueAccess.EXCLUSIVE.value.encode():
                pipe.hgetall(qk.destination().consumers)
            pipe.hget(tk.topic_patterns, name)
            pipe.hmget(qk.config, [f"n:{kind}" for kind in QUEUE_COUNTS])
        raw = self._shared.storage.call(pipe.execute)
        parts, at = [], 0
        for name, qk, model, cfg, dests in found:
            exclusive = cfg.get(b"access") == QueueAccess.EXCLUSIVE.value.encode()
            size = PER_DEST * len(dests) + (3 if exclusive else 2)
            parts.append((exclusive, raw[at:at + size]))
            at += size
        # Destinations holding ranked messages (outside the stream): their counts by priority, all at once.
        ranked = [[qk.destination(sub) for i, sub in enumerate(dests) if part[i * PER_DEST + 1]]
                  for (_, qk, _, _, dests), (_, part) in zip(found, parts)]
        by_priority = (self._ranked_by_priority(ranked) if any(ranked)
                       else [Counter[int]() for _ in found])
        return [queue_info_from_reads(name, model, cfg, dests, exclusive, part, extra)
                for (name, _, model, cfg, dests), (exclusive, part), extra in zip(found, parts, by_priority)]

    def _ranked_by_priority(self, queues: list[list[k.DestinationKeys]]) -> list[Counter[int]]:
        """Ready messages outside the stream by priority, for each queue's destinations (one round
        trip for all): rz scores start with 9 - priority."""
        least, most = defaults.PRIORITY_RANGE
        band = 10**13
        pipe = self._shared.client.pipeline(transaction=False)
        for dests in queues:
            for d in dests:
                for p in range(least, most + 1):
                    pipe.zcount(d.ordered, (9 - p) * band, (10 - p) * band - 1)
        raw = self._shared.storage.call(pipe.execute)
        levels = most - least + 1
        out, at = [], 0
        for dests in queues:
            counts: Counter[int] = Counter()
            for _ in dests:
                for j, n in enumerate(raw[at:at + levels]):
                    counts[least + j] += n
                at += levels
            out.append(counts)
        return out

    def list_queues(self, tenant: str, limit: int | None = None, after: str | None = None) -> list[QueueInfo]:
        """The tenant's queues by name: those after ``after``, at most ``limit`` of them (all without),
        so a page reads the figures of its own queues only."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        names = sorted(n.decode() for n in self._shared.storage.call(self._shared.client.smembers, tk.queues))
        if after is not None:
            names = [n for n in names if n > after]
        return self._queue_infos(tenant, names[:limit])  # a queue removed while listing is left out

    def delete_queue(self, tenant: str, name: str) -> None:
        """Removes a queue with its messages, dead letters and subscribers.

        The name is free as soon as this starts: the queue's keys move aside
        in one script and are dropped in chunks after it.
        """
        tk, qk = queue_keys(tenant, name)
        for _ in range(MAX_ROUTE_RETRIES):
            model, cfg, subs = self._routes.read_config(qk)
            if model is None:
                raise queue_not_found(name)
            route = f"{model}|{cfg[b'gen'].decode()}|{cfg.get(b'subv', b'0').decode()}"
            sources = [qk.destination()] + [qk.destination(s) for s in subs]
            try:
                marker = self._unlink(tk, qk, "queue", name, route, sources)
                break
            except StaleRoute:
                continue
        else:
            raise Conflict("the queue's subscribers kept changing during its removal; try again", queue=name)
        self._routes.forget(tenant, name)
        self._targets.forget(tenant, name)
        if marker is None:
            raise queue_not_found(name)
        self.finish_removal(tk, marker)

    def put_subscriber(self, tenant: str, queue: str, subscriber: str) -> bool:
        """Creates a subscriber ahead of its first get; returns whether it was created."""
        tk, qk = queue_keys(tenant, queue)
        check_subscriber_name(subscriber)
        created = self._shared.storage.run(
            "subscriber_put", docs_and_config(tk, qk) + [qk.subscribers],
            [subscriber, self._shared.settings.max_subscribers], errors=self._shared.queue_errors(queue),
        )
        return bool(created)

    def delete_subscriber(self, tenant: str, queue: str, subscriber: str) -> None:
        """Removes a subscriber and its messages; later sends no longer copy to it."""
        tk, qk = queue_keys(tenant, queue)
        check_subscriber_name(subscriber)
        marker = self._unlink(tk, qk, "subscriber", subscriber, "", [qk.destination(subscriber)])
        if marker is None:
            raise NotFound(f"subscriber {subscriber!r} of queue {queue!r} does not exist",
                           queue=queue, subscriber=subscriber)
        self.finish_removal(tk, marker)

    def _unlink(self, tk: k.TenantKeys, qk: k.QueueKeys, kind: str, name: str, route: str,
                sources: list[k.DestinationKeys]) -> str | None:
        """Moves a component's destinations aside atomically; returns the removal marker, or None if absent."""
        removal_id = uuid.uuid4().hex
        keys = docs_and_config(tk, qk) + [tk.queues, qk.subscribers, tk.deleting, tk.due, tk.oldest,
                                          tk.topic_patterns, tk.topic_changes]
        for i, d in enumerate(sources):
            keys += d.as_list() + tk.removed_destination(removal_id, i).as_list()
        marker = f"{removal_id}:{len(sources)}"
        existed = self._shared.storage.run(
            "unlink_component", keys, [kind, name, route, marker, *(d.member for d in sources)],
            errors={"STALESUBS": lambda _: StaleRoute("stale")})
        return marker if existed else None

    def finish_removal(self, tk: k.TenantKeys, marker: str, budget: ChunkBudget | None = None) -> bool:
        """Drops a removal's messages in chunks, then its keys and its marker; with a
        ``budget``, stops when it is spent. Returns whether the removal is done.

        Idempotent: an interrupted removal resumes from whatever is left.
        """
        removal_id, _, count = marker.partition(":")
        # manage.lua reads no queue config (KEYS[4]); the marker set stands in for it.
        base = [tk.doc, tk.doc_props, tk.doc_refs, tk.deleting]
        for i in range(int(count)):
            d = tk.removed_destination(removal_id, i)
            self._shared.drain(tk, base, d, "drop", "chunk", budget=budget)
            if budget is not None and budget.spent:
                return False  # perhaps drained to the end; the next round finds out in one chunk
            self._shared.storage.call(self._shared.client.delete, *d.as_list())
        self._shared.storage.call(self._shared.client.srem, tk.deleting, marker)
        return True

    def resume_removals(self, tenant: str) -> int:
        """Finishes removals that a crash interrupted; returns how many it finished."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        markers = [m.decode() for m in self._shared.storage.call(self._shared.client.smembers, tk.deleting)]
        for marker in markers:
            self.finish_removal(tk, marker)
        return len(markers)

    def tenants(self) -> list[str]:
        """Tenants that have (or had) queues: what the maintenance sweeps visit."""
        return sorted(t.decode() for t in self._shared.storage.call(self._shared.client.smembers, k.TENANTS_KEY))

    def destinations(self, tenant: str) -> list[tuple[k.QueueKeys, k.DestinationKeys]]:
        """Every destination of a tenant: each point-to-point queue and each subscriber."""
        return self.all_destinations(k.TenantKeys(check_tenant_id(tenant)))

    def all_destinations(self, tk: k.TenantKeys) -> list[tuple[k.QueueKeys, k.DestinationKeys]]:
        """:meth:`destinations` for a tenant whose id is already checked."""
        out = []
        for raw in self._shared.storage.call(self._shared.client.smembers, tk.queues):
            qk = tk.queue(raw.decode())
            out.append((qk, qk.destination()))
            for s in self._shared.storage.call(self._shared.client.smembers, qk.subscribers):
                out.append((qk, qk.destination(s.decode())))
        return out
