"""Every default and limit of atomq, once, each with why it has its value.

The settings dataclasses (``NodeConfig``, ``QueueSettings``,
``ServerSettings``), the API's schemas and the command line's options read
their defaults and bounds from here, so ``--help``, the OpenAPI document and
the code cannot disagree. A ``*_RANGE`` is (least, most), both allowed.
Constants that only tune one module's inner workings (back-offs, lease times,
how many keys a scan reads at once) stay in that module.
"""

from __future__ import annotations

_DAY_S = 24 * 3600
_KIB = 1024
_MIB = 1024 * 1024

# The main node (``atomq serve``) and where its clients look for it.

HOST = "127.0.0.1"
"""Only this machine reaches a new node until its owner chooses to listen wider (``--host 0.0.0.0``)."""
PORT = 61717
"""A fixed port in the dynamic range, so that clients, the docs and the commands find a node untold."""
NODE_URL = f"http://{HOST}:{PORT}"
"""Where the management commands and clients look for a node when not told: a node on its defaults."""
DATA_DIR = "atomq-data"
"""Relative to where the command runs: a first ``atomq serve`` keeps everything in one directory in sight."""
HTTP_WORKERS = 2
"""Two processes: one keeps serving while the other restarts or is busy in the store."""
HTTP_WORKERS_RANGE = (1, 64)
"""Each process holds its own connections and loops and serves ``THREADS`` requests: 64 is past any machine."""
THREADS = 32
"""Each long-poll holds a thread for up to ``MAX_WAIT_MS``: enough for waiting gets beside short requests."""
THREADS_RANGE = (1, 1024)
"""Threads cost memory and the GIL: past a thousand a process only thrashes."""
MAX_LONGPOLLS_PER_TENANT = 8
"""A quarter of ``THREADS``: one tenant's waiting gets cannot take every thread of a process."""
MAX_LONGPOLLS_PER_TENANT_RANGE = (1, 1024)
"""Never more than the threads a process may have (``THREADS_RANGE``)."""
MAX_REQUEST_BYTES = 10 * _MIB
"""Room for several documents of ``MAX_DOCUMENT_BYTES`` in one send; larger bodies get 413 before
they are read, so a worker never buffers more."""
MIN_MAX_REQUEST_BYTES = _KIB
"""Below a kilobyte not even a small send with its headers' worth of JSON fits."""
HEAD_DEADLINE_S = 10.0
"""How long a client may take to send a request's line and headers from their first byte: a second
is plenty on any network; ten leave room for a congested one."""
BODY_DEADLINE_S = 10.0
"""How long a client may take to send a request's body from the end of its head, besides the time
its bytes take at ``MIN_BODY_BYTES_PER_S``: a large body on a slow link is not cut off, a trickle is."""
DEADLINE_RANGE_S = (0.1, 600.0)
"""A tenth of a second already takes a fast client on a nearby network; past ten minutes a slow
client is only holding a connection."""
MIN_BODY_BYTES_PER_S = 32 * _KIB
"""256 kbit/s, a poor mobile uplink: a body of ``MAX_REQUEST_BYTES`` may take 320 s more."""
SHUTDOWN_TIMEOUT_S = 20.0
"""Above a long-poll's end (within a second) and a slow request; below systemd's 90 s before SIGKILL."""
SHUTDOWN_TIMEOUT_RANGE_S = (1, 600)
"""Requests in flight end within seconds; ten minutes is already a stuck node."""
MAINTENANCE_INTERVAL_S = 1.0
"""Redeliveries are due to the second (the shortest default delay is 1 s)."""
EXECUTION_WORKERS = 2
"""Listeners run out of the box, two executions at once, without starting ``atomq worker`` by hand."""
EXECUTION_WORKERS_RANGE = (0, 256)
"""0 for none (workers run elsewhere); each is a process, so a few hundred is a machine's worth."""
EXECUTION_TIMEOUT_S = 240
"""Below ``DEDUPE_WINDOW_S``: a retried execution's outputs are recognised only within that window."""
EXECUTION_TIMEOUT_RANGE_S = (1, _DAY_S)
"""An execution is a batch of messages, not a job of days; a day bounds the slot it holds."""
EXECUTION_GRACE_S = 60
"""How long past its timeout a started execution still counts as running: rq stops its work horse
at the timeout, and the finish that follows must still find the execution waited for."""
MAX_SEND_DOCUMENTS = 100
"""Documents an execution (or a command, or the Spark sink) sends per request: a request stays small
(milliseconds to parse and store) while a batch of a thousand outputs takes ten round trips."""
MAX_SEND_DOCUMENTS_RANGE = (1, 1000)
"""Never more than ``MAX_MESSAGES_PER_SEND``: each output is a message of its own."""
SPARK_MASTER = "local[*]"
"""Spark on the node's own cores, with no cluster to set up."""
SPARK_CONCURRENCY = 4
"""Executions a Spark worker runs at once: enough to interleave tenants' FAIR pools on one session."""
SPARK_CONCURRENCY_RANGE = (1, 256)
"""Each running execution holds a Python thread and Spark jobs: a few hundred is a session's worth."""
METRICS_MAX_TENANTS = 100
"""Series of their own for the first hundred tenants; the rest add up under ``other``, so a platform
with many tenants does not flood its Prometheus."""
METRICS_MAX_QUEUES = 100
"""As ``METRICS_MAX_TENANTS``, for one tenant's queues and listeners."""
METRICS_WAIT_S = 1.5
"""How long a ``/metrics`` scrape waits for the tenants' figures to be read before it answers with
the last ones read: well inside a Prometheus scrape's time-out (10 s by default)."""

