"""Every Redis key atomq uses, built in this one module.

The layout, key by key, is docs/keyspace.md: a new key gets its line there. Every key of a
tenant starts with ``aq:{T}:``: the hash tag keeps a tenant in one Redis Cluster slot, so one
Lua script may touch any of its keys. Names are validated so none can hold ``{``, ``}`` or ``:``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

PREFIX = "aq"
FORMAT_VERSION_KEY = f"{PREFIX}:format"
FORMAT_MIGRATION_KEY = f"{PREFIX}:format:migrating"
"""Held (with an expiry) by the one node that migrates older data; the others wait for it."""
TENANTS_KEY = f"{PREFIX}:tenants"
TENANT_NAMES_KEY = f"{PREFIX}:tenants:names"
"""Hash: a tenant's name -> its id, so names are unique (``TenantStore``)."""
TENANT_NAMES_INDEXED_KEY = f"{PREFIX}:tenants:names:indexed"
"""Set once the index of names was built from the records of the tenants made before it."""


def tenant_prefix(tenant: str) -> str:
    """The prefix of all of a tenant's keys; ``{tenant}`` is its cluster hash tag."""
    return f"{PREFIX}:{{{tenant}}}"


@dataclass(frozen=True)
class TenantKeys:
    """The fixed per-tenant keys."""

    tenant: str

    @property
    def _p(self) -> str:
        return tenant_prefix(self.tenant)

    @property
    def seq(self) -> str:
        return f"{self._p}:seq"

    @property
    def queues(self) -> str:
        return f"{self._p}:queues"

    @property
    def deleting(self) -> str:
        return f"{self._p}:deleting"

    @property
    def doc(self) -> str:
        return f"{self._p}:doc"

    @property
    def doc_props(self) -> str:
        return f"{self._p}:docp"

    @property
    def doc_refs(self) -> str:
        return f"{self._p}:docr"

    @property
    def usage(self) -> str:
        return f"{self._p}:usage"

    @property
    def marker_ledger(self) -> str:
        return f"{self._p}:ddbytes"

    @property
    def due(self) -> str:
        return f"{self._p}:due"

    @property
    def topic_patterns(self) -> str:
        """Hash queue -> the JSON list of topic patterns it attracts; field ``#v`` (no queue
        name starts with ``#``) the version every change of them bumps."""
        return f"{self._p}:topics"

    @property
    def topic_changes(self) -> str:
        """List, newest first, of ``<version>:<queue>``: the last changes of the topic patterns (the
        queue whose patterns changed, and the version it made), from which a node updates a matcher
        a few versions behind instead of rebuilding it (``atomq.platform.queues.topic_index``)."""
        return f"{self._p}:topics:log"

    def topic_dedupe(self, topic: str, dedupe_id: str) -> str:
        """The de-duplication marker of a publish: per topic, since the queues it reaches may change."""
        digest = hashlib.sha1(f"{topic}\0{dedupe_id}".encode("utf-8")).hexdigest()
        return f"{self._p}:tdd:{digest}"

    def request_record(self, token: str) -> str:
        """What a send stored, found again by its request's token (``sending.RequestToken``): hashed,
        since a client's Idempotency-Key may hold any printable character."""
        return f"{self._p}:req:{hashlib.sha1(token.encode('utf-8')).hexdigest()}"

    def send_journal_name(self, token: str, call_field: str) -> str:
        """A chunked send's journal's name in :attr:`send_journals`: one a script call of a request
        (its token and its field in the request's record), hashed as :meth:`request_record` is."""
        return hashlib.sha1(f"{token}\0{call_field}".encode("utf-8")).hexdigest()

    def send_journal(self, name: str) -> str:
        """What a chunked send's steps make its copies from (``send_journal.SendJournals``), by
        its name in :attr:`send_journals`."""
        return f"{self._p}:jr:{name}"

    @property
    def send_journals(self) -> str:
        """Sorted set: the chunked sends under way, by journal name, scored by when one last
        stepped (ms): the maintenance finishes those left untouched."""
        return f"{self._p}:journals"

    @property
    def pending_copies(self) -> str:
        """Hash ``<destination member>|<queue generation>`` -> the copies chunked sends under way
        still owe the destination, and ``...|b`` -> their bytes: what its limits count as held."""
        return f"{self._p}:pending"

    @property
    def oldest(self) -> str:
        return f"{self._p}:oldest"

    def move_tasks(self, due: bool = False) -> str:
        """Move tasks' records by id (hash), or with ``due`` when each one's next step is (sorted set)."""
        return f"{self._p}:moves:due" if due else f"{self._p}:moves"

    def destination_named(self, member: str) -> tuple[QueueKeys, DestinationKeys]:
        """The destination a due index names (see :attr:`DestinationKeys.member`)."""
        queue, _, subscriber = member.partition("/")
        qk = self.queue(queue)
        return qk, qk.destination(subscriber or None)

    @property
    def refusals(self) -> str:
        return f"{self._p}:refused"

    def queue(self, queue: str) -> QueueKeys:
        return QueueKeys(self, queue)

    def removed_destination(self, removal_id: str, index: int) -> DestinationKeys:
        """Where destination ``index`` of removal ``removal_id`` keeps its keys until dropped."""
        return DestinationKeys(f"{self._p}:gone:{removal_id}:d{index}")

    def all_keys_pattern(self) -> str:
        """A SCAN pattern matching every key of this tenant (used by removal and audits)."""
        return f"{PREFIX}:{{{self.tenant}}}:*"


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue component."""

    tenant_keys: TenantKeys
    name: str

    @property
    def _p(self) -> str:
        return f"{self.tenant_keys._p}:q:{self.name}"

    @property
    def config(self) -> str:
        return f"{self._p}:cfg"

    @property
    def subscribers(self) -> str:
        return f"{self._p}:subs"

    def dedupe(self, dedupe_id: str) -> str:
        """The marker of one de-duplication id; hashed so any string is a safe key part."""
        digest = hashlib.sha1(dedupe_id.encode("utf-8")).hexdigest()
        return f"{self._p}:dd:{digest}"

    def destination(self, subscriber: str | None = None) -> DestinationKeys:
        if subscriber is None:
            return DestinationKeys(self._p, self.name)
        return DestinationKeys(f"{self._p}:s:{subscriber}", f"{self.name}/{subscriber}")


@dataclass(frozen=True)
class DestinationKeys:
    """The keys of one destination: a point-to-point queue or one subscriber.

    ``member`` names it in the tenant's due indexes (``Q``, or ``Q/S``: names hold no
    ``/``); a removed destination, drained in the background, has none.
    """

    base: str
    member: str = ""

    @property
    def ready(self) -> str:
        return f"{self.base}:ready"

    @property
    def all(self) -> str:
        return f"{self.base}:all"

    @property
    def msg(self) -> str:
        return f"{self.base}:msg"

    @property
    def state(self) -> str:
        return f"{self.base}:state"

    @property
    def inflight(self) -> str:
        return f"{self.base}:inflight"

    @property
    def sched(self) -> str:
        return f"{self.base}:sched"

    @property
    def dlq(self) -> str:
        return f"{self.base}:dlq"

    @property
    def ordered(self) -> str:
        """Ready messages that are not on the stream's fast path (another priority than the
        default, or a redelivery), scored by priority then send order."""
        return f"{self.base}:rz"

    @property
    def wake(self) -> str:
        """A one-entry stream a blocked get also waits on: an entry into ``ordered`` adds no
        stream entry to ``ready``, so it nudges this one."""
        return f"{self.base}:wake"

    @property
    def expiry(self) -> str:
        return f"{self.base}:exp"

    @property
    def last_values(self) -> str:
        """A last-value queue's current message per key (field ``k:<key>`` -> id) and each
        message's key (``i:<id>`` -> ``=<key>``, or ``x<key>`` once superseded in flight)."""
        return f"{self.base}:lv"

    @property
    def consumers(self) -> str:
        """An exclusive queue's consumers (name -> ``<first call ms>|<last call ms>``) and, in
        field ``#active``, the one that gets its messages."""
        return f"{self.base}:cons"

    @property
    def held(self) -> str:
        """The bytes of the copies the destination holds that are neither acked nor dead (the
        envelope and the documents' data and properties of each): what ``max_bytes`` holds."""
        return f"{self.base}:held"

    @property
    def delayed(self) -> str:
        """How many copies wait out their send's delay (in ``sched`` with no delivery yet): the
        delayed count of queue info and metrics, kept by the scripts that add and take them."""
        return f"{self.base}:delayed"

    @property
    def groups(self) -> str:
        """A group-ordered queue's groups that have a message out (ready, in flight or waiting
        out a redelivery delay): group -> that message's id, the group's head."""
        return f"{self.base}:grp"

    @property
    def group_waiting(self) -> str:
        """The messages of those groups that wait behind their group's head: a sorted set of score 0,
        members ``<group>\\0<16-digit place>|<id>``, so one group's are a lexical range in the order
        they arrived (the place: the send's sequence number, or a delayed copy's when it fell due)."""
        return f"{self.base}:gw"

    def as_list(self) -> list[str]:
        """The keys in the order every script expects them (``dest_at`` in the scripts' prelude)."""
        return [self.ready, self.all, self.msg, self.state, self.inflight, self.sched, self.dlq,
                self.ordered, self.wake, self.expiry, self.last_values, self.consumers, self.held, self.delayed,
                self.groups, self.group_waiting]


