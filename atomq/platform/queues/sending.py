"""Sending: a batch of messages stored all or nothing, copied to every destination of its queue.

The batch is checked and encoded once, before the first try, so a retry
after a route that changed under it (a subscriber added or removed) reads
the route again but does not encode again. The tenant's disk quota and the
de-duplication window are held inside the send script, in the same step as
the write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from atomq.errors import (
    AtomqError,
    Conflict,
    InvalidInput,
    NotDurable,
    NotFound,
    OutcomeUnknown,
    QuotaExceeded,
    TooLarge,
)
from atomq.platform.models import OutgoingMessage, QueueModel
from atomq.platform.queues.management import Management
from atomq.platform.queues.names import check_tenant_id
from atomq.platform.queues.request_records import (
    RecordedCall,
    RequestToken,
    key_reused,
    outcome_unknown,
    positions_field,
    positions_of,
    stored_answer,
)
from atomq.platform.queues.routes import MAX_ROUTE_RETRIES, ORDERED, Routes, StaleRoute
from atomq.platform.queues.send_journal import (
    Errors,
    ReservationLost,
    SendJournals,
    UploadLost,
    chunked,
    reservation_of,
    upload_of,
)
from atomq.platform.queues.send_encoding import (
    assembled,
    check_batch_size,
    encode_each,
    message_too_big_error,
    queue_full_error,
    with_delay,
)
from atomq.platform.queues.topic_index import TopicIndex
from atomq.platform.queues.topics import check_topic
from atomq.platform.shared import Shared, queue_keys, queue_not_found
from atomq.platform.store import keys as k, send_keys

Admit = Callable[[int], None]
"""Given the message copies a send is about to store, before it writes; raises to refuse it."""


JOURNAL_UNDER_WAY, PREPARED = -2, -3
"""The send script's first reply item when the call is a chunked send's (``send_journal``): one
already under way (a retry found its journal), or just prepared; either way the caller makes its copies."""


class _QuotaRefused(AtomqError):
    """The send script refused the batch: it would pass the tenant's disk quota."""


class _StaleTopics(AtomqError):
    """The send script saw another version of the topic patterns than the caller matched with."""


@dataclass(frozen=True)
class Sent:
    """What a send stored: the messages' ids in order, how many waiting messages its queue
    dropped to make room for them (overflow ``drop_oldest`` or ``drop_lowest_priority``), and
    the destinations each message went to."""

    ids: list[str]
    dropped: int = 0
    destinations: int = 1
    """1 on a point-to-point queue, one a subscriber on a publish/subscribe queue: 0 when it has
    none, and the messages, which got ids, were stored nowhere (``stored_nowhere``)."""

    @property
    def copies(self) -> int:
        """The message copies the send made, counted as ``max_copies_per_request`` counts them."""
        return len(self.ids) * self.destinations


@dataclass(frozen=True)
class Published:
    """What a publish stored: one id a message (the same in every queue), the queues it reached,
    sorted, and the waiting messages they dropped to make room (see :class:`Sent`)."""

    ids: list[str]
    queues: list[str]
    dropped: int = 0
    copies: int = 0
    """The message copies stored: each message once a point-to-point queue and once a subscriber of
    a publish/subscribe queue it reached (0: stored nowhere, ``stored_nowhere``)."""


@dataclass
class PublishedMany:
    """What a publish of messages to several topics stored so far: one id a message in the request's
    order (None where no queue attracts its topic, or not stored yet), the queues each topic reached
    (sorted; empty for none), and the waiting messages dropped to make room (see :class:`Sent`).

    One object follows a publish through its tries, so a try after a refusal that held it (a
    ``flow_control`` queue that was full) stores only what the first did not."""

    ids: list[str | None]
    topics: dict[str, list[str]] = field(default_factory=dict)
    dropped: int = 0
    stored: set[int] = field(default_factory=set)
    """The positions of the messages stored."""
    destinations: dict[int, int] = field(default_factory=dict)
    """Of each position stored, the destinations its message went to (see :class:`Sent`)."""
    copies: dict[str, int] = field(default_factory=dict)
    """Each topic of the request: the message copies stored for it (0: none, ``stored_nowhere``)."""
    not_synced: NotDurable | None = None
    """A group's refusal as stored but not synced in time: the publish answers it once all are stored."""

    def record(self, positions: list[int], ids: list[str], dropped: int, destinations: int) -> None:
        """Notes a group stored: the messages at ``positions`` got ``ids``, each copied to ``destinations``."""
        for i, message_id in zip(positions, ids):
            self.ids[i] = message_id
        self.stored.update(positions)
        self.destinations.update(dict.fromkeys(positions, destinations))
        self.dropped += dropped


