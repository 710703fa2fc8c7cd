#!/usr/bin/env python3
"""Request bounds: what one tenant's heaviest legal request costs the others.

Five parts (--parts, default all), each on a store or node of its own:

  scripts   an embedded Valkey (AOF everysec) and the library in this
            process: each script at the bounds a request may reach, timed
            by the store itself (SLOWLOG, every call logged), and the CPU
            time Valkey's main thread spent on each call (schedstat: what a
            busy machine's descheduling does not inflate): the most, the
            first call's of each run, and the median and p90 of the later
            calls (the steps of a chunked send, the parts of a get); the longest call of
            --repeat runs (default 3) of each case: a send of 1,000
            messages of 1 KiB; of 1,000 messages of 10 documents of 900 B
            (the request size's bound); a publish of 1,000 messages to a
            topic 100 queues attract, the same of 10 documents of 900 B each,
            and a send of 1,000 to a queue of 100 subscribers (100,000 copies
            each, max_copies_per_request: stored in steps); a get,
            an ack, a nack and a browse page of 1,000 (their bounds), and a
            get, an ack and a browse page of 1,000 of 10 documents of 900 B; a
            delete of 10,000 waiting messages (in chunks); a queue's patterns
            changed when 10,000 are counted afresh (a store an older atomq
            left); last, a one-message publish to the 100,000 destinations of
            the tenant's most queues, each publish/subscribe with its most
            subscribers (their setup takes minutes). --cases runs only the cases it names (get_1000,
            ack_1000x10docs, ...): a store the heavy sends before them did
            not grow, so no rewrite of its append-only file lands in a call
  bystander the same store: a bystander tenant's one-message sends, one
            every 10 ms from a process of their own, for --seconds (default
            10) alone, then while another tenant's process publishes the
            heaviest legal publish (100,000 copies) back to back, then while
            it makes the heaviest legal get (1,000 messages of 10 documents
            of 900 B) back to back, giving each batch back, then while it
            publishes one message to the 100,000 destinations of its most
            queues of their most subscribers (set up first, a minute or
            two) back to back; latency p50, p99 and max of each phase
  matcher   the topic matcher in this process: build time, memory
            (tracemalloc) and one match, at 100 patterns and at the
            tenant's most (10,000 of 250 characters, 120 levels, every
            other level '*')
  changes   an embedded Valkey and two queue servers in this process, a
            tenant of 100 queues at 100 and at 10,000 patterns (as
            matcher): one server caches the matcher, the other replaces one
            queue's patterns; the time until the first has a matcher of the
            store's version again, by a rebuild from every pattern (what each
            worker did before the change log: a fresh server's first
            matcher) and by the update with what moved (a refresh), the
            median of --repeat changes each (the garbage collected before
            each); and the memory (tracemalloc)
            of a matcher updated by one change against one built afresh
  slow      one `atomq serve` (2 HTTP workers): a tenant's one-message
            sends over a keep-alive session, one every 50 ms for --seconds,
            alone and while 1,000 connections from another address
            (127.0.0.2) send a header line each half second and never
            finish their heads, then while 1,000 connections from there send
            a complete head of a send announcing a body of 1,000,000 bytes
            and then that body a byte a second; p50, p99, max and how many
            were answered 201, and what became of the 1,000 (held open,
            refused 503 by a bound per address, answered 408 by a deadline)

Output: lines on stdout, progress on stderr, and as the LAST stdout line one
JSON object: "scripts": {case: {wall_ms, cpu_ms, first_cpu_ms, forks, latest_fork_ms, and for
several calls rest_median_cpu_ms, rest_p90_cpu_ms, and for several scripts
most_cpu_ms_by_script, median_cpu_ms_by_script, dearest_call}}, "bystander": {phase: {p50_ms,
p99_ms, max_ms, sends}}, "matcher": {"100"|"10000": {build_ms, mib,
match_ms}}, "changes": {"100"|"10000": {rebuild_ms, update_ms, updated_mib,
fresh_mib}}, "slow": {phase: {p50_ms, p99_ms, max_ms, sends, answered}}.
Exit status 1 when a check fails, 130 on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import multiprocessing as mp
import os
import random
import socket
import statistics
import string
import sys
import threading
import time
import tracemalloc
from typing import Any

import redis
import requests
from drivers.cli import parser_from_doc
from drivers.embedded import start_valkey
from drivers.run_exit import BenchRun
from drivers.serve_node import ServeNode, check, expect, progress

from atomq import defaults
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
from atomq.platform.queues.topics import TopicMatcher
from atomq.platform.store import keys as k

PARTS = ("scripts", "bystander", "matcher", "changes", "slow")
KIB = b"x" * 1024
HEAVY, PUBLISHER, BYSTANDER = "t_000000bea7y0", "t_0000publ1sh", "t_00000b7s7and"
WIDEST = "t_0000w1de5t00"  # a tenant of its own: the widest fan-out takes all of a tenant's queues


def one_kib(n: int, docs: int = 1, size: int = 1024) -> list[OutgoingMessage]:
    return [OutgoingMessage(documents=tuple(OutgoingDocument(b"x" * size) for _ in range(docs))) for _ in range(n)]


def longest_script_ms(client: redis.Redis, run: Any) -> float:
    """The longest script call the store logged while ``run()`` ran, in ms."""
    client.slowlog_reset()
    run()
    entries = client.slowlog_get(100_000)
    durations = [e["duration"] for e in entries if (e["command"] or b"").split(b" ", 1)[0].upper() == b"EVALSHA"]
    check(bool(durations), "the store logged no script")
    return max(durations) / 1000


def main_thread_cpu_ns(pid: int) -> int:
    """CPU time Valkey's main thread (which runs every script) has used, in ns (schedstat)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def script_cpu_ms(qs: QueueServer, pid: int, run: Any, names: list[str] | None = None) -> list[float]:
    """The CPU time of Valkey's main thread each script call of ``run()`` took, in order, in ms:
    unlike SLOWLOG's wall time, a figure a busy machine (the store descheduled mid-script) leaves
    far less inflated. Each call's script name is appended to ``names``."""
    storage, spent = qs.storage, []
    plain, durably = storage.run, storage.run_durably

    def timed(call: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            before = main_thread_cpu_ns(pid)
            try:
                return call(*args, **kwargs)
            finally:
                spent.append((main_thread_cpu_ns(pid) - before) / 1e6)
                if names is not None:
                    names.append(args[0])
        return wrapper

    storage.run, storage.run_durably = timed(plain), timed(durably)  # type: ignore[method-assign]
    try:
        run()
    finally:
        del storage.run, storage.run_durably
    return spent


def script_cases(qs: QueueServer) -> dict[str, Any]:
    """Each case's setup (untimed) and its timed run."""
    t = HEAVY
    fan_topic = "fan/all"

    def fan_out() -> None:
        for q in range(100):
            qs.put_queue(t, f"fan{q}", "point_to_point", topics=[fan_topic])

    def subscribed() -> None:
        qs.put_queue(t, "news", "publish_subscribe")
        for s in range(100):
            qs.put_subscriber(t, "news", f"s{s}")

    def waiting(n: int, docs: int = 1, size: int = 1024) -> None:
        qs.put_queue(t, "work", "point_to_point")
        qs.delete_messages(t, "work", all=True)
        for _ in range(n // 1000):
            qs.send(t, "work", one_kib(1000, docs, size))

    def taken_of(docs: int, size: int) -> None:
        waiting(1000, docs, size)
        taken["r"] = [d.receipt for d in qs.get(t, "work", max_messages=1000)]

    def patterns() -> None:
        for q in range(100):
            qs.delete_queue(t, f"fan{q}") if f"fan{q}" in names() else None
        for q in range(100):
            qs.put_queue(t, f"pat{q}", "point_to_point", topics=[f"p/{q}/{i}/*/>" for i in range(100)])
        qs.client.hdel(k.TenantKeys(t).topic_patterns, "#n")

    def names() -> set[str]:
        return {q.name for q in qs.list_queues(t)}

    def due_held() -> None:
        """1,000 messages of 10 documents of 900 B in flight (their receipts kept), then 1,000
        due redeliveries and 1,000 expired messages of that size that their dead_letter_queue
        takes, none swept yet: what a get's or a settle's parts sweep first."""
        qs.put_queue(t, "stale_dead", "point_to_point")
        qs.put_queue(t, "stale", "point_to_point", max_redeliveries=5, dead_letter_queue="stale_dead")
        for name in ("stale", "stale_dead"):
            qs.delete_messages(t, name, all=True)
        qs.send(t, "stale", one_kib(1000, 10, 900))
        taken["r"] = [d.receipt for d in qs.get(t, "stale", max_messages=1000)]
        qs.send(t, "stale", one_kib(1000, 10, 900))
        qs.release(t, "stale", receipts=[d.receipt for d in qs.get(t, "stale", max_messages=1000)], delay_s=0.1)
        qs.send(t, "stale", [dataclasses.replace(m, ttl_s=0.1) for m in one_kib(1000, 10, 900)])
        time.sleep(0.2)
        # A call of nothing: the store's first call after that pause cost up to 100 ms more,
        # whatever it was (BENCHMARKS.md), and that is not the timed call's.
        qs.ack(t, "stale_dead", ids=["0-0"])

    def exclusive() -> None:
        qs.put_queue(t, "excl", "point_to_point", access="exclusive")
        qs.delete_messages(t, "excl", all=True)

    def widest() -> None:
        """The tenant's most queues, each publish/subscribe with its most subscribers, all
        attracting one topic: a one-message publish reaches 100,000 destinations."""
        held = names()
        for name in held - {f"wide{q}" for q in range(defaults.MAX_QUEUES_PER_TENANT)}:
            qs.delete_queue(t, name)
        for q in range(defaults.MAX_QUEUES_PER_TENANT):
            if f"wide{q}" not in held:
                qs.put_queue(t, f"wide{q}", "publish_subscribe", topics=["wide/all"])
                for s in range(defaults.MAX_SUBSCRIBERS):
                    qs.put_subscriber(t, f"wide{q}", f"s{s}")

    taken: dict[str, list[str]] = {}
    return {
        "send_1000x1KiB": (lambda: waiting(0), lambda: qs.send(t, "work", one_kib(1000))),
        "send_1000x10docs": (lambda: waiting(0), lambda: qs.send(t, "work", one_kib(1000, 10, 900))),
        "publish_100000_copies": (fan_out, lambda: qs.publish(t, fan_topic, one_kib(1000))),
        "publish_100000_copies_10docs": (fan_out, lambda: qs.publish(t, fan_topic, one_kib(1000, 10, 900))),
        "send_pubsub_100000_copies": (subscribed, lambda: qs.send(t, "news", one_kib(1000))),
        "get_1000": (lambda: waiting(1000),
                     lambda: taken.__setitem__("r", [d.receipt for d in qs.get(t, "work", max_messages=1000)])),
        "ack_1000": (lambda: taken.__setitem__("r", [d.receipt for d in (waiting(1000) or qs.get(
            t, "work", max_messages=1000))]), lambda: qs.ack(t, "work", receipts=taken["r"])),
        "nack_1000": (lambda: taken.__setitem__("r", [d.receipt for d in (waiting(1000) or qs.get(
            t, "work", max_messages=1000))]), lambda: qs.nack(t, "work", receipts=taken["r"], reason="bench")),
        "browse_1000": (lambda: waiting(1000), lambda: qs.browse(t, "work", limit=1000)),
        "get_1000x10docs": (lambda: waiting(1000, 10, 900), lambda: qs.get(t, "work", max_messages=1000)),
        "ack_1000x10docs": (lambda: taken_of(10, 900), lambda: qs.ack(t, "work", receipts=taken["r"])),
        "browse_1000x10docs": (lambda: waiting(1000, 10, 900), lambda: qs.browse(t, "work", limit=1000)),
        "get_1000x10docs_after_1000_due": (due_held, lambda: qs.get(t, "stale", max_messages=1000)),
        "ack_1000x10docs_after_1000_due": (due_held, lambda: qs.ack(t, "stale", receipts=taken["r"])),
        "send_1000x10docs_exclusive": (exclusive, lambda: qs.send(t, "excl", one_kib(1000, 10, 900))),
        "delete_10000_waiting": (lambda: waiting(10_000), lambda: qs.delete_messages(t, "work", all=True)),
        "patterns_recounted_10000": (patterns, lambda: qs.put_queue(t, "pat0", "point_to_point", topics=["p/x"])),
        "publish_100000_destinations": (widest, lambda: qs.publish(t, "wide/all", one_kib(1))),
    }


def run_scripts(qs: QueueServer, repeat: int, only: list[str] | None = None, slowlog: bool = True) -> dict[str, Any]:
    client = qs.client
    if slowlog:
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
    pid = int(client.info("server")["process_id"])
    out: dict[str, Any] = {}
    for case, (setup, timed) in script_cases(qs).items():
        if only and case not in only:
            continue
        runs, cpu, names, forks = [], [], [], 0
        for _ in range(repeat):
            setup()
            before = int(client.info("stats")["total_forks"])
            if slowlog:
                runs.append(longest_script_ms(client, lambda: cpu.append(script_cpu_ms(qs, pid, timed, names))))
            else:
                cpu.append(script_cpu_ms(qs, pid, timed, names))
                runs.append(0.0)
            forks += int(client.info("stats")["total_forks"]) - before
        # A fork (an append-only file's rewrite) costs the main thread tens of ms of a store this big,
        # counted in the call it lands in: the case's figures say how many landed.
        out[case] = {"wall_ms": max(runs), "cpu_ms": round(max(max(c) for c in cpu), 1),
                     "first_cpu_ms": [round(c[0], 1) for c in cpu], "forks": forks,
                     "latest_fork_ms": round(int(client.info("stats")["latest_fork_usec"]) / 1000, 1)}
        by_script: dict[str, float] = {}
        for name, ms in zip(names, (ms for c in cpu for ms in c)):
            by_script[name] = round(max(ms, by_script.get(name, 0.0)), 1)
        if len(by_script) > 1:  # a staged or chunked request: the most of each of its scripts
            out[case]["most_cpu_ms_by_script"] = by_script
            calls = list(zip(names, (ms for c in cpu for ms in c)))
            at = max(range(len(calls)), key=lambda i: calls[i][1])
            same = [i for i, (name, _) in enumerate(calls) if name == calls[at][0]]
            out[case]["dearest_call"] = {"script": calls[at][0], "its_call": same.index(at) + 1, "of": len(same)}
            out[case]["median_cpu_ms_by_script"] = {
                name: round(statistics.median(ms for n, ms in calls if n == name), 1) for name in by_script}
        rest = sorted(ms for c in cpu for ms in c[1:])
        if len(rest) > 1:  # a chunked send's steps after its first: their spread
            out[case].update(rest_median_cpu_ms=round(statistics.median(rest), 1),
                             rest_p90_cpu_ms=round(rest[int(len(rest) * 0.9)], 1))
        progress(f"  {case}: longest script {out[case]['wall_ms']:.1f} ms; CPU {out[case]}")
    if slowlog:
        client.config_set("slowlog-log-slower-than", 10_000)
    return out


def latencies(ms: list[float]) -> dict[str, Any]:
    ordered = sorted(ms)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
            "max_ms": round(ordered[-1], 2), "sends": len(ordered)}


def bystander_sends(url: str, seconds: float, out: Any) -> None:
    """A process of its own: one one-message send every 10 ms, each timed."""
    qs = QueueServer(redis.Redis.from_url(url))
    qs.put_queue(BYSTANDER, "mine", "point_to_point")
    timings = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        qs.send(BYSTANDER, "mine", one_kib(1))
        timings.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.01)
    out.put(timings)


