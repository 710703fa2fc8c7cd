"""Many consumers on one queue, in threads and in real processes, on the real Valkey.

What a user relies on when several workers share a queue: every message sent
is delivered, none is delivered to two workers at once, each settle call
(ack, nack) settles a delivery exactly once however many callers race for
it, and a publish/subscribe subscriber sees an unbroken run of the messages
sent after it was created. Each thread or process has its own client and its
own QueueServer, as separate workers would. Nothing here sleeps to let a race
happen: waits poll a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from atomq.platform import MessageState, QueueServer
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.watch.audit import audit_tenant
from support.queues import FAST, browse_all, counts, msg
from support.waiting import wait_until

P2P = "point_to_point"
PUBSUB = "publish_subscribe"
REPO = Path(__file__).resolve().parents[1]


class Worker:
    """One worker's own connection and queue server, as a separate thread would have."""

    def __init__(self, valkey: EmbeddedValkey) -> None:
        self.client = valkey.client()
        self.qs = QueueServer(self.client, FAST)

    def close(self) -> None:
        self.client.close()


def run_threads(valkey: EmbeddedValkey, count: int, body: Callable[[int, QueueServer], object]) -> list:
    """Runs ``body(n, qs)`` in ``count`` threads at once; returns their results, re-raising their errors."""

    def run(n: int) -> object:
        w = Worker(valkey)
        try:
            return body(n, w.qs)
        finally:
            w.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(run, n) for n in range(count)]
        return [f.result(timeout=60) for f in futures]


# -- many consumers of one point-to-point queue ----------------------------------