# A queue and what its callers ask of it.

MAX_REDELIVERIES = 6
"""Six redeliveries walk the default schedule (``REDELIVERY_DELAYS_S``) once before a message is
dead-lettered: 43 s of delays in all."""
MAX_REDELIVERIES_RANGE = (0, 1000)
"""A message that failed a thousand times is not going to succeed; it belongs in the dead letters."""
ACK_TIMEOUT_S = 30
"""A consumer's usual batch is done in seconds; a crashed one's messages come back within half a minute."""
ACK_TIMEOUT_RANGE_S = (0.01, _DAY_S)
"""From 10 ms to a day (as ``MAX_REDELIVERY_DELAY_S``): the most a delivery may stay in flight."""
GET_MAX_MESSAGES = 10
"""A get asks for a few messages at once unless it says otherwise: a small reply, a short lease."""
GET_WAIT_MS = 0
"""A get answers at once unless it asks to wait (a long-poll)."""
PAGE_LIMIT = 100
"""Messages in one page of a browse or of the dead letters when the caller does not say."""
MAX_PAGE_LIMIT = 1000
"""As ``MAX_GET``: a page is read in parts of ``GET_PART_MESSAGES``, each from where the one before ended."""
MAX_NACK_REASON_CHARS = 4096
"""A reason is stored with each dead letter: room for an error and its context, not for a payload."""
MAX_PROPERTY_NAME_CHARS = 256
"""A last-value queue's key property is named like any message property: a short name."""
NACK_REASON = "nacked"
"""The reason of a dead letter whose last nack gave none."""
MAX_DEDUPE_ID_CHARS = 256
"""A dedupe id is a caller's name for a message (a UUID, a business key); it is kept with the message."""
MAX_GROUP_CHARS = 128
"""A message's group is SQS's MessageGroupId: at most 128 characters."""
PRIORITY_RANGE = (0, 9)
"""Ten levels, as AMQP's priorities, with no maximum to declare per queue: a higher one is delivered first."""
DEFAULT_PRIORITY = 4
"""The middle, as in JMS: a sender can put a message ahead of the ordinary ones or behind them."""
MAX_TOPIC_CHARS = 250
"""Solace's bound on a topic: room for a dozen levels of names, a published topic is stored with every copy."""
MAX_TOPICS_PER_QUEUE = 100
"""A publish matches against every pattern of the tenant (cached); a queue needs a handful."""
MAX_TOPIC_PATTERNS_PER_TENANT = 10_000
"""Every HTTP worker keeps a matcher of a publishing tenant's patterns: 10,000 patterns of the longest
(250 characters) take it about 20 MiB and a second to build."""
TOPIC_CHANGE_LOG_LENGTH = 100
"""The last changes of a tenant's topic patterns kept in the store (a few KiB): a worker whose matcher is
at most this many changes behind updates it with what moved; one further behind rebuilds it."""
LATEST_TIME_S = 253_402_300_799.0
"""9999-12-31T23:59:59Z: the latest time (seconds since the epoch) a field may name."""
MAX_TRACEPARENT_CHARS = 256
"""A W3C traceparent is 55 characters; the rest is room for versions to come, not for data."""
MAX_SELECTORS = 10_000
"""Ids or receipts one ack, nack or bulk action names: each is work for one script call, which stays bounded."""