def heavy_publishes(url: str, stop: Any) -> None:
    """A process of its own: the heaviest legal publish, back to back, its queues emptied between."""
    qs = QueueServer(redis.Redis.from_url(url))
    for q in range(100):
        qs.put_queue(PUBLISHER, f"heavy{q}", "point_to_point", topics=["heavy/all"])
    batch = one_kib(1000)
    while not stop.is_set():
        qs.publish(PUBLISHER, "heavy/all", batch)
        for q in range(100):
            qs.delete_messages(PUBLISHER, f"heavy{q}", all=True)


def heavy_gets(url: str, stop: Any) -> None:
    """A process of its own: the heaviest legal get, of 1,000 messages of 10 documents of 900 B, back to
    back, each batch given back at once (a release) for the next."""
    qs = QueueServer(redis.Redis.from_url(url))
    qs.put_queue(PUBLISHER, "heavyget", "point_to_point")
    qs.send(PUBLISHER, "heavyget", one_kib(1000, 10, 900))
    while not stop.is_set():
        got = qs.get(PUBLISHER, "heavyget", max_messages=1000)
        qs.release(PUBLISHER, "heavyget", receipts=[d.receipt for d in got], delay_s=0)


def widest_queues(url: str) -> None:
    """A tenant's most queues, each publish/subscribe with its most subscribers, attracting
    one topic (untimed: it takes a minute or two)."""
    qs = QueueServer(redis.Redis.from_url(url))
    for q in range(defaults.MAX_QUEUES_PER_TENANT):
        qs.put_queue(WIDEST, f"widest{q}", "publish_subscribe", topics=["widest/all"])
        for s in range(defaults.MAX_SUBSCRIBERS):
            qs.put_subscriber(WIDEST, f"widest{q}", f"s{s}")