def test_threads_consume_a_queue_exactly_once_while_it_is_filled(valkey, tenant) -> None:
    """8 threads drain 3,000 messages sent meanwhile: each delivered once, acked once, none lost."""
    total, batch = 3000, 100
    admin = Worker(valkey)
    admin.qs.put_queue(tenant, "work", P2P, ack_timeout_s=60)
    sending_done = threading.Event()
    deadline = time.monotonic() + 40
    sent: dict[str, str] = {}  # id -> text

    def sender() -> None:
        w = Worker(valkey)
        try:
            for b in range(total // batch):
                texts = [f"m{b * batch + i}" for i in range(batch)]
                ids = w.qs.send(tenant, "work", [msg(t) for t in texts])
                sent.update(zip(ids, texts))
        finally:
            w.close()
            sending_done.set()

    def consumer(n: int, qs: QueueServer) -> tuple[list[tuple[str, int, str]], int]:
        rng = random.Random(n)
        delivered, acked = [], 0
        while True:
            assert time.monotonic() < deadline, "the queue was not drained in time"
            got = qs.get(tenant, "work", max_messages=rng.randint(1, 50), wait_ms=200)
            if got:
                delivered += [(d.id, d.delivery_count, d.documents[0].data) for d in got]
                acked += qs.ack(tenant, "work", receipts=[d.receipt for d in got])
            elif sending_done.is_set() and counts(qs, tenant, "work")[:2] == (0, 0):
                return delivered, acked

    send_thread = threading.Thread(target=sender)
    send_thread.start()
    try:
        results = run_threads(valkey, 8, consumer)
    finally:
        send_thread.join(timeout=60)
    assert len(sent) == total, "every send returned its ids"

    deliveries = [d for got, _ in results for d in got]
    per_id = Counter(i for i, _, _ in deliveries)
    assert set(per_id) == set(sent), "nothing lost, nothing invented"
    assert [i for i, c in per_id.items() if c > 1] == [], "no message delivered twice"
    assert {dc for _, dc, _ in deliveries} == {1}
    assert all(sent[i] == text for i, _, text in deliveries), "each delivery carries its own document"
    assert sum(acked for _, acked in results) == total
    assert counts(admin.qs, tenant, "work") == (0, 0, 0)
    assert admin.client.hlen(f"aq:{{{tenant}}}:doc") == 0, "acked documents are freed"
    assert audit_tenant(admin.client, tenant) == []
    admin.close()


# A consumer process: gets with random batch sizes and acks by receipt until the
# main process has created the done file and the queue is empty, then prints
# what it got as JSON. The URL (with the password) comes through the environment.
WORKER_CODE = r"""
import json, os, random, sys, time
import redis
from atomq.platform import QueueServer

tenant, queue, done_file, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
client = redis.Redis.from_url(os.environ["ATOMQ_TEST_URL"])
qs = QueueServer(client)
rng = random.Random(seed)
delivered, acked = [], 0
deadline = time.monotonic() + 50
while True:
    if time.monotonic() > deadline:
        sys.exit("worker %d: the queue was not drained in time" % seed)
    got = qs.get(tenant, queue, max_messages=rng.randint(1, 50), wait_ms=200)
    if got:
        delivered += [[d.id, d.delivery_count, d.documents[0].data] for d in got]
        acked += qs.ack(tenant, queue, receipts=[d.receipt for d in got])
    elif os.path.exists(done_file):
        info = qs.get_queue(tenant, queue)
        if info.depth == 0 and info.in_flight == 0:
            break
client.close()
print(json.dumps({"pid": os.getpid(), "delivered": delivered, "acked": acked}))
"""


@pytest.mark.slow
def test_processes_consume_a_queue_exactly_once_while_it_is_filled(valkey, tenant, tmp_path) -> None:
    """4 real processes consume while this one still sends: no duplicate, nothing lost."""
    total, batch = 2000, 100
    admin = Worker(valkey)
    qs = admin.qs
    qs.put_queue(tenant, "work", P2P, ack_timeout_s=60)
    done_file = tmp_path / "sending-done"
    path = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "ATOMQ_TEST_URL": valkey.url, "PYTHONPATH": os.pathsep.join(path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER_CODE, tenant, "work", str(done_file), str(n)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        for n in range(4)
    ]
    sent: dict[str, str] = {}
    try:
        def send_batch(b: int) -> None:
            texts = [f"m{b * batch + i}" for i in range(batch)]
            sent.update(zip(qs.send(tenant, "work", [msg(t) for t in texts]), texts))

        send_batch(0)
        # The rest is sent only once a worker has acked something: the workers
        # provably consume while this process is still sending.
        wait_until(lambda: sum(counts(qs, tenant, "work")[:2]) < batch, 30, "a worker to ack")
        for b in range(1, total // batch):
            send_batch(b)
        done_file.touch()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, f"worker {p.pid} failed:\n{err}"
            outputs.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()

    assert len({o["pid"] for o in outputs}) == 4, "four separate processes"
    deliveries = [tuple(d) for o in outputs for d in o["delivered"]]
    per_id = Counter(i for i, _, _ in deliveries)
    assert len(sent) == total
    assert set(per_id) == set(sent), "nothing lost, nothing invented"
    assert [i for i, c in per_id.items() if c > 1] == [], "no message delivered twice"
    assert {dc for _, dc, _ in deliveries} == {1}
    assert all(sent[i] == text for i, _, text in deliveries)
    assert sum(o["acked"] for o in outputs) == total
    assert counts(qs, tenant, "work") == (0, 0, 0)
    assert admin.client.hlen(f"aq:{{{tenant}}}:doc") == 0
    assert audit_tenant(admin.client, tenant) == []
    admin.close()


# -- racing settle calls -------------------------------------------------------------


def _deliver_all(qs: QueueServer, tenant: str, queue: str, count: int) -> list:
    """Gets until ``count`` messages are in flight (redeliveries may need their delay first)."""
    got: list = []
    deadline = time.monotonic() + 10
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} delivered"
        got += qs.get(tenant, queue, max_messages=1000, wait_ms=1000)
    assert len(got) == count
    return got


def _race(valkey: EmbeddedValkey, count: int, action: Callable[[int, QueueServer], object]) -> list:
    """Runs ``action`` in ``count`` threads released together by a barrier."""
    barrier = threading.Barrier(count)

    def body(n: int, qs: QueueServer) -> object:
        barrier.wait(timeout=30)
        return action(n, qs)

    return run_threads(valkey, count, body)


def _in_shuffled_chunks(values: list[str], seed: int, size: int = 20) -> list[list[str]]:
    values = list(values)
    random.Random(seed).shuffle(values)
    return [values[i : i + size] for i in range(0, len(values), size)]


def test_racing_acks_of_the_same_receipts_ack_each_delivery_once(valkey, tenant) -> None:
    n = 300
    admin = Worker(valkey)
    qs = admin.qs
    qs.put_queue(tenant, "jobs", P2P, ack_timeout_s=60)
    qs.send(tenant, "jobs", [msg(f"m{i}") for i in range(n)])
    receipts = [d.receipt for d in _deliver_all(qs, tenant, "jobs", n)]

    def acker(seed: int, w: QueueServer) -> int:
        return sum(w.ack(tenant, "jobs", receipts=chunk) for chunk in _in_shuffled_chunks(receipts, seed))

    acked = _race(valkey, 8, acker)
    assert sum(acked) == n, f"per thread: {acked}"
    assert counts(qs, tenant, "jobs") == (0, 0, 0)
    assert admin.client.hlen(f"aq:{{{tenant}}}:doc") == 0
    assert audit_tenant(admin.client, tenant) == []
    admin.close()


def test_racing_nacks_of_the_same_ids_fail_each_delivery_once(valkey, tenant) -> None:
    n = 300
    admin = Worker(valkey)
    qs = admin.qs
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=3, ack_timeout_s=60)
    ids = qs.send(tenant, "jobs", [msg(f"m{i}") for i in range(n)])
    _deliver_all(qs, tenant, "jobs", n)

    def nacker(seed: int, w: QueueServer) -> tuple[int, int]:
        results = [w.nack(tenant, "jobs", ids=chunk, reason=f"thread {seed}")
                   for chunk in _in_shuffled_chunks(ids, seed)]
        return sum(r.requeued for r in results), sum(r.dead_lettered for r in results)

    results = _race(valkey, 8, nacker)
    assert sum(r for r, _ in results) == n, f"per thread: {results}"
    assert sum(d for _, d in results) == 0
    assert counts(qs, tenant, "jobs") == (n, 0, 0)
    browsed = browse_all(qs, tenant, "jobs")
    assert [m.id for m in browsed] == ids
    assert {m.failed_deliveries for m in browsed} == {1}, "one failure each, not one per nacking thread"
    assert {m.state for m in browsed} <= {MessageState.SCHEDULED, MessageState.READY}
    redelivered = _deliver_all(qs, tenant, "jobs", n)
    assert {d.delivery_count for d in redelivered} == {2}
    assert audit_tenant(admin.client, tenant) == []
    admin.close()


