"""The queue server: per-tenant queues in Redis streams, used as a library.

Every operation that changes more than one key is one Lua script, so a crash
between any two calls leaves every count exact. Time comes from Redis
``TIME`` inside the scripts, never from this process's clock, so several
processes and restarts agree on deadlines and redelivery times.

The server is composed of parts, one behaviour each, that share the store
and the settings through one :class:`~atomq.platform.shared.Shared`:
components (queues, subscribers, their removal), routes (what a send fans
out to), sending, delivery (get and settle), management (what an operator
does to messages, and usage) and maintenance. Each public operation below is
the part's own method, so a caller sees one object and a reader finds each
behaviour in its own module.
"""

from __future__ import annotations

from atomq.errors import FormatVersionError, StorageError
from atomq.platform.maintenance import DueWork, Maintenance
from atomq.platform.queues.components import Components
from atomq.platform.queues.dead_letter_targets import DeadLetterTargets
from atomq.platform.queues.delivery import Deliveries
from atomq.platform.queues.management import Management
from atomq.platform.queues.move_tasks import MoveTasks
from atomq.platform.queues.queue_fields import QueueFields
from atomq.platform.queues.queue_settings import QueueSettings
from atomq.platform.queues.routes import Routes
from atomq.platform.queues.sending import Sending
from atomq.platform.queues.topic_index import TopicIndex
from atomq.platform.shared import Shared
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.format_version import FORMAT_VERSION, check_format
from atomq.platform.store.storage import STORE_ERRORS, Storage
from atomq.platform.watch.counters import MessageCounters

__all__ = ["DueWork", "QueueServer"]

READINESS_ERRORS: tuple[type[Exception], ...] = (StorageError, *STORE_ERRORS)
"""What a readiness check meets from the store: translated or raw (the script check)."""


class QueueServer:
    """The queue server core, shared by every tenant.

    Args:
        client: a redis-py client (standalone or cluster) with
            ``decode_responses=False``: documents may be bytes.
        settings: server-wide settings (``QueueSettings``' defaults).
        migrate: bring data of an older format to this one (one node at a time); without,
            older data is refused (``atomq audit`` reads, it never migrates).
    """

    def __init__(self, client: RedisClient, settings: QueueSettings | None = None, migrate: bool = True) -> None:
        self.storage = Storage(client)
        self._shared = Shared(self.storage, settings or QueueSettings())
        stored_format = check_format(client)
        self.storage.scripts.load_all(client)
        self.counters = MessageCounters(self.storage)
        routes = Routes(self._shared)
        targets = DeadLetterTargets(self._shared)
        components = Components(self._shared, routes, targets)
        management = Management(self._shared, routes, components)
        self.topic_matchers = TopicIndex(self._shared)
        """The tenants' topic matchers this server caches (and how often it rebuilt or updated one)."""
        sending = Sending(self._shared, routes, management, self.topic_matchers)
        deliveries = Deliveries(self._shared, components, targets)
        moves = MoveTasks(self._shared, components)
        maintenance = Maintenance(self._shared, components, targets, moves)

        self.put_queue = components.put_queue
        self.fields = QueueFields(self._shared)
        """Config fields another front (the SQS endpoint) keeps with a queue."""
        self.get_queue = components.get_queue
        self.counts_now = components.counts_now
        self.list_queues = components.list_queues
        self.delete_queue = components.delete_queue
        self.put_subscriber = components.put_subscriber
        self.delete_subscriber = components.delete_subscriber
        self.resume_removals = components.resume_removals
        self.tenants = components.tenants
        self.destinations = components.destinations

        self.send = sending.send
        self.send_batch = sending.send_batch
        self.publish = sending.publish
        self.publish_many = sending.publish_many

        self.get = deliveries.get
        self.take = deliveries.take
        self.ack = deliveries.ack
        self.nack = deliveries.nack
        self.release = deliveries.release
        self.extend = deliveries.extend

        self.browse = management.browse
        self.dead_letters = management.dead_letters
        self.dead_letter_reasons = management.dead_letter_reasons
        self.peek = management.peek
        self.in_flight = management.in_flight
        self.oldest_waiting = management.oldest_waiting
        self.delete_messages = management.delete_messages
        self.delete_dead_letters = management.delete_dead_letters
        self.resend_dead_letters = management.resend_dead_letters
        self.usage = management.usage
        self.total_usage = management.total_usage

        self.start_move_task = moves.start
        self.cancel_move_task = moves.cancel
        self.move_task = moves.of
        self.move_tasks = moves.list
        self.running_move_tasks = moves.running

        self.sweep = maintenance.sweep
        self.purge = maintenance.purge
        self.due_work = maintenance.due_work
        self.maintain = maintenance.maintain

        if stored_format < FORMAT_VERSION:
            if not migrate:
                raise FormatVersionError(
                    f"the data is in format {stored_format}, which this atomq migrates to {FORMAT_VERSION} "
                    "when `atomq serve` starts on it; start the node first", stored=stored_format,
                    supported=FORMAT_VERSION)
            maintenance.migrate_older_format()

    @property
    def client(self) -> RedisClient:
        return self.storage.client

    @property
    def settings(self) -> QueueSettings:
        return self._shared.settings

    @settings.setter
    def settings(self, settings: QueueSettings) -> None:
        """Replaces the settings for every part at once (the node does, when the shared server settings change)."""
        self._shared.settings = settings

    def readiness_problems(self) -> list[str]:
        """Why this server cannot do its work now: Redis unreachable, or its scripts gone and not
        loadable. A store at its maxmemory is no reason: gets, acks and deletes still work there
        (the memory state refuses sends), and they are what brings memory back down."""
        try:
            if self.storage.scripts.missing(self.client):  # Redis restarted or flushed its scripts
                self.storage.scripts.load_all(self.client)
        except READINESS_ERRORS as exc:  # a cluster's own exceptions too: never a 500
            return [f"Redis does not answer or refuses the scripts: {exc}"]
        return []
