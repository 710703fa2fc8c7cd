"""Chunked sends: a request whose copies would hold the store too long is stored in steps.

One script holds Valkey for every tenant while it runs; a send costs about 12 µs a copy, so a
request at ``max_copies_per_request`` (100,000 copies) in one script would stall every other
tenant's calls for over a second. A send or publish call whose copies pass :data:`CHUNK_COPIES`
is therefore stored in steps, all or nothing in outcome:

1. ``send.lua`` prepares it: every check a whole send makes (dedupe, sizes, the quota, every
   destination's limits), so a refusal still stores nothing; then the ids, dedupe markers,
   documents and the usage, each destination's copies reserved in the tenant's pending hash
   (which its limits count as held, so a racing send sees the room taken), and a journal holding
   what the copies are made from. Consumers see nothing yet.
2. ``send_apply.lua`` writes the documents' reference counts (a step of its own: at 10 documents
   a message they are a fifth of the first call), then makes the copies of the next destinations
   whose copies fit :data:`CHUNK_COPIES`, all of a destination's in one step, and moves the
   cursor; the last step writes the request's record and deletes the journal.

Whoever finds a journal goes on with it: the request itself, a retry of it (the store's client,
or the sender with the same Idempotency-Key), or the maintenance, which finishes a journal left
untouched for :data:`STALE_MS` (a node died mid-request), so nothing is lost or left reserved.
Each step checks the cursor it was planned from, so two of them at once never copy twice.
Consumers may see a chunked publish land destination by destination, as any broker's fan-out.
"""

from __future__ import annotations

from dataclasses import dataclass
from atomq.platform.shared import ChunkBudget, Shared
from atomq.platform.store import keys as k

CHUNK_COPIES = 3_000
"""The most message copies one step of a send makes. A copy costs the store 10 to 12 µs of its one
thread (bench/request_bounds.py), so a step holds it some 35 ms, under the 50 ms one-tenant bound
with room for the dearer shapes (priorities, expiries, last values, overflow drops). A call of at
most this many copies runs as one script, as before chunking; so does a call to one destination,
whose copies a request's size bounds (``max_messages_per_request``, 1,000)."""

STALE_MS = 5_000
"""A journal no step touched for this long is finished by the maintenance: its request died."""


def chunked(messages: int, destinations: int) -> bool:
    """Whether a call storing ``messages`` in ``destinations`` is stored in steps."""
    return destinations > 1 and messages * destinations > CHUNK_COPIES


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

    def finish(self, tk: k.TenantKeys, name: str, record: str, budget: ChunkBudget | None = None) -> Finished:
        """Runs the steps of journal ``name`` (its request's record is ``record``) until it is done,
        or until ``budget`` runs out (the journal then waits for the next round)."""
        storage, client = self._shared.storage, self._shared.client
        journal = tk.send_journal(name)
        settings = self._shared.settings
        while True:
            head = storage.call(client.hmget, journal, "c", "n", "nf", "sy", "dc")
            if head[0] is None:
                return Finished(None)
            done, total, fresh, sync = int(head[0]), int(head[1]), int(head[2]), head[3] == b"1"
            refs_owed = head[4] is not None  # the documents' reference counts: a step of their own
            members = storage.call(client.hmget, journal, [f"d{i}" for i in range(done + 1, total + 1)])
            if None in members:
                continue  # finished between the two reads
            per_step = max(1, CHUNK_COPIES // fresh)
            while done < total:
                if budget is not None and not budget.take():
                    return Finished(None)
                step = 0 if refs_owed else min(per_step, total - done)
                destinations: list[str] = []
                for raw in members[:step]:
                    qk, d = tk.destination_named(raw.decode().split("|", 2)[2])
                    destinations += [qk.config, qk.subscribers, *d.as_list()]
                cfg = destinations[0] if destinations else tk.usage  # a step of no destination reads none
                keys = [tk.doc, tk.doc_props, tk.doc_refs, cfg, journal, tk.send_journals,
                        tk.pending_copies, record, tk.usage, tk.due, tk.oldest, tk.marker_ledger, *destinations]
                args = [done, step, name]
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
                done, members, refs_owed = int(reply[1]), members[step:], False

    def resume(self, tk: k.TenantKeys, name: str, budget: ChunkBudget) -> int:
        """Goes on, within ``budget``, with a journal the maintenance found untouched (its request's
        node died mid-request); returns 1 when this finished it, for the round's totals."""
        record = self._shared.storage.call(self._shared.client.hget, tk.send_journal(name), "rk")
        if record is None:
            return 0  # finished meanwhile
        return 1 if self.finish(tk, name, record.decode(), budget).answer is not None else 0