def widest_publishes(url: str, stop: Any) -> None:
    """A process of its own: one-message publishes to the 100,000 destinations of ``widest_queues``,
    back to back (each is some thousands of steps)."""
    qs = QueueServer(redis.Redis.from_url(url))
    while not stop.is_set():
        qs.publish(WIDEST, "widest/all", one_kib(1))


def run_bystander(url: str, seconds: float) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    out: dict[str, Any] = {}
    heavies = {"heaviest_publish": heavy_publishes, "heaviest_get": heavy_gets, "widest_publish": widest_publishes}
    for phase in ("alone", *heavies):
        if phase == "widest_publish":
            progress("  the widest publish's 100,000 destinations (a minute or two)")
            widest_queues(url)
        stop, results = ctx.Event(), ctx.Queue()
        heavy = ctx.Process(target=heavies[phase], args=(url, stop)) if phase != "alone" else None
        if heavy is not None:
            heavy.start()
            time.sleep(2)  # its queues made and its first publishes under way
        sender = ctx.Process(target=bystander_sends, args=(url, seconds, results))
        sender.start()
        timings = results.get(timeout=seconds + 120)
        sender.join(30)
        if heavy is not None:
            stop.set()
            heavy.join(120)
            check(heavy.exitcode == 0, f"the heavy requests of {phase} failed")
        out[phase] = latencies(timings)
        progress(f"  {phase}: {out[phase]}")
    return out


