"""Chunked sends: a request whose copies would hold the store too long is stored in steps.

One script holds Valkey for every tenant while it runs; a send costs about 12 µs a copy, so a
request at ``max_copies_per_request`` (100,000 copies) in one script would stall every other
tenant's calls for over a second. A send or publish call whose copies pass :data:`CHUNK_COPIES`,
or whose destinations pass :data:`CHUNK_DESTINATIONS`, is therefore stored in steps, all or nothing
in outcome:

1. ``send.lua`` prepares it: every check a whole send makes (dedupe, sizes, the quota, every
   destination's limits), so a refusal still stores nothing; then the ids, dedupe markers,
   documents and the usage, each destination's copies reserved in the tenant's pending hash
   (which its limits count as held, so a racing send sees the room taken), and a journal holding
   what the copies are made from. Consumers see nothing yet.
2. ``send_apply.lua`` writes the documents' reference counts (a step of its own: at 10 documents
   a message they are a fifth of the first call), then makes the copies of the next destinations
   whose copies fit :data:`CHUNK_COPIES` (at most :data:`CHUNK_DESTINATIONS` of them), all of a
   destination's in one step, and moves the cursor; the last step writes the request's record and
   deletes the journal.

A call whose documents pass :data:`STAGE_DOCS` or :data:`STAGE_BYTES` is staged, even to one queue,
since writing them would hold its prepare too long: the request first uploads them in bounded steps
(``send_stage.lua``) into a hash of its own that expires after :data:`STAGE_TTL_MS` (a client that
dies mid-upload leaves nothing), then the prepare reads their sizes from the upload, checks
everything as above, and renames the upload to its journal's documents, in the one script, so a
refusal stores nothing (the caller deletes the upload at once, else it expires); the first steps
move the documents into the tenant's, a bounded part each, before the reference counts and copies.
A call to one exclusive or group-ordered queue alone is not staged (``routes.ORDERED``): its send
order comes before the step budget. A fan-out reaching such a queue among others is still stepped,
and a send to that queue made between its steps may be delivered before its message there.

A call to more destinations than :data:`RESERVE_DESTINATIONS` checks and reserves them in steps
first (``send_reserve.lua``, a bounded number of destinations a step): each step checks its
destinations' limits and routes and records them, with their reserved copies in the pending hash,
in a reservation, which the prepare renames to its journal; the prepare itself then reads no
destination. A refusal releases the reservation in steps (``send_release.lua``) before it is
answered, so a refused send has stored nothing once its caller hears of it; a reservation no
step touched for :data:`STALE_MS` is released by the maintenance. A destination is reserved for
the messages its first step found no repeats, each with its envelope's head at its longest; the
prepare finds the same messages new, or the reservation is made again (a marker came or went
between them). The steps that copy to a destination release what was reserved, not what they copied.

A reservation is named by its call's journal, body and destinations in order
(``send_keys.reservation_of_plan``): a retry goes on with one under way to the same destinations,
and one that read other routes reserves its own, whose prepare alone makes a journal.

Whoever finds a journal goes on with it: the request itself, a retry of it (the store's client,
or the sender with the same Idempotency-Key), or the maintenance, which finishes a journal left
untouched for :data:`STALE_MS` (a node died mid-request), so nothing is lost or left reserved.
Each step checks the cursor it was planned from, so two of them at once never copy twice.
Consumers may see a chunked publish land destination by destination, as any broker's fan-out.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

from atomq.defaults import DEFAULT_PRIORITY
from atomq.errors import AtomqError, StorageError
from atomq.platform.queues.request_records import RecordedCall
from atomq.platform.shared import ChunkBudget, Shared
from atomq.platform.store import keys as k
from atomq.platform.store import send_keys

CHUNK_COPIES = 1_500
"""The most message copies one step of a send makes. A copy costs the store 10 to 12 µs of its one
thread (bench/request_bounds.py), so a step holds it some 15 to 20 ms, under the 50 ms one-tenant bound
with room for the dearer shapes (priorities, expiries, last values, overflow drops). A call of at
most this many copies runs as one script, as before chunking; so does a call to one destination,
whose copies a request's size bounds (``max_messages_per_request``, 1,000)."""