DEST_KEY_COUNT = 16


SERVER_SETTINGS_KEY = f"{PREFIX}:server"
SERVER_RESERVATIONS_KEY = f"{PREFIX}:server:reserved"
"""Hash ``<100 ms bucket>:m`` / ``:b`` -> message copies / bytes sends reserved under the server's limits
(``atomq.platform.guards.server_limits``)."""
NODES_SETUP_KEY = f"{PREFIX}:nodes:setup"
"""What every node on the store must share (``atomq.node.shared_setup``): ``owner`` -> the owner key's
SHA-256, ``rq`` -> the identity of the rq Redis."""
RQ_IDENTITY_KEY = f"{PREFIX}:rq:identity"
"""In the rq Redis (which may be another server): a random id naming it."""
MEMORY_STATE_KEY = f"{PREFIX}:{{memory}}:state"
"""The memory state the nodes last recorded (``state``) and how often it changed to each (``n:<state>``);
one hash tag with the history, which the same script writes."""
MEMORY_HISTORY_KEY = f"{PREFIX}:{{memory}}:history"
OVERVIEW_LATEST_KEY = f"{PREFIX}:{{overview}}:latest"
"""The platform's last sample (``atomq.platform.watch.overview``): every tenant's figures, as JSON."""
OVERVIEW_PREVIOUS_KEY = f"{PREFIX}:{{overview}}:previous"
"""The sample before it, which the rates of each tenant are reckoned against."""
OVERVIEW_HISTORY_KEY = f"{PREFIX}:{{overview}}:history"
"""List, newest first: the platform's totals of each sample over the last hour, as JSON."""
METRICS_TENANT_FIGURES_KEY = f"{PREFIX}:metrics:tenants"
"""Hash: ``text`` -> the newest build of the tenants' metric families (Prometheus text), ``started_at`` ->
when its read began (``atomq.platform.watch.metrics_builds``)."""
NODES_KEY = f"{PREFIX}:nodes"
"""Hash: node id -> the node's record (address, version, start, workers), which it rewrites every few
seconds (``atomq.platform.watch.nodes``)."""


