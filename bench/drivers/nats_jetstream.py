"""NATS JetStream through nats-py: the second broker the HTTP path is compared with.

Optional, as RabbitMQ is: ``Jetstream.probe`` says why it is skipped where no
server answers, JetStream is off or nats-py is not installed. nats-py is
asyncio-only: each client thread runs its own event loop and connection.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from atomq.platform.store.connection import redact_url

from .serve_node import BenchError, check, progress
from .workload import BATCH, PAYLOAD_BYTES, batch_dispenser, threaded_phase

CONSUMER = "bench"


class Jetstream:
    """A NATS server with JetStream at ``url``; ``probe`` says whether one answers."""

    def __init__(self, nats: Any, url: str, version: str) -> None:
        self.nats = nats
        self.url = url
        self.version = version
        self.streams: set[str] = set()

    @classmethod
    def probe(cls, url: str) -> tuple[Jetstream | None, str]:
        """(the server, "") when it answers with JetStream on, else (None, why not)."""
        try:
            import nats  # optional: pip install 'atomq[bench]'
        except ImportError:
            return None, "nats-py is not installed (pip install 'atomq[bench]')"

        async def ask() -> str:
            nc = await nats.connect(url, connect_timeout=3, max_reconnect_attempts=0, allow_reconnect=False)
            try:
                await nc.jetstream().account_info()
                v = nc.connected_server_version
                return f"NATS {v.major}.{v.minor}.{v.patch}"
            finally:
                await nc.close()

        try:
            version = asyncio.run(ask())
        except Exception as exc:  # noqa: BLE001 - refused, timed out, JetStream off: all mean skip
            return None, f"no NATS server with JetStream at {redact_url(url)} ({type(exc).__name__}: {exc})"
        return cls(nats, url, version), ""

    def call(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``await fn(jetstream_context)`` on a short-lived connection (untimed set-up and checks)."""
        async def go() -> Any:
            nc = await self.nats.connect(self.url, connect_timeout=5)
            try:
                return await fn(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())

    def create(self, stream: str) -> None:
        """A stream kept on disk (as RabbitMQ's durable queue and atomq's AOF) on the subject ``stream``,
        and a durable pull consumer with explicit acks."""
        from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

        async def make(js: Any) -> None:
            await js.add_stream(StreamConfig(name=stream, subjects=[stream], storage=StorageType.FILE,
                                             max_age=600))  # one left by a killed run goes by itself
            await js.add_consumer(stream, ConsumerConfig(durable_name=CONSUMER, ack_policy=AckPolicy.EXPLICIT,
                                                         max_ack_pending=100_000, ack_wait=60))

        self.streams.add(stream)
        self.call(make)

    def counts(self, stream: str) -> tuple[int, int, int]:
        """Messages in the stream, and the consumer's pending (undelivered) and unacknowledged counts."""
        async def read(js: Any) -> tuple[int, int, int]:
            info = await js.stream_info(stream)
            consumer = await js.consumer_info(stream, CONSUMER)
            return int(info.state.messages), int(consumer.num_pending), int(consumer.num_ack_pending)

        return self.call(read)  # type: ignore[no-any-return]

    def delete(self, stream: str) -> None:
        async def drop(js: Any) -> None:
            await js.delete_stream(stream)

        self.call(drop)
        self.streams.discard(stream)

    def delete_leftovers(self) -> None:
        for stream in list(self.streams):
            try:
                self.delete(stream)
            except Exception as exc:  # noqa: BLE001 - clean-up is best effort; max_age is the backstop
                progress(f"could not delete NATS stream {stream}: {type(exc).__name__}: {exc}")


def jetstream_send(js: Jetstream, stream: str, n: int, payload: bytes, clients: int) -> tuple[float, int]:
    """``clients`` threads, each with its own connection, publish n messages to the stream.

    A thread publishes 100 at once and waits until the server has acknowledged
    all 100 (it acknowledges a message once stored), then the next 100: the
    same window as the RabbitMQ phase's confirms. Each body is 1 KiB, its
    first 10 bytes the message's sequence number. Returns seconds and the
    count acknowledged.
    """
    take = batch_dispenser(n)
    tail = payload[10:]

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, int]:
        async def go() -> tuple[float, int]:
            nc = await js.nats.connect(js.url, connect_timeout=5)
            try:
                ctx = nc.jetstream()
                ready()
                acked = 0
                while not stop.is_set():
                    batch = take()
                    if batch is None:
                        break
                    start, size = batch
                    acks = await asyncio.gather(*(ctx.publish(stream, b"%010d" % seq + tail)
                                                  for seq in range(start, start + size)))
                    check(all(a.stream == stream for a in acks), "jetstream_send: an ack names another stream")
                    acked += len(acks)
                return time.perf_counter(), acked
            finally:
                await nc.close()

        return asyncio.run(go())

    seconds, acked = threaded_phase("jetstream_send", clients, work)
    return seconds, sum(acked)


def jetstream_get_ack(js: Jetstream, stream: str, n: int, clients: int) -> tuple[float, list[int]]:
    """``clients`` threads, each with its own connection, fetch 100 at a time from the durable pull
    consumer and ack each message (explicit acks, sent without waiting for their confirmation, as
    RabbitMQ's basic_ack) until the n messages are all consumed. Returns seconds and the sequence
    numbers read (duplicates kept, for the check)."""
    lock = threading.Lock()
    consumed = [0]

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, list[int]]:
        async def go() -> tuple[float, list[int]]:
            nc = await js.nats.connect(js.url, connect_timeout=5)
            try:
                sub = await nc.jetstream().pull_subscribe_bind(CONSUMER, stream)
                ready()
                seqs: list[int] = []
                while not stop.is_set():
                    with lock:
                        if consumed[0] >= n:
                            break
                    try:
                        msgs = await sub.fetch(BATCH, timeout=0.05)
                    except TimeoutError:  # nats-py's fetch time-outs are TimeoutErrors: nothing yet
                        continue
                    for m in msgs:
                        check(len(m.data) == PAYLOAD_BYTES and m.metadata.num_delivered == 1,
                              f"jetstream_get_ack: a delivery of {len(m.data)} bytes, "
                              f"delivered {m.metadata.num_delivered} times")
                        seqs.append(int(m.data[:10]))
                        await m.ack()
                    with lock:
                        consumed[0] += len(msgs)
                await nc.flush()  # every ack has reached the server
                return time.perf_counter(), seqs
            finally:
                await nc.close()

        return asyncio.run(go())

    seconds, parts = threaded_phase("jetstream_get_ack", clients, work)
    seqs = [s for part in parts for s in part]
    if len(seqs) != n:
        raise BenchError(f"jetstream_get_ack consumed {len(seqs)} messages, not {n}")
    return seconds, seqs