def test_racing_acks_and_nacks_settle_each_delivery_exactly_once(valkey, tenant) -> None:
    """Ackers (current and stale receipts) race nackers (ids): one of them wins each message."""
    n = 300
    admin = Worker(valkey)
    qs = admin.qs
    qs.put_queue(tenant, "jobs", P2P, max_redeliveries=3, ack_timeout_s=60)
    ids = qs.send(tenant, "jobs", [msg(f"m{i}") for i in range(n)])
    first = _deliver_all(qs, tenant, "jobs", n)
    assert qs.nack(tenant, "jobs", ids=ids).requeued == n
    second = _deliver_all(qs, tenant, "jobs", n)
    stale = [d.receipt for d in first]
    current = [d.receipt for d in second]

    def racer(k: int, w: QueueServer) -> tuple[str, int]:
        if k % 3 == 0:
            return "ack", sum(w.ack(tenant, "jobs", receipts=c) for c in _in_shuffled_chunks(current, k))
        if k % 3 == 1:
            return "nack", sum(w.nack(tenant, "jobs", ids=c).requeued for c in _in_shuffled_chunks(ids, k))
        return "stale", sum(w.ack(tenant, "jobs", receipts=c) for c in _in_shuffled_chunks(stale, k))

    results = _race(valkey, 9, racer)
    won = Counter()
    for kind, done in results:
        won[kind] += done
    assert won["stale"] == 0, "a receipt of an earlier delivery settles nothing"
    assert won["ack"] + won["nack"] == n, f"per thread: {results}"
    assert counts(qs, tenant, "jobs") == (won["nack"], 0, 0)
    left = browse_all(qs, tenant, "jobs")
    assert {m.failed_deliveries for m in left} <= {2}, "the nacked ones failed once more, once"
    assert admin.client.hlen(f"aq:{{{tenant}}}:doc") == won["nack"], "the acked ones' documents are freed"
    assert audit_tenant(admin.client, tenant) == []
    admin.close()