def node_rate_window(node_id: str) -> str:
    """A node's own window on sends (the node's limit counts per node: docs/concepts.md, "Rate limits")."""
    return f"{PREFIX}:rl:node:{node_id}"


def failed_key_checks(node_id: str, address: str, key_id: str) -> str:
    """The count of failed checks of one key id (``key_checks.guessed_key_id``) from one client
    address (IPv4 or IPv6) through one node."""
    return f"{PREFIX}:keyfail:{node_id}:{address}|{key_id}"


def tenant_rate_window(tenant: str, node_id: str) -> str:
    """A tenant's window on sends through one node, in the tenant's slot."""
    return f"{tenant_prefix(tenant)}:rl:{node_id}"


def lease_key(name: str) -> str:
    """The key of lease ``name`` (work done once across all nodes)."""
    return f"{PREFIX}:lease:{name}"


LEGACY_API_KEYS_KEY = f"{PREFIX}:apikeys"
"""Format 4 and before: every API key's entry in one hash, on one cluster slot (one shard's failover
stopped every tenant's keys). Moved into the shards of ``api_key_table`` by ``TenantStore``."""


def api_key_table(key_id: str) -> str:
    """The hash that holds API key ``key_id``'s entry.

    A key id of 28 hex characters begins with its tenant's 12 (``atomq.tenants.api_keys``): its
    entry is in the tenant's own slot, so checking the key reads the primary that holds the tenant's
    data and no other, and another primary's failover does not stop it. Ids of 16 random hex (keys
    issued before format 6) are in one of 256 shared hashes, by their first two characters, each its
    own hash tag, so those entries spread over a cluster's slots."""
    if len(key_id) == 28:
        return f"{tenant_prefix('t_' + key_id[:12])}:apikeys:entries"
    return f"{PREFIX}:apikeys:{{{key_id[:2]}}}"