# The queue server's settings (``QueueSettings``); several of them are server settings too.

REDELIVERY_DELAYS_S: tuple[float, ...] = (1, 2, 3, 5, 8, 24)
"""Quick retries for a passing failure, then longer ones that let a dependency recover."""
DEDUPE_WINDOW_S = 300
"""Five minutes: longer than a client's retries of one send and than ``EXECUTION_TIMEOUT_S``."""
IDEMPOTENCY_WINDOW_S = _DAY_S
"""How long a send's Idempotency-Key answers with what the send stored: a client retrying through an
outage of hours still stores once. Each key costs the tenant ~150 bytes of its quota for that long."""
MAX_IDEMPOTENCY_KEY_CHARS = 128
REQUEST_TOKEN_WINDOW_S = 300
"""How long the record of a send without an Idempotency-Key is kept, under a token the node made:
longer than the store client's own retries of one call (redis-py's 10 tries, each up to the 15 s
socket time-out, with back-off between them)."""
DOCUMENT_RETENTION_S = 7 * _DAY_S
"""A week: a consumer away for a weekend finds its messages; an abandoned queue does not grow for ever."""
MAX_DOCUMENT_BYTES = _MIB
"""A message queue carries events and records, not files; a megabyte keeps every script call short."""
MAX_MESSAGES_PER_SEND = 1000
"""One send is one script call in the store's single thread: a thousand messages keeps it to milliseconds."""
MAX_GET = 1000
"""As ``MAX_MESSAGES_PER_SEND``, for the messages one get delivers (in parts, ``GET_PART_MESSAGES``)."""
GET_PART_MESSAGES = 250
"""Messages one script call of a get or of a browse page takes at most: a get of ``MAX_GET`` messages of
ten documents is then four calls of some 25 ms of the store's single thread each, not one of 100 ms
that every other tenant waits behind."""
GET_PART_DOCUMENTS = 1000
"""As ``GET_PART_MESSAGES``, for the documents one call reads: what a call costs grows with them."""
GET_PART_BYTES = _MIB
"""As ``GET_PART_MESSAGES``, for the document bytes one call reads and answers (a first message bigger
than that still comes alone, within ``MAX_REPLY_BYTES``)."""
SETTLE_PART_IDS = 250
"""Ids or receipts one script call of an ack, nack, release or extend settles (as ``CHUNK_SIZE``): a
settle of ``MAX_SELECTORS`` runs as parts of this many. An ack part of 500 messages of ten documents
took 15-46 ms of the store's thread on a loaded machine, and its sweep up to some 15 more
(BENCHMARKS.md): past the 50 ms a call should keep to."""
SWEEP_PART = 50
"""Messages of each kind (expired messages, expired deliveries, due redeliveries and delayed copies)
the sweep of one get or settle part handles at most before its own work: an expired message of ten
documents that its dead_letter_queue takes costs the store some 130-150 us, a due redelivery some
25 us (BENCHMARKS.md), so a part's sweep stays near 15 ms, within the budget beside its own work.
What is left waits for the next part (a get's parts go on, delivering nothing, while expired
deliveries or due redeliveries are left: those may come first) or the maintenance round."""
MAX_WAIT_MS = 20_000
"""As SQS's longest wait: below the idle time-outs of proxies and load balancers, so a long-poll is not cut."""
CHUNK_SIZE = 250
"""Messages one bulk-action script handles per call (a delete, a purge, the maintenance's sweep of a
destination): a chunk of 500 cost 41-89 ms of the store's single thread in the maintenance's sweep of
expired messages going to a dead letter queue, on a loaded machine (BENCHMARKS.md)."""
MAX_SUBSCRIBERS = 100
MAX_CONSUMERS = 100
"""Consumers an exclusive queue keeps in line at once (each call reads them all)."""
"""A send copies to every subscriber in one script call: a hundred copies keeps it short."""
MAX_DOCUMENTS_PER_MESSAGE = 100
"""With ``MAX_DOCUMENTS_PER_SEND``, what one send can make a script store."""
MAX_DOCUMENTS_PER_SEND = 10_000
"""Ten documents a message for ``MAX_MESSAGES_PER_SEND`` messages: one script call stays bounded."""
MAX_REPLY_BYTES = 16 * _MIB
"""A reply is built whole in the store, its client buffer and a web worker: it must not grow with what
a tenant stored. A single message bigger than this still comes alone."""
MAX_QUEUES_PER_TENANT = 1000
"""Every tenant's queues share one store and one maintenance loop."""
MAX_COPIES_PER_REQUEST = 100_000
"""Message copies one send may store (messages x the queues they reach x their subscribers): a
publish to a topic a thousand queues attract made a million copies in one script, and the store
answered BUSY to every tenant for seconds."""

