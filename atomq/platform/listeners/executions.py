"""The execution protocol: how a listener's executions take, extend and settle their batches.

A work horse (forked or on Spark) starts its execution, which takes one batch
from the listener's queue; it may extend the batch's ack deadline; it
finishes once. Success records the messages as processed and acks them;
failure nacks them (the redelivery schedule, then dead letters); deferred
(the node refused the execution's sends for a while) gives them back without
counting a failed delivery and makes the listener wait as long. The batch a
start took is kept apart from the listener, so it is settled on the queue it
came from even if the listener was redeployed or deleted since. See
docs/concepts.md, "Listeners and executions".

Nothing here knows HTTP: the API's views parse, call one method, and render.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from atomq.errors import AtomqError, Conflict, InvalidInput
from atomq.platform.listeners.deployed import Listener, ListenerSpec, ListenerStore
from atomq.platform.listeners.execution_batches import ExecutionBatch, ExecutionBatches
from atomq.platform.models import Delivery, QueueModel
from atomq.platform.queue_server import QueueServer

log = logging.getLogger("atomq.executions")


@dataclass(frozen=True)
class StartedExecution:
    """What a start hands the work horse: its batch, and which of it the listener already processed
    (a redelivery after a lost ack: to be acked, not processed again)."""

    listener: Listener
    ack_timeout_s: float
    messages: list[Delivery]
    processed: frozenset[str]


@dataclass(frozen=True)
class Settled:
    """How a finish settled the execution's batch."""

    acked: int = 0
    requeued: int = 0
    dead_lettered: int = 0