def sqs_secret_table(key_id: str) -> str:
    """The hash that holds API key ``key_id``'s SQS secret access key (``atomq.tenants.sqs_keys``):
    beside the key's entry, in the same slot (``api_key_table``), so one script reads both."""
    if len(key_id) == 28:
        return f"{tenant_prefix('t_' + key_id[:12])}:apikeys:sqs"
    return f"{PREFIX}:apikeys:{{{key_id[:2]}}}:sqs"


SQS_ACCOUNTS_KEY = f"{PREFIX}:sqs:accounts"
"""Hash: SQS account id (12 digits) -> the tenant id it was issued to. Never emptied, so no account
id is issued twice, even after its tenant's removal (a stale queue URL names no other tenant's queue)."""

ISSUED_TENANT_IDS_KEY = f"{PREFIX}:tenants:issued"


def tenant_record(tenant: str) -> str:
    """The hash that holds a tenant account's fields."""
    return f"{tenant_prefix(tenant)}:tenant"


def tenant_api_keys(tenant: str) -> str:
    """The set of a tenant's API key ids."""
    return f"{tenant_prefix(tenant)}:apikeys"


MAINTENANCE_LEASE = "maintenance"
"""The lease (see :func:`lease_key`) of the maintenance loop; its holder's node also exports the
figures Redis holds in ``/metrics``. Held as ``<node id>:<pid>``."""


def stream_consumer(tenant: str, queue: str, subscriber: str | None, consumer: str) -> str:
    """The planned, not yet committed batches of a streaming consumer (a Spark query) of a queue."""
    return f"{tenant_prefix(tenant)}:st:{queue}:{subscriber or ''}:{consumer}"


def dashboard_session(session_id: str) -> str:
    """A dashboard session's record; hashed, so reading Redis gives no cookie that signs in."""
    return f"{PREFIX}:dash:{hashlib.sha256(session_id.encode('utf-8')).hexdigest()}"


REQUEST_LATENCY_KEY = f"{PREFIX}:metrics:latency"
"""Hash of the API's request latency histogram, summed over every process of every node
(fields ``<tenant>|<method>|<route>|<bucket index, sum or count>``; see ``atomq.platform.watch.request_latency``)."""

STORE_SIZES_KEY = f"{PREFIX}:server:stores"
TEMPORARY_KEY_PATTERNS = (
    f"{PREFIX}:rl:node:*",  # node rate windows (node_rate_window)
    f"{PREFIX}:keyfail:*",  # failed key checks (failed_key_checks)
    f"{PREFIX}:{{*}}:rl:*",  # tenant rate windows (tenant_rate_window)
    f"{PREFIX}:{{*}}:st:*",  # streaming consumers' planned batches (stream_consumer)
    f"{PREFIX}:dash:*",  # dashboard sessions (dashboard_session)
)
"""SCAN patterns of the temporary keys that no index names."""