# The server settings every node shares (``ServerSettings``) and their bounds.

INCOMING_RATE_LIMIT_PER_MINUTE = 0
"""No node-wide limit on sends until the owner sets one: tenants have limits of their own."""
MAX_DISK_BYTES = 0
"""No bound on all tenants' stored bytes until the owner sets one: Redis's maxmemory bounds them."""
MAX_STORED_MESSAGES = 0
"""No bound on all tenants' stored message copies until the owner sets one."""
FLOW_CONTROL_WAIT_MS = 5000
"""How long a node holds a send to a full ``flow_control`` queue: long enough for consumers to
make room, short enough that a sender's own time-out (often 10 to 30 s) does not fire first."""
MAX_FLOW_CONTROL_WAIT_MS = 60_000
"""A held send holds a thread and its client's connection: a minute is past any useful wait."""
MAX_HELD_SENDS = THREADS // 4
"""Sends one process holds at once for full ``flow_control`` queues; past it a send is answered
429 at once, so held sends never take more than a quarter of a process's threads."""
MIN_REPLICAS = 0
"""A send to a ``sync`` queue waits for the local disk only, until the owner asks for replicas."""
MAX_MIN_REPLICAS = 16
"""More replicas than a Valkey primary keeps in practice."""
SYNC_TIMEOUT_MS = 2000
"""Valkey syncs its append-only file every second (appendfsync everysec): a send waits up to a
second for it, so two seconds pass only when the disk or a replica is in trouble."""
MAX_SYNC_TIMEOUT_MS = 10_000
"""A waiting send holds a thread and its client's connection, whose calls give up after
``connection.SOCKET_TIMEOUT_S`` (15 s)."""
RATE_LIMIT_WINDOW_S = 60
"""Limits are set per minute, so a window is a minute."""
MAX_EXACT_INT = 2**53
"""Largest whole number a setting or counter may be: Lua scripts compute in doubles,
which hold every whole number up to here exactly."""
MAX_REDELIVERY_DELAY_S = float(_DAY_S)
"""A message waits at most a day between two deliveries: longer is a schedule, not a retry."""
MAX_DELAY_S = float(_DAY_S)
"""The longest a send may delay a message's first delivery (and a queue's default delay): a day,
as the longest redelivery delay, where SQS's DelaySeconds stops at 15 minutes. A delayed message
waits in the redelivery schedule, which the maintenance visits when it falls due."""
MAX_REDELIVERY_DELAYS = 100
"""The schedule travels to every delivery script as an argument: a hundred delays keeps it short."""
MAX_DEDUPE_WINDOW_S = 7 * float(_DAY_S)
"""A marker per de-duplicated message lives this long: a week bounds what markers cost the store."""
MAX_DOCUMENT_RETENTION_S = 10 * 365.25 * _DAY_S
"""Ten years: the bounds keep every time the scripts and the maintenance loop compute from
these settings (now + delay, in milliseconds) far inside what a double and a datetime hold."""
MAX_MESSAGE_TTL_S = MAX_DOCUMENT_RETENTION_S
"""A message's or a queue's time to live: longer would outlive the longest retention anyway."""
MAX_RATE_LIMIT_WINDOW_S = float(_DAY_S)
"""A day: a window's counters live as long as the window."""
LIMIT_BOUNDS: dict[str, tuple[int, int]] = {
    "max_documents_per_message": (1, 1000),
    "max_documents_per_send": (1, 100_000),
    "max_reply_bytes": (64 * _KIB, 256 * _MIB),
    "max_queues_per_tenant": (1, 1_000_000),
    "max_copies_per_request": (1, 10_000_000),
}
"""The bounds of the limits on one tenant's weight (what each means: ``QueueSettings``): each
bounds what one script call or one tenant makes the shared store and the node hold."""