# -- publish/subscribe under concurrency -------------------------------------------------


@pytest.mark.slow
def test_subscribers_created_during_sends_receive_an_unbroken_suffix_in_order(valkey, tenant) -> None:
    """A subscriber gets exactly the batches sent after it exists: a contiguous suffix, in send order.

    Subscribers are made while a sender thread sends batches of 5, some with
    put_subscriber and some by their first get. For each, ``lo`` is the number
    of batches whose send had returned before it was created and ``hi`` the
    number whose send had started when its creation returned: its messages
    must be exactly the batches from some index in [lo, hi] on.
    """
    size, subscribers = 5, 6
    admin = Worker(valkey)
    qs = admin.qs
    qs.put_queue(tenant, "news", PUBSUB, ack_timeout_s=60)
    assert qs.put_subscriber(tenant, "news", "early") is True
    batches: list[list[str]] = []
    started = [0]
    subscribers_made = threading.Event()

    def sender() -> None:
        w = Worker(valkey)
        try:
            after = 0
            while after < 10:  # keep sending until 10 batches after the last subscriber
                if subscribers_made.is_set():
                    after += 1
                b = len(batches)
                assert b < 20_000, "runaway sender"
                started[0] = b + 1
                batches.append(w.qs.send(tenant, "news", [msg(f"b{b}.{i}") for i in range(size)]))
        finally:
            w.close()

    windows: dict[str, tuple[int, int]] = {}
    with ThreadPoolExecutor(max_workers=1) as pool:
        sending = pool.submit(sender)
        try:
            for s in range(subscribers):
                wait_until(lambda: len(batches) >= 4 * (s + 1) or sending.done(), 30, "the sender")
                assert not sending.done(), sending.exception()
                name = f"s{s}"
                lo = len(batches)
                if s % 2:
                    assert qs.get(tenant, "news", subscriber=name) == [], "created empty by its first get"
                else:
                    assert qs.put_subscriber(tenant, "news", name) is True
                windows[name] = (lo, started[0])
        finally:
            subscribers_made.set()
            sending.result(timeout=60)

    sent = [i for b in batches for i in b]
    assert len(set(sent)) == len(sent)
    info = qs.get_queue(tenant, "news")
    assert info.subscribers["early"].depth == len(sent)
    for name in ["early", *windows]:
        received = []
        while got := qs.get(tenant, "news", subscriber=name, max_messages=1000):
            assert {d.delivery_count for d in got} == {1}
            received += [d.id for d in got]
            assert qs.ack(tenant, "news", ids=[d.id for d in got], subscriber=name) == len(got)
        assert info.subscribers[name].depth == len(received)
        start = len(sent) - len(received)
        assert received == sent[start:], f"{name}: not a contiguous suffix in send order"
        assert start % size == 0, f"{name}: a batch was split"
        if name == "early":
            assert start == 0, "the subscriber that existed before the first send gets everything"
        else:
            lo, hi = windows[name]
            assert lo <= start // size <= hi, f"{name}: starts at batch {start // size}, not in [{lo}, {hi}]"
            assert len(received) >= 10 * size
    assert counts(qs, tenant, "news") == (0, 0, 0)
    assert admin.client.hlen(f"aq:{{{tenant}}}:doc") == 0
    assert audit_tenant(admin.client, tenant) == []
    admin.close()
