"""RabbitMQ through pika: the broker the HTTP path is compared with.

Optional: ``Amqp.probe`` says why it is skipped where no broker answers or
pika is not installed, so the other phases still run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from atomq.platform.store.connection import redact_url

from .serve_node import BenchError, check, progress
from .workload import BATCH, PAYLOAD_BYTES, batch_dispenser, threaded_phase


class Amqp:
    """A RabbitMQ broker at ``url``; ``probe`` says whether one answers (and pika is there)."""

    def __init__(self, pika: Any, url: str, version: str) -> None:
        self.pika = pika
        self.url = url
        self.version = version
        self.params = pika.URLParameters(url)
        self.queues: set[str] = set()

    @classmethod
    def probe(cls, url: str) -> tuple[Amqp | None, str]:
        """(the broker, "") when it answers, else (None, why not)."""
        try:
            import pika  # optional: pip install 'atomq[bench]'
        except ImportError:
            return None, "pika is not installed (pip install 'atomq[bench]')"
        try:
            params = pika.URLParameters(url)
        except Exception as exc:  # noqa: BLE001 - any malformed URL
            return None, f"--amqp-url is not a usable AMQP URL ({type(exc).__name__}: {exc})"
        params.connection_attempts = 1
        params.socket_timeout = 3
        try:
            conn = pika.BlockingConnection(params)
        except Exception as exc:  # noqa: BLE001 - refused, timed out, bad credentials: all mean skip
            detail = str(exc) or "refused, or no answer"
            return None, f"no usable AMQP broker at {redact_url(url)} ({type(exc).__name__}: {detail})"
        try:
            props = getattr(getattr(conn, "_impl", None), "server_properties", None) or {}
            version = " ".join(
                v.decode() if isinstance(v, bytes) else str(v)
                for v in (props.get("product"), props.get("version")) if v) or "unknown"
        finally:
            conn.close()
        return cls(pika, url, version), ""

    def channel_call(self, fn: Callable[[Any], Any]) -> Any:
        """Runs ``fn(channel)`` on a short-lived connection (untimed declares, counts and deletes)."""
        conn = self.pika.BlockingConnection(self.params)
        try:
            return fn(conn.channel())
        finally:
            conn.close()

    def declare(self, queue: str) -> int:
        """Declares a durable queue (passively after the first time); returns its ready count."""
        first = queue not in self.queues
        self.queues.add(queue)
        # x-expires: a queue left behind by a killed run goes by itself after 10 unused minutes.
        return int(self.channel_call(lambda ch: ch.queue_declare(
            queue, passive=not first, durable=True, arguments={"x-expires": 600_000})).method.message_count)

    def delete(self, queue: str) -> None:
        self.channel_call(lambda ch: ch.queue_delete(queue))
        self.queues.discard(queue)

    def delete_leftovers(self) -> None:
        for queue in list(self.queues):
            try:
                self.delete(queue)
            except Exception as exc:  # noqa: BLE001 - clean-up is best effort; x-expires is the backstop
                progress(f"could not delete RabbitMQ queue {queue}: {type(exc).__name__}: {exc}")


def rabbitmq_send(amqp: Amqp, queue: str, n: int, payload: bytes, clients: int) -> tuple[float, int]:
    """``clients`` threads, each with its own connection (pika SelectConnection), publish n messages.

    Persistent messages (delivery_mode 2) to the durable queue through the
    default exchange, on a channel in confirm mode: a thread publishes 100,
    waits until the broker has confirmed all 100 (it confirms persistent
    messages once they are on disk), then publishes the next 100. Each body
    is 1 KiB, its first 10 bytes the message's sequence number.
    Returns seconds and the count confirmed.
    """
    pika = amqp.pika
    take = batch_dispenser(n)
    props = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    tail = payload[10:]

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, int]:
        st: dict[str, Any] = {"channel": None, "tag": 0, "outstanding": set(), "confirmed": 0,
                              "finished": None, "error": None}

        def fail(exc: BaseException) -> None:
            if st["error"] is None:
                st["error"] = exc
            if conn.is_open:
                conn.close()
            else:
                conn.ioloop.stop()

        def publish_batch() -> None:
            batch = None if stop.is_set() else take()
            if batch is None:
                st["finished"] = time.perf_counter()
                conn.close()
                return
            start, size = batch
            ch = st["channel"]
            for seq in range(start, start + size):
                ch.basic_publish("", queue, b"%010d" % seq + tail, props)
                st["tag"] += 1
                st["outstanding"].add(st["tag"])

        def on_confirm(frame: Any) -> None:
            m = frame.method
            if isinstance(m, pika.spec.Basic.Nack):
                fail(BenchError(f"rabbitmq_send: the broker nacked delivery tag {m.delivery_tag}"))
                return
            before = len(st["outstanding"])
            if m.multiple:
                st["outstanding"] = {t for t in st["outstanding"] if t > m.delivery_tag}
            else:
                st["outstanding"].discard(m.delivery_tag)
            st["confirmed"] += before - len(st["outstanding"])
            if not st["outstanding"]:
                publish_batch()

        def on_confirm_mode(_frame: Any) -> None:
            try:
                ready()
            except threading.BrokenBarrierError as exc:
                fail(exc)
                return
            publish_batch()

        def on_channel_closed(_ch: Any, reason: Any) -> None:
            if st["finished"] is None:
                fail(BenchError(f"rabbitmq_send: the channel closed: {reason}"))

        def on_channel(ch: Any) -> None:
            st["channel"] = ch
            ch.add_on_close_callback(on_channel_closed)
            ch.confirm_delivery(on_confirm, callback=on_confirm_mode)

        def on_open_error(c: Any, exc: BaseException) -> None:
            st["error"] = st["error"] or exc
            c.ioloop.stop()

        conn = pika.SelectConnection(amqp.params, on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                     on_open_error_callback=on_open_error,
                                     on_close_callback=lambda c, reason: c.ioloop.stop())
        conn.ioloop.start()
        if st["error"] is not None:
            raise st["error"]
        check(st["finished"] is not None, "rabbitmq_send: a publisher's connection closed before it finished")
        check(st["confirmed"] == st["tag"], f"rabbitmq_send: {st['confirmed']} of {st['tag']} publishes confirmed")
        return st["finished"], st["confirmed"]

    seconds, confirmed = threaded_phase("rabbitmq_send", clients, work)
    return seconds, sum(confirmed)


def rabbitmq_get_ack(amqp: Amqp, queue: str, n: int, clients: int) -> tuple[float, list[int]]:
    """``clients`` consumers, each with its own connection (pika BlockingConnection), drain n messages.

    basic_qos(prefetch_count=100); each consumer acks with multiple=True every
    100 deliveries, and its last partial batch once the n messages are all
    delivered (or it has had nothing for 10 ms). Returns seconds and the
    sequence numbers read (duplicates kept, for the check).
    """
    lock = threading.Lock()
    consumed = [0]
    progressed = [time.monotonic()]
    stall_s = 15.0

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, list[int]]:
        conn = amqp.pika.BlockingConnection(amqp.params)
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=BATCH)
            ready()
            seqs: list[int] = []
            pending = last_tag = 0
            for method, _props, body in ch.consume(queue, inactivity_timeout=0.01):
                if method is not None:
                    check(len(body) == PAYLOAD_BYTES and not method.redelivered,
                          f"rabbitmq_get_ack: a delivery of {len(body)} bytes, redelivered {method.redelivered}")
                    seqs.append(int(body[:10]))
                    pending += 1
                    last_tag = method.delivery_tag
                    with lock:
                        consumed[0] += 1
                        total = consumed[0]
                        progressed[0] = time.monotonic()
                    if pending == BATCH:
                        ch.basic_ack(last_tag, multiple=True)
                        pending = 0
                    if total < n:
                        continue
                else:
                    with lock:
                        total = consumed[0]
                        idle = time.monotonic() - progressed[0]
                    check(total >= n or idle < stall_s,
                          f"rabbitmq_get_ack: {total} of {n} messages delivered, then nothing for {stall_s:.0f} s")
                if pending:
                    ch.basic_ack(last_tag, multiple=True)
                    pending = 0
                if total >= n or stop.is_set():
                    break
            finished = time.perf_counter()
            ch.cancel()
            return finished, seqs
        finally:
            if conn.is_open:
                conn.close()

    seconds, parts = threaded_phase("rabbitmq_get_ack", clients, work)
    return seconds, [s for part in parts for s in part]