# Tenants.

TENANT_RATE_LIMIT_PER_MINUTE = 0
"""A new tenant sends without a rate limit until the owner gives it one (0: none)."""
TENANT_DISK_QUOTA_BYTES = 0
"""A new tenant stores without a quota until the owner gives it one (0: none)."""
SPARK_WEIGHT = 1
"""Every tenant's FAIR scheduler pool weighs the same until the owner says otherwise."""
MAX_SPARK_WEIGHT = 1000
"""The largest weight of a tenant's Spark FAIR scheduler pool: a thousand to one is already all of it."""
MAX_TENANT_LIMIT = 2**63 - 1
"""The library's bound on a tenant's limits: what Redis stores as a signed 64-bit integer. The
HTTP API bounds them at ``MAX_EXACT_INT``, as every number a script compares in doubles."""
MAX_TENANT_NAME_CHARS = 128
"""A name is shown in tables and the dashboard; an id, not the name, identifies the tenant."""

# Listeners.

MAX_LISTENERS_PER_TENANT = 100
"""Every node's supervisor reads every listener each round: one tenant must not make that unbounded."""
LISTENER_BATCH_SIZE = 10
"""Messages one execution processes unless the listener says: a short execution, a small redelivery."""
MAX_LISTENER_BATCH_SIZE = 1000
"""As ``MAX_GET``: a fork execution's batch is delivered by one get."""
MAX_SPARK_LISTENER_BATCH_SIZE = 10_000
"""A Spark execution pays a job's fixed cost (100-250 ms on two local cores) whatever its size, so
larger batches pay it less often; its batch is taken by gets of ``MAX_GET`` and settled in one call
(``MAX_SELECTORS``), and 10,000 messages keep a start's answer to a few megabytes."""
MAX_CONCURRENT_EXECUTIONS = 1000
"""Executions of one listener at once (0: no limit); past a thousand the limit means nothing."""
MAX_LISTENER_SETTINGS_BYTES = 64 * _KIB
"""A process's settings travel with every execution: configuration, not data."""
MAX_LISTENER_ERROR_CHARS = 1000
"""A listener's last error is shown in tables and the dashboard: its start says what failed."""
UNLIMITED_OUTSTANDING = 32
"""Executions scheduled at once for a listener without a limit: enough to keep
every worker busy, few enough that a deep backlog is not copied into rq."""
PROCESSED_WINDOW_MS = _DAY_S * 1000
PROCESSED_WINDOW_MAX = 100_000
"""How long, and how many, processed message ids a listener remembers: a
redelivery comes within the ack time-out plus the redelivery delays, far
inside a day; the count bounds the memory of a busy listener."""

# Streaming consumers (the Spark data source's micro-batches).

STREAM_PLAN_MESSAGES = 100
"""Messages one planned micro-batch takes unless the consumer says."""
MAX_STREAM_BATCH = 1000
"""As ``MAX_GET``: a planned batch is delivered by one get."""
MAX_STREAM_PARTITIONS = 64
"""Partitions one micro-batch is split into: Spark tasks, of which a node's cores run a few dozen."""
MAX_STREAM_COUNTER = 2**62
"""Largest batch number or generation a consumer may name: inside Redis's signed 64-bit integers,
with room to count on."""