def run_matcher() -> dict[str, Any]:
    rng = random.Random(1)
    out: dict[str, Any] = {}

    def deep() -> str:
        return "/".join("*" if i % 2 else rng.choice(string.ascii_lowercase) for i in range(120))[:250].rstrip("/")

    for count in (100, 10_000):
        patterns = {f"q{q}": [deep() for _ in range(count // 100)] for q in range(100)}
        tracemalloc.start()
        t0 = time.perf_counter()
        matcher = TopicMatcher(patterns)
        build = time.perf_counter() - t0
        mib = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        topic = "/".join(rng.choice(string.ascii_lowercase) for _ in range(120))
        t0 = time.perf_counter()
        matcher.match(topic)
        out[str(count)] = {"build_ms": round(build * 1000, 1), "mib": round(mib, 1),
                           "match_ms": round((time.perf_counter() - t0) * 1000, 3)}
        progress(f"  {count} patterns: {out[str(count)]}")
    return out


def run_changes(client: redis.Redis, repeat: int) -> dict[str, Any]:
    rng = random.Random(2)
    out: dict[str, Any] = {}

    def deep() -> str:
        return "/".join("*" if i % 2 else rng.choice(string.ascii_lowercase) for i in range(120))[:250].rstrip("/")

    cached, changer = QueueServer(client), QueueServer(client)
    for count in (100, 10_000):
        tenant = f"t_{count:012d}"
        patterns = {f"q{q}": [deep() for _ in range(count // 100)] for q in range(100)}
        for queue, ps in patterns.items():
            changer.put_queue(tenant, queue, "point_to_point", topics=ps)
        cached.topic_matchers.matcher(tenant)
        counted = (cached.topic_matchers.rebuilds, cached.topic_matchers.updates)
        rebuilds, updates = [], []
        for i in range(repeat):
            patterns["q7"] = [deep() for _ in range(count // 100)]
            changer.put_queue(tenant, "q7", "point_to_point", topics=patterns["q7"])
            fresh = QueueServer(client)
            gc.collect()  # neither timing gets the collector's pass over the other's garbage
            t0 = time.perf_counter()
            cached.topic_matchers.matcher(tenant, refresh=True)
            updates.append(time.perf_counter() - t0)
            gc.collect()
            t0 = time.perf_counter()
            fresh.topic_matchers.matcher(tenant)
            rebuilds.append(time.perf_counter() - t0)
            del fresh
        check((cached.topic_matchers.rebuilds, cached.topic_matchers.updates) == (counted[0], counted[1] + repeat),
              "the cached server rebuilt its matcher after a change")
        check(cached.topic_matchers.matcher(tenant)[1].patterns == {q: tuple(ps) for q, ps in patterns.items()},
              "the updated matcher holds other patterns than the store")
        before, patterns["q7"] = dict(patterns), [deep() for _ in range(count // 100)]
        tracemalloc.start()
        matcher = TopicMatcher(before)
        matcher = matcher.updated({"q7": patterns["q7"]})
        updated_mib = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        tracemalloc.start()
        matcher = TopicMatcher(patterns)
        fresh_mib = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        out[str(count)] = {"rebuild_ms": round(statistics.median(rebuilds) * 1000, 2),
                           "update_ms": round(statistics.median(updates) * 1000, 2),
                           "updated_mib": round(updated_mib, 1), "fresh_mib": round(fresh_mib, 1)}
        progress(f"  {count} patterns: {out[str(count)]}")
    return out


def run_slow(seconds: float, bench: BenchRun) -> dict[str, Any]:
    node = ServeNode("atomq-bench-bounds-", 2)
    bench.at_exit(node.stop)
    node.start()
    owner = {"Authorization": f"Bearer {node.owner_key}"}
    tenant = expect(requests.post(f"{node.base}/v1/tenants", json={"name": "steady"}, headers=owner, timeout=10),
                    201, "creating the tenant")
    headers = {"Authorization": f"Bearer {tenant['api_key']}"}
    expect(requests.put(f"{node.base}/v1/queues/q", json={"model": "point_to_point"}, headers=headers, timeout=10),
           201, "creating the queue")
    body_head = (f"POST /v1/queues/q/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tenant['api_key']}\r\n"
                 "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{").encode()
    # What each slow connection sends first, then again and again, and how often.
    phases = {"alone": None, "1000_slow_connections": (b"GET /v1/queues HTTP/1.1\r\nHost: x\r\n", b"X-Slow: 1\r\n", 0.5),
              "1000_slow_bodies": (body_head, b"x", 1.0)}
    out: dict[str, Any] = {}
    for phase, sends in phases.items():
        slow: list[socket.socket] = []
        stop = threading.Event()
        trickler = None
        if sends is not None:
            first, again, every = sends
            for _ in range(1000):
                conn = socket.create_connection(("127.0.0.1", node.port), timeout=10, source_address=("127.0.0.2", 0))
                try:
                    conn.sendall(first)
                except OSError:
                    pass  # refused at once: past the address's bound
                slow.append(conn)

            def trickle() -> None:
                while not stop.wait(every):
                    for c in slow:
                        try:
                            c.sendall(again)
                        except OSError:
                            pass

            trickler = threading.Thread(target=trickle)
            trickler.start()
        timings, answered = [], 0
        with requests.Session() as session:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                try:
                    r = session.post(f"{node.base}/v1/queues/q/messages", headers=headers, timeout=30,
                                     json={"messages": [{"documents": [{"data": "x" * 1024}]}]})
                    answered += r.status_code == 201
                except requests.RequestException:
                    pass
                timings.append((time.perf_counter() - t0) * 1000)
                time.sleep(0.05)
        stop.set()
        if trickler is not None:
            trickler.join()
        fates = {"refused_503": 0, "timed_out_408": 0, "closed": 0, "open": 0}
        for c in slow:
            c.setblocking(False)
            try:
                head = c.recv(200)
            except BlockingIOError:
                head = None
            except OSError:
                head = b"HTTP/1.1 503"  # reset after the refusal
            fates["open" if head is None else "closed" if not head else "refused_503"
                  if head.startswith(b"HTTP/1.1 503") else "timed_out_408"] += 1
            c.close()
        out[phase] = {**latencies(timings), "answered": answered, **({"slow": fates} if slow else {})}
        progress(f"  {phase}: {out[phase]}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = parser_from_doc(__doc__ or "")
    parser.add_argument("--parts", default=",".join(PARTS), help="comma-separated, of: " + ", ".join(PARTS))
    parser.add_argument("--repeat", type=int, default=3, metavar="R", help="runs of each script case")
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S", help="length of each timed phase")
    parser.add_argument("--no-slowlog", action="store_true",
                        help="scripts: time by CPU only, SLOWLOG left as it is (logging every call, as the "
                             "default does, costs the scripts themselves: up to ~120 ms in a first call seen)")
    parser.add_argument("--cases", default="", help="comma-separated script cases to run (default all): a "
                                                    "store that held no earlier case's messages")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    if not parts or any(p not in PARTS for p in parts) or args.repeat < 1 or args.seconds <= 0:
        parser.error(f"--parts takes some of {', '.join(PARTS)}; --repeat and --seconds must be positive")
    results: dict[str, Any] = {}
    with BenchRun() as bench:
        if "scripts" in parts or "bystander" in parts or "changes" in parts:
            client, version = start_valkey(bench, HEAVY)
            url = "unix://:{password}@{path}".format(
                password=client.connection_pool.connection_kwargs["password"],
                path=client.connection_pool.connection_kwargs["path"])
            if "scripts" in parts:
                progress(f"scripts at their bounds (Valkey {version})")
                results["scripts"] = run_scripts(QueueServer(client), args.repeat,
                                                 [c for c in args.cases.split(",") if c], not args.no_slowlog)
            if "bystander" in parts:
                progress("a bystander's sends, alone and beside the heaviest legal publish and get")
                results["bystander"] = run_bystander(url, args.seconds)
            if "changes" in parts:
                progress("a cached matcher after one queue's patterns change, rebuilt and updated")
                results["changes"] = run_changes(client, args.repeat)
        if "matcher" in parts:
            progress("the topic matcher at 100 and 10,000 patterns")
            results["matcher"] = run_matcher()
        if "slow" in parts:
            progress("a tenant's sends, alone and beside 1,000 slow connections")
            results["slow"] = run_slow(args.seconds, bench)
    if bench.status is not None:
        return bench.status
    for part, figures in results.items():
        for case, value in figures.items():
            print(f"{part:<10} {case:<28} {value}")
    print(json.dumps({**results, "cpus": os.cpu_count()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