class Executions:
    """Listeners' executions over the queue server and the listener store.

    Args:
        run_within_ms: how long a started execution may run before its listener counts it lost.
    """

    def __init__(self, queues: QueueServer, listeners: ListenerStore, run_within_ms: int) -> None:
        self.queues = queues
        self.listeners = listeners
        self.batches = ExecutionBatches(listeners.storage)
        self.run_within_ms = run_within_ms

    def deploy(self, tenant: str, name: str, queue: str, subscriber: str | None, **spec: Any) -> bool:
        """Deploys (True) or redeploys (False) a listener; its state and counts survive a redeploy.

        On a publish/subscribe queue the listener reads its own subscriber (by default named
        after it), created now; a point-to-point queue has none. The queue is checked first
        (404), then the subscriber, then the rest of the definition (``ListenerSpec``'s fields).
        """
        info = self.queues.get_queue(tenant, queue)
        if info.model is QueueModel.PUBLISH_SUBSCRIBE:
            subscriber = subscriber or name
        elif subscriber is not None:
            raise InvalidInput("a point-to-point queue has no subscribers", field="subscriber")
        listener_spec = ListenerSpec(queue=queue, subscriber=subscriber, **spec)
        if subscriber is not None:
            self.queues.put_subscriber(tenant, queue, subscriber)
        return self.listeners.put(tenant, name, listener_spec)

    def start(self, tenant: str, name: str, execution: str) -> StartedExecution | None:
        """Takes the execution's batch, once; None when it must not run (paused, started before,
        no longer waited for) or found nothing to do."""
        listener = self.listeners.get(tenant, name)
        spec = listener.spec
        if not self.listeners.start(tenant, name, execution, self.run_within_ms):
            return None
        try:
            queue = self.queues.get_queue(tenant, spec.queue)
            got = self._take(tenant, name, spec)
        except AtomqError as exc:
            self.listeners.finish(tenant, name, execution, "failed", f"taking the batch failed: {exc.message}")
            raise
        if not got:
            self.listeners.finish(tenant, name, execution, "empty")
            return None
        self.batches.record(tenant, execution, ExecutionBatch(
            listener=name, queue=spec.queue, subscriber=spec.subscriber, ids=tuple(m.id for m in got),
            receipts=tuple(m.receipt for m in got), ack_timeout_s=queue.ack_timeout_s), self.run_within_ms)
        processed = self.listeners.processed(tenant, name, [m.id for m in got if m.redelivered])
        return StartedExecution(listener=listener, ack_timeout_s=queue.ack_timeout_s, messages=got,
                                processed=frozenset(processed))

    def _take(self, tenant: str, name: str, spec: ListenerSpec) -> list[Delivery]:
        """The batch, by gets of at most the queue's ``max_get``, until it is full or the queue has
        no more ready: a Spark listener's batch may be larger than one get. On an exclusive queue the
        listener is one consumer, under its own name, so the gets keep the send order."""
        most = self.queues.settings.max_get
        got: list[Delivery] = []
        while len(got) < spec.batch_size:
            want = min(most, spec.batch_size - len(got))
            try:
                taken = self.queues.get(tenant, spec.queue, want, 0, spec.subscriber, consumer=name)
            except AtomqError as exc:
                if not got:
                    raise
                # What the earlier gets took is in flight: it runs as this batch rather than wait out
                # its ack time-out as a failed delivery.
                log.info("taking the rest of a batch of %s failed: %s", name, exc.message)
                break
            got += taken
            if len(taken) < want:
                break
        return got

    def extend(self, tenant: str, execution: str) -> int:
        """Moves the batch's ack deadline a full ack time-out ahead; how many messages it moved."""
        batch = self.batches.get(tenant, execution)
        if batch is None:
            raise Conflict("the execution has no batch: it has not started or has finished", execution=execution)
        return self.queues.extend(tenant, batch.queue, receipts=list(batch.receipts), subscriber=batch.subscriber,
                                  seconds=batch.ack_timeout_s, consumer=batch.listener)

    def finish(self, tenant: str, name: str, execution: str, ok: bool, processed: Collection[str] = (),
               error: str = "", retry_after_s: float | None = None) -> Settled:
        """Settles the execution's batch, once: acked when ``ok``, given back after
        ``retry_after_s`` when deferred, else nacked with ``error`` as the reason."""
        batch = self.batches.take(tenant, execution)
        if batch is None:
            raise Conflict("the execution has no batch to settle: it has not started or has finished",
                           execution=execution)
        try:
            return self._settle(tenant, name, execution, batch, ok, processed, error, retry_after_s)
        finally:
            self._wake_supervisor(tenant, name)

    def _wake_supervisor(self, tenant: str, name: str) -> None:
        """The slot this execution held is free: the supervisor schedules the next one now. A
        wake-up that fails costs only the wait for the supervisor's next tick, so it does not fail
        the finish (whose batch is settled already)."""
        try:
            self.listeners.wake_supervisor(tenant, name)
        except AtomqError as exc:
            log.info("could not wake the listener supervisor: %s", exc.message)

    def _settle(self, tenant: str, name: str, execution: str, batch: ExecutionBatch, ok: bool,
                processed: Collection[str], error: str, retry_after_s: float | None) -> Settled:
        receipts = list(batch.receipts)
        if ok:
            done = set(processed) & set(batch.ids)
            self.listeners.finish(tenant, name, execution, "ok", processed=sorted(done))
            return Settled(acked=self.queues.ack(tenant, batch.queue, receipts=receipts,
                                                 subscriber=batch.subscriber, consumer=batch.listener))
        if retry_after_s is not None:
            self.listeners.finish(tenant, name, execution, "deferred", error or "the sends were refused",
                                  retry_after_ms=round(retry_after_s * 1000))
            return Settled(requeued=self.queues.release(tenant, batch.queue, receipts=receipts,
                                                        subscriber=batch.subscriber, delay_s=retry_after_s,
                                                        consumer=batch.listener))
        reason = error or "the process failed"
        self.listeners.finish(tenant, name, execution, "failed", reason)
        nacked = self.queues.nack(tenant, batch.queue, receipts=receipts, subscriber=batch.subscriber,
                                  reason=reason, consumer=batch.listener)
        return Settled(requeued=nacked.requeued, dead_lettered=nacked.dead_lettered)