CHUNK_DESTINATIONS = 100
"""The most destinations one step of a send copies to. A destination costs a step some 14 store
calls whatever its copies (its queue's config, its subscription, its pending counts, its bytes, the
oldest index...) and its 18 keys, some 150 to 250 µs of the store's thread: a publish of one message
to 100,000 destinations in steps of 1,500 destinations held it some 0.3 to 0.6 s a
step (bench/request_bounds.py, publish_100000_destinations). A call to more destinations than this
is stored in steps too, whatever its copies."""

RESERVE_DESTINATIONS = 100
"""A call to more destinations than this reserves them in steps of this many before its prepare,
which no longer reads them: the prepare of one message to 100,000 destinations, two store calls and
17 keys a destination, held the store 3.6 to 5.7 s (bench/request_bounds.py,
publish_100000_destinations). Such a call is stored in steps whatever :data:`CHUNK_DESTINATIONS` is:
its prepare, given no destination, could copy to none."""

RELEASE_DESTINATIONS = 1_000
"""The most destinations one step of a reservation's release gives back (two store calls each)."""

HEAD_MOST = 19
"""The most bytes of a stored envelope's head (``make_head``: "<documents>,<priority>,<expiry ms>")
besides its document count's digits: a priority digit, an expiry of up to 15 digits, two commas and
the bar after the head."""

STALE_MS = 5_000
"""A journal no step touched for this long is finished by the maintenance: its request died."""

STAGE_DOCS = 2_000
"""A call of more documents than this is staged (uploaded in steps of at most this many, and moved
into the tenant's documents in steps of about as many): writing 10,000 documents in one script (1,000
messages of 10) held the store some 150 ms."""

STAGE_BYTES = 512 * 1024
"""A call whose documents' data and properties pass this many bytes is staged; a step of its upload
or of its documents' move carries about this many (a message's documents move together)."""

STAGE_TTL_MS = 60_000
"""How long an upload outlives its last step: a client that died mid-upload leaves nothing after it."""


class UploadLost(AtomqError):
    """The prepare found the upload incomplete: it expired between its steps and the prepare."""


class ReservationLost(AtomqError):
    """The prepare found the reservation released (the maintenance took it for a dead request's)."""


Errors = dict[str, Callable[[list[str]], AtomqError]]


@dataclass(frozen=True)
class Reservation:
    """A wide send's destinations, to check and reserve in steps before its prepare."""

    tk: k.TenantKeys
    journal: str
    """The call's journal's name."""
    name: str
    """The reservation's own (``send_keys.reservation_of_plan``): the journal's, its body's and its destinations'."""
    record: str
    call_field: str
    digest: str
    messages: list[str]
    """Each message's "<dedupe key index>,<priority>,<bytes at most in a destination>": its first step
    reserves for the messages not repeats then (send_reserve.lua)."""
    dedupe: list[str]
    """The call's de-duplication markers, which its messages' dedupe key indexes name."""
    marker_gen: str
    """The generation its markers belong to (send.lua's ARGV[6])."""
    destinations: list[tuple[int, str, k.QueueKeys, k.DestinationKeys]]
    """Each destination's queue index in the call, the route its caller read, its queue's keys and its keys."""
    errors: Errors