class Sending:
    """Stores batches of messages in every tenant's queues, sent to a queue or published to a topic."""

    def __init__(self, shared: Shared, routes: Routes, management: Management, topics: TopicIndex) -> None:
        self._shared = shared
        self._routes = routes
        self._management = management
        self._topics = topics
        self._journals = SendJournals(shared)

    def send(self, tenant: str, queue: str, messages: Sequence[OutgoingMessage], quota_bytes: int = 0,
             idempotency_key: str | None = None, delay_s: float | None = None) -> list[str]:
        """Stores a batch of messages, all or nothing; returns their ids in order (see :meth:`send_batch`)."""
        return self.send_batch(tenant, queue, messages, quota_bytes, idempotency_key, delay_s=delay_s).ids

    def send_batch(self, tenant: str, queue: str, messages: Sequence[OutgoingMessage],
                   quota_bytes: int = 0, idempotency_key: str | None = None, admit: Admit | None = None,
                   delay_s: float | None = None) -> Sent:
        """Stores a batch of messages, all or nothing.

        A message whose ``dedupe_id`` was sent to this queue within the
        de-duplication window is not stored again; its original id comes back.
        With ``quota_bytes``, a batch that would take the tenant's stored bytes
        past it is refused whole (QuotaExceeded) and stores nothing. A batch that
        would pass one of the queue's limits is refused whole (QueueFull), unless
        the queue's overflow drops waiting messages to make room; a message over
        the queue's ``max_message_bytes`` refuses it (TooLarge).

        With ``idempotency_key``, a repeat of the send within ``defaults.IDEMPOTENCY_WINDOW_S``
        stores nothing and answers what the first stored; the same key with another batch is a
        Conflict (``idempotency_key_reused``). A send whose answer the store lost raises
        OutcomeUnknown: sent again with the same key, it is stored once. ``admit`` is given the
        message copies the send is about to store, before anything is written, and may refuse it
        (the server's limits: ``atomq.platform.guards.server_limits``). A batch of more copies than
        ``send_journal.CHUNK_COPIES`` is stored in steps: its subscribers may see it land one by one;
        one of more documents than ``STAGE_DOCS`` or ``STAGE_BYTES`` uploads them in steps first.
        ``delay_s`` delays the messages that give no delay of their own (concepts.md, "Delayed delivery")."""
        tk, qk = queue_keys(tenant, queue)
        token = RequestToken.of(idempotency_key)
        batch = with_delay(messages, delay_s)
        check_batch_size(batch, self._shared.settings)
        args_tail, dedupe_ids = assembled(encode_each(batch, self._shared.settings))  # and its ("", dedupe id)s
        dedupe_keys = [qk.dedupe(d) for _, d in dedupe_ids]
        call = RecordedCall(token, token.digest(["send", queue], args_tail), positions_field(range(len(messages))))
        for refresh in (False,) + (True,) * (MAX_ROUTE_RETRIES - 1):
            try:
                self._admit(len(messages) * self._destinations(tk, [queue], refresh), admit)
                return self._store(tk, [qk], refresh, "", "", dedupe_keys, args_tail, quota_bytes, call)
            except NotFound:
                self._routes.forget(tenant, queue)
                raise
            except StaleRoute:
                continue
        raise Conflict("the queue's subscribers kept changing during the send; try again", queue=queue)

    def publish(self, tenant: str, topic: str, messages: Sequence[OutgoingMessage], quota_bytes: int = 0,
                idempotency_key: str | None = None, admit: Admit | None = None,
                delay_s: float | None = None) -> Published:
        """Stores a batch in every queue whose topic patterns match ``topic``, one copy a queue, all
        or nothing; no match stores nothing. A ``dedupe_id`` repeated to the same topic within the
        de-duplication window stores nothing again and answers with its original id;
        ``idempotency_key``, ``admit`` and ``delay_s`` (of every copy) as in :meth:`send_batch`."""
        check_topic(topic)
        done = self.publish_many(tenant, [topic] * len(messages), with_delay(messages, delay_s), quota_bytes,
                                 idempotency_key=idempotency_key, admit=admit)
        # One group: every message stored, or (no queue attracts the topic) none.
        return Published(ids=[i for i in done.ids if i is not None], queues=done.topics[topic], dropped=done.dropped,
                         copies=done.copies[topic])

    def publish_many(self, tenant: str, topics: Sequence[str], messages: Sequence[OutgoingMessage],
                     quota_bytes: int = 0, progress: PublishedMany | None = None,
                     idempotency_key: str | None = None, admit: Admit | None = None) -> PublishedMany:
        """Publishes each message to its own topic (``topics[i]`` for ``messages[i]``) in as few
        steps as the queues they reach allow: the messages whose topics reach the same queues are
        stored together, all or nothing, in one script, which is what lets an execution whose every
        output has a topic of its own (``boomi/echo/<msgId>``) store a hundred outputs in one or two
        steps. Everything is checked before anything is stored; a refusal of one group leaves the
        groups stored before it stored (``progress`` says which), so such a request is retried with
        its dedupe ids. A ``dedupe_id`` counts per topic, as in :meth:`publish`. A queue keeps the
        order of the messages of each topic; messages of topics that reach different sets of queues
        are stored group by group, so a queue that two such groups reach gets them group by group.
        ``idempotency_key`` and ``admit`` as in :meth:`send_batch`: a repeat stores only what no try
        stored yet. A group of more copies than ``send_journal.CHUNK_COPIES`` is checked whole, then
        copied in steps (``send_journal``): its queues may see it land queue by queue."""
        tk = k.TenantKeys(check_tenant_id(tenant))
        token = RequestToken.of(idempotency_key)
        if len(topics) != len(messages):
            raise InvalidInput("one topic a message", field="messages")
        first: dict[str, int] = {}
        for i, topic in enumerate(topics):
            first.setdefault(topic, i)
        for topic, i in first.items():
            check_topic(topic, field=f"messages.{i}.topic")  # each topic once, named by its first place
        check_batch_size(messages, self._shared.settings)
        encoded = encode_each(messages, self._shared.settings, topics)
        done = progress if progress is not None else PublishedMany(ids=[None] * len(messages))
        digest = token.digest(["publish", *topics], *(e.digest_parts() for e in encoded))
        if token.key is not None:
            self._recall(tk, token, digest, done)
        refresh = False
        for _ in range(MAX_ROUTE_RETRIES):
            version, matcher = self._topics.matcher(tenant, refresh)
            reach = {t: matcher.match(t) for t in first}
            if not refresh and not all(reach.values()) and self._topics.version(tenant) != version:
                refresh = True  # as in publish: a pattern just added elsewhere must not be missed
                continue
            groups: dict[tuple[str, ...], list[int]] = {}
            for i, topic in enumerate(topics):
                if i not in done.stored and reach[topic]:
                    groups.setdefault(tuple(reach[topic]), []).append(i)
            try:
                self._admit(sum(len(positions) * self._destinations(tk, queues, refresh)
                                for queues, positions in groups.items()), admit)
                for queues, positions in groups.items():
                    args_tail, dedupe_ids = assembled([encoded[i] for i in positions])
                    call = RecordedCall(token, digest, positions_field(positions))
                    try:
                        sent = self._store(tk, [tk.queue(q) for q in queues], refresh, version, "t",
                                           [tk.topic_dedupe(t, d) for t, d in dedupe_ids], args_tail, quota_bytes,
                                           call)
                    except NotDurable as exc:
                        # Stored, not synced in time (its ids, when known): the other groups go on, and
                        # the publish answers as a send would, not_durable, once all are stored.
                        done.record(positions, exc.details.get("ids") or [], 0,
                                    self._destinations(tk, queues, refresh))
                        done.not_synced = done.not_synced or exc
                        continue
                    done.record(positions, sent.ids, sent.dropped, sent.destinations)
            except (StaleRoute, _StaleTopics, NotFound):
                refresh = True
                continue
            done.topics = {t: list(reach[t]) for t in sorted(reach)}
            done.copies = dict.fromkeys(done.topics, 0)
            for i in done.stored:
                done.copies[topics[i]] += done.destinations[i]
            if done.not_synced is not None:
                raise done.not_synced
            return done
        if len(set(topics)) == 1:
            raise Conflict("the queues attracting the topic kept changing during the publish; try again",
                           topic=topics[0])
        raise Conflict("the queues attracting the topics kept changing during the publish; try again")

    def _destinations(self, tk: k.TenantKeys, queues: Sequence[str], refresh: bool) -> int:
        """How many destinations a copy of a message sent to ``queues`` goes to: one a
        point-to-point queue, one a subscriber of a publish/subscribe queue (the routes' cache)."""
        total = 0
        for queue in queues:
            model, _, subs = self._routes.route(tk.tenant, queue, tk.queue(queue), refresh)
            total += 1 if model == QueueModel.POINT_TO_POINT.value else len(subs)
        return total

    def _admit(self, copies: int, admit: Admit | None) -> None:
        """Refuses, before anything is written, a request that would store more message copies than
        one request may (its work on the shared store must stay bounded whatever the tenant's
        queues multiply it by), then gives the copies to ``admit``."""
        most = self._shared.settings.max_copies_per_request
        if copies > most:
            raise TooLarge(f"this request would store {copies} message copies (its messages x the queues they reach "
                           f"x their subscribers) and one request stores at most {most} (max_copies_per_request): "
                           "send fewer messages a request", code="too_many_copies", copies=copies, max=most)
        if admit is not None:
            admit(copies)

    def _recall(self, tk: k.TenantKeys, token: RequestToken, digest: str, done: PublishedMany) -> None:
        """Marks in ``done`` what earlier tries of a publish with an Idempotency-Key stored, so this
        try stores only the rest, also where its messages group otherwise than theirs did (a queue
        attracting a topic was added in between). Refuses a key used for another body (409)."""
        record = self._shared.storage.call(self._shared.storage.client.hgetall, tk.request_record(token.token))
        stored_digest = record.pop(b"#b", None)
        if stored_digest is not None and stored_digest.decode() != digest:
            raise key_reused(token)
        for name, answer in record.items():
            field_name = name.decode()
            if field_name.startswith("p"):
                done.record(positions_of(field_name), *stored_answer(answer))

    def _store(self, tk: k.TenantKeys, targets: list[k.QueueKeys], refresh: bool, topics_version: str,
               marker_gen: str, dedupe_keys: list[str], args_tail: list[Any], quota_bytes: int,
               call: RecordedCall) -> Sent:
        keys = [tk.doc, tk.doc_props, tk.doc_refs, targets[0].config, tk.seq, tk.topic_patterns,
                tk.request_record(call.token.token)]
        plan = []
        for qk in targets:
            model, expected, subs = self._routes.route(tk.tenant, qk.name, qk, refresh)
            plan.append((qk, expected, [qk.destination()] if model == QueueModel.POINT_TO_POINT.value
                         else [*map(qk.destination, subs)]))
        destinations = sum(len(dests) for _, _, dests in plan)  # each message's, once the script checked the routes
        journal, errors = tk.send_journal_name(call.token.token, call.field), self._errors(targets, call)
        reservation = reservation_of(tk, journal, keys[6], call, plan, args_tail, errors, dedupe_keys, marker_gen)
        route_args: list[Any] = []
        reserved_as = reservation.name if reservation else journal  # the reservation's key names it
        for qk, expected, dests in plan:
            keys += [qk.config, qk.subscribers]
            if reservation is None:  # else the reservation reads the destinations, not the prepare
                keys += [key for d in dests for key in d.as_list()]
            route_args += [expected, len(dests), *(() if reservation else (d.member for d in dests))]
        upload, args_tail = upload_of(tk, journal, call.digest, args_tail, destinations,
                                      any(ORDERED in r for r in route_args[:1]))
        keys += [*dedupe_keys, tk.send_journal(journal), tk.send_journals, tk.pending_copies, tk.due, tk.oldest,
                 tk.marker_ledger, tk.usage, send_keys.send_staging(tk, journal, call.digest),
                 send_keys.journal_documents(tk, journal), send_keys.send_reservation(tk, reserved_as)]
        settings = self._shared.settings
        staged = journal if upload or reservation or chunked(int(args_tail[0]), destinations) else ""
        args = [topics_version, len(targets), round(settings.dedupe_window_s * 1000), args_tail[0], quota_bytes,
                marker_gen, call.field, call.digest, call.token.window_ms, staged, upload.size if upload else "",
                send_keys.reservation_name(reservation.name) if reservation else "", *route_args, *args_tail[1:]]
        storage = self._shared.storage
        sync = any(isinstance(r, str) and r.endswith("|sync") for r in route_args)
        synced: Any = None
        try:
            if sync and not staged:
                reply, synced = storage.run_durably("send", keys, args, errors, settings.sync_min_replicas,
                                                    settings.sync_timeout_ms, writes_once=True)
            else:
                reply = self._journals.prepare(upload, keys[6], call.field, tk.send_journal(journal),
                                               lambda: storage.run("send", keys, args, errors, writes_once=True),
                                               reservation)
            answered = True  # by this caller's own call, or its last step, which waited for the disk
            if int(reply[0]) in (JOURNAL_UNDER_WAY, PREPARED):
                done = self._journals.finish(tk, journal, keys[6])
                reply, synced, answered = [-1, done.answer], done.synced, done.answer is not None
            if not answered or (sync and synced is None):
                # Another caller (a retry, the maintenance) made the last step, or a chunked call was
                # answered whole (a repeat) without a wait: the call again answers from the record, and
                # on a sync queue waits for the disk, as any repeat does.
                if sync:
                    reply, synced = storage.run_durably("send", keys, args, errors, settings.sync_min_replicas,
                                                        settings.sync_timeout_ms, writes_once=True)
                else:
                    reply = storage.run("send", keys, args, errors, writes_once=True)
        except OutcomeUnknown as exc:
            raise outcome_unknown(exc, call.token) from None
        except _QuotaRefused:
            used = self._management.usage(tk.tenant)["stored_bytes"]
            raise QuotaExceeded(
                f"the tenant's disk quota is {quota_bytes} bytes and {used} are stored: "
                "this send would pass it; ack or delete messages first",
                limit=quota_bytes, used=used) from None
        if int(reply[0]) < 0:
            sent = Sent(*stored_answer(reply[1]))  # as the first try answered, whatever the routes are now
        else:
            sent = Sent(ids=[i.decode() for i in reply[1:]], dropped=int(reply[0]), destinations=destinations)
        if sync and (synced[0] < 1 or synced[1] < settings.sync_min_replicas):
            raise NotDurable(
                f"the send was stored but not synced to "
                f"{f'{settings.sync_min_replicas} replicas' if synced[0] else 'disk'} within "
                f"{settings.sync_timeout_ms} ms; send it again with the same dedupe_id, which is then safe",
                ids=sent.ids, synced_local=synced[0], synced_replicas=synced[1],
                min_replicas=settings.sync_min_replicas, timeout_ms=settings.sync_timeout_ms)
        return sent

    @staticmethod
    def _errors(targets: list[k.QueueKeys], call: RecordedCall) -> Errors:
        """What the send script's and its reservation's refusals raise."""
        return {"NOQUEUE": lambda _: queue_not_found(targets[0].name), "STALESUBS": lambda _: StaleRoute("stale"),
                "IDEMREUSED": lambda _: key_reused(call.token), "STALETOPICS": lambda _: _StaleTopics("stale"),
                "QUOTA": lambda _: _QuotaRefused("quota"), "STAGELOST": lambda _: UploadLost("lost"),
                "RESERVELOST": lambda _: ReservationLost("lost"), "QUEUEFULL": lambda words: queue_full_error(targets, words),
                "DELAYEXCLUSIVE": lambda words: InvalidInput(
                    f"queue {targets[int(words[0]) - 1].name} is exclusive: it delivers in send order, so it "
                    "takes no delayed message", field="delay_s", queue=targets[int(words[0]) - 1].name),
                "TOOBIG": lambda words: message_too_big_error(targets, words)}