def reservation_of(tk: k.TenantKeys, journal: str, record: str, call: RecordedCall,
                   plan: list[tuple[k.QueueKeys, str, list[k.DestinationKeys]]], args_tail: list[Any],
                   errors: Errors, dedupe: list[str], marker_gen: str) -> Reservation | None:
    """The reservation of a call to more than :data:`RESERVE_DESTINATIONS` destinations (None for
    another), from the routes its caller read (``plan``: each queue's keys, route and destinations),
    its messages as ``send.lua`` takes them (``args_tail``, documents included) and their markers."""
    destinations = [(qi, route, qk, d) for qi, (qk, route, dests) in enumerate(plan, 1) for d in dests]
    if len(destinations) <= RESERVE_DESTINATIONS:
        return None
    messages, pos = [], 1
    for _ in range(int(args_tail[0])):
        # A message of the defaults gives its dedupe key's index alone; its envelope's head is
        # counted at its longest.
        timing, ndocs = str(args_tail[pos]).split(","), int(args_tail[pos + 2])
        size = len(str(ndocs)) + HEAD_MOST + _length(args_tail[pos + 1])
        size += sum(map(_length, args_tail[pos + 3:pos + 3 + 2 * ndocs]))
        messages.append(f"{timing[0]},{timing[1] if len(timing) > 1 else DEFAULT_PRIORITY},{size}")
        pos += 3 + 2 * ndocs
    name = send_keys.reservation_of_plan(journal, call.digest,
                                         [f"{qi}|{route}|{d.member}" for qi, route, _, d in destinations])
    return Reservation(tk, journal, name, record, call.field, call.digest, messages, dedupe, marker_gen, destinations,
                       errors)


def _length(value: str | bytes) -> int:
    """A script argument's length as Lua's ``#`` counts it: in bytes."""
    return len(value.encode("utf-8")) if isinstance(value, str) else len(value)


@dataclass(frozen=True)
class Upload:
    """A staged call's documents, as the upload's fields in order (``send_stage.lua``)."""

    key: str
    fields: list[tuple[str, Any]]
    messages: int

    @property
    def size(self) -> int:
        """The fields the upload holds once done (with one of sizes a message): what the prepare
        expects to find."""
        return len(self.fields) + self.messages


def upload_of(tk: k.TenantKeys, journal: str, digest: str, args_tail: list[Any],
              destinations: int, first_ordered: bool) -> tuple[Upload | None, list[Any]]:
    """The upload of a call's documents when they pass :data:`STAGE_DOCS` or :data:`STAGE_BYTES`
    (None otherwise), and the call's arguments (``send.lua``'s from its message count on), without
    the documents' data and properties when they are uploaded. A call to one exclusive or
    group-ordered queue alone (``first_ordered`` with one destination) is not staged: its send order
    comes before the step budget (``routes.ORDERED``), and one script stores it whole."""
    docs, size, pos = 0, 0, 1
    for _ in range(int(args_tail[0])):
        ndocs = int(args_tail[pos + 2])
        docs += ndocs
        size += sum(len(a) for a in args_tail[pos + 3:pos + 3 + 2 * ndocs])
        pos += 3 + 2 * ndocs
    if destinations == 0 or (destinations == 1 and first_ordered) or (docs <= STAGE_DOCS and size <= STAGE_BYTES):
        return None, args_tail
    fields: list[tuple[str, Any]] = []
    bare, pos = [args_tail[0]], 1
    for m in range(1, int(args_tail[0]) + 1):
        bare += args_tail[pos:pos + 3]
        for d in range(1, int(args_tail[pos + 2]) + 1):
            data, props = args_tail[pos + 1 + 2 * d], args_tail[pos + 2 + 2 * d]
            fields.append((f"{m}.{d}", data))
            if len(props):
                fields.append((f"{m}.{d}p", props))
        pos += 3 + 2 * int(args_tail[pos + 2])
    return Upload(send_keys.send_staging(tk, journal, digest), fields, int(args_tail[0])), bare


def chunked(messages: int, destinations: int) -> bool:
    """Whether a call storing ``messages`` in ``destinations`` is stored in steps."""
    return destinations > 1 and (messages * destinations > CHUNK_COPIES or destinations > CHUNK_DESTINATIONS)


@dataclass(frozen=True)
class Finished:
    """How a journal ended for the caller that went on with it: the answer the last step wrote in
    the request's record (None when another caller finished it), and, when this caller ran the last
    step of a send that waits for the disk, WAITAOF's ``[local, replicas]`` acknowledgements."""

    answer: bytes | None
    synced: list[int] | None = None


class SendJournals:
    """Runs the steps of chunked sends, for their requests and for the maintenance."""

    def __init__(self, shared: Shared) -> None:
        self._shared = shared

    def prepare(self, upload: Upload | None, record: str, call_field: str, journal: str,
                run: Callable[[], Any], reservation: Reservation | None = None) -> Any:
        """Runs the prepare ``run`` of a call, after reserving its destinations when it is wide and
        uploading its documents when it is staged; then releases what is left of the reservation
        and deletes what is left of the upload, whatever it answered (a refusal stores nothing).
        A call its record or journal already holds (a retry) uploads nothing: the prepare answers it."""
        if upload is None and reservation is None:
            return run()
        storage, client = self._shared.storage, self._shared.client
        try:
            for again in (False, True):
                if reservation is not None:
                    self._reserve(reservation)
                if upload is not None and not (storage.call(client.hexists, record, call_field)
                                               or storage.call(client.exists, journal)):
                    self._upload(upload)
                try:
                    return run()
                except (UploadLost, ReservationLost) as lost:
                    if again:
                        raise StorageError("the request's upload or reservation kept expiring; try again") from None
                    if isinstance(lost, ReservationLost) and reservation is not None:
                        # Released meanwhile, or made for other messages than the prepare found new
                        # (a marker came or went): it is made again, from the start.
                        self.release(reservation.tk, reservation.name)
        finally:
            # The prepare's own answer or error is the caller's: an upload left expires, and the
            # maintenance gives back a reservation left.
            with contextlib.suppress(StorageError):
                if upload is not None:
                    storage.call(client.delete, upload.key)
            with contextlib.suppress(StorageError):
                if reservation is not None:
                    self.release(reservation.tk, reservation.name)

    def _reserve(self, reservation: Reservation) -> None:
        """Checks and reserves the destinations in steps of :data:`RESERVE_DESTINATIONS`, from where
        the reservation is (a retry's goes on with it). A refusal is raised as it is: :meth:`prepare`
        gives the reservation back before its caller hears of it."""
        r, tk = reservation, reservation.tk
        done, total = 0, len(r.destinations)
        while done < total:
            step = r.destinations[done:done + RESERVE_DESTINATIONS]
            keys = [send_keys.send_reservation(tk, r.name), tk.send_journal(r.journal), r.record, tk.send_journals,
                    tk.pending_copies]
            messages = r.messages if done == 0 else []  # what a reservation's first step reserves for
            args: list[Any] = [done, len(step), total, r.digest, send_keys.reservation_name(r.name), r.call_field,
                               r.marker_gen, len(messages), *messages]
            for qi, route, qk, d in step:
                keys += [qk.config, *d.as_list()]
                args += [qi, route, d.member]
            keys += r.dedupe if messages else []
            reply = self._shared.storage.run("send_reserve", keys, args, r.errors, writes_once=True)
            kind = reply[0].decode()
            if kind == "j":
                return
            if kind == "x":
                self.release(tk, r.name)  # help the release under way, then start again
                done = 0
            else:
                done = int(reply[1])

    def release(self, tk: k.TenantKeys, reservation: str, budget: ChunkBudget | None = None) -> None:
        """Gives back, in steps, what reservation ``reservation`` (its name, ``Reservation.name``) holds,
        and deletes it (nothing once a prepare made it its journal), or as much as ``budget`` lets."""
        keys = [send_keys.send_reservation(tk, reservation), tk.send_journals, tk.pending_copies]
        while budget is None or budget.take():
            if not self._shared.storage.run("send_release", keys,
                                            [RELEASE_DESTINATIONS, send_keys.reservation_name(reservation)],
                                            writes_once=True):
                return

    def _upload(self, upload: Upload) -> None:
        """Uploads the fields in steps of whole messages, each step's ending with the message that
        takes it to :data:`STAGE_DOCS` documents or :data:`STAGE_BYTES` bytes (``send_stage.lua``)."""
        part: list[Any] = []
        docs = size = 0
        for i, (name, value) in enumerate(upload.fields):
            part += [name, value]
            docs, size = docs + (not name.endswith("p")), size + len(value)
            last = i + 1 == len(upload.fields)
            if last or ((docs >= STAGE_DOCS or size >= STAGE_BYTES)
                        and name.split(".", 1)[0] != upload.fields[i + 1][0].split(".", 1)[0]):
                self._shared.storage.run("send_stage", [upload.key], [STAGE_TTL_MS, *part])
                part, docs, size = [], 0, 0

    def finish(self, tk: k.TenantKeys, name: str, record: str, budget: ChunkBudget | None = None) -> Finished:
        """Runs the steps of journal ``name`` (its request's record is ``record``) until it is done,
        or until ``budget`` runs out (the journal then waits for the next round)."""
        storage, client = self._shared.storage, self._shared.client
        journal = tk.send_journal(name)
        settings = self._shared.settings
        while True:
            head = storage.call(client.hmget, journal, "c", "n", "nf", "sy", "dc", "dm")
            if head[0] is None:
                return Finished(None)
            done, total, fresh, sync = int(head[0]), int(head[1]), int(head[2]), head[3] == b"1"
            # The documents' move (a staged call's) and their reference counts: steps of their own.
            refs_owed = head[4] is not None or head[5] is not None
            per_step = max(1, min(CHUNK_COPIES // fresh, CHUNK_DESTINATIONS))
            while done < total:
                if budget is not None and not budget.take():
                    return Finished(None)
                step = 0 if refs_owed else min(per_step, total - done)
                # The step's own destinations only: a read of them all (100,000) held the store 80 ms.
                members = storage.call(client.hmget, journal, [f"d{i}" for i in range(done + 1, done + step + 1)]) \
                    if step else []
                if None in members:
                    break  # finished meanwhile: read the journal again
                destinations: list[str] = []
                for raw in members:
                    qk, d = tk.destination_named(raw.decode().split("|", 2)[2])
                    destinations += [qk.config, qk.subscribers, *d.as_list()]
                cfg = destinations[0] if destinations else tk.usage  # a step of no destination reads none
                keys = [tk.doc, tk.doc_props, tk.doc_refs, cfg, journal, tk.send_journals, tk.pending_copies,
                        record, tk.usage, tk.due, tk.oldest, tk.marker_ledger, send_keys.journal_documents(tk, name),
                        *destinations]
                args = [done, step, name, STAGE_DOCS, STAGE_BYTES]
                synced = None
                if sync and done + step == total:
                    reply, synced = storage.run_durably("send_apply", keys, args, None, settings.sync_min_replicas,
                                                        settings.sync_timeout_ms, writes_once=True)
                else:
                    reply = storage.run("send_apply", keys, args, writes_once=True)
                kind = reply[0].decode()
                if kind == "g":
                    return Finished(None)
                if kind == "d":
                    return Finished(reply[1], synced)
                if kind == "m":
                    break  # another caller stepped: read the journal again
                done = int(reply[1])
                refs_owed = len(reply) > 2 and int(reply[2]) == 1

    def resume(self, tk: k.TenantKeys, name: str, budget: ChunkBudget) -> int:
        """Goes on, within ``budget``, with a journal the maintenance found untouched (its request's
        node died mid-request), or releases such a reservation; returns 1 when this finished a
        journal, for the round's totals."""
        if name.startswith(send_keys.RESERVATION_NAME_PREFIX):
            self.release(tk, name[len(send_keys.RESERVATION_NAME_PREFIX):], budget)
            return 0
        record = self._shared.storage.call(self._shared.client.hget, tk.send_journal(name), "rk")
        if record is None:
            return 0  # finished meanwhile
        return 1 if self.finish(tk, name, record.decode(), budget).answer is not None else 0
