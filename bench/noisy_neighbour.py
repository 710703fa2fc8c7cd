#!/usr/bin/env python3
"""Noisy neighbour: a steady tenant's send latency while another tenant floods.

One `atomq serve` (--http-workers, default 2) in a temporary data directory,
two tenants made through the API:

  steady  one thread, one POST /v1/queues/Q/messages of 10 messages (one 1 KiB
          document each) every --interval-ms (default 20 ms: 50 requests/s) on
          a fixed schedule (a late request goes at once; none is skipped);
          each request's latency is timed with time.perf_counter around the
          POST, over a keep-alive requests.Session
  flood   --flood-threads threads (default 4) in a process of their own (so
          they do not hold this process's GIL against the steady thread), each
          with its own keep-alive session, sending requests of 100 x 1 KiB
          messages back to back; a 429 (rate limited) is counted and retried
          at once

Three phases of --seconds each (default 10):

  alone     the steady tenant only
  flood     steady + flood, the flood tenant without a rate limit
  limited   steady + flood, the flood tenant's rate_limit_per_minute PATCHed to
            --flood-limit (default 300 requests a minute; the window is 60 s,
            so it is used up in the first second and the rest of the phase
            the flood gets 429s)

The flood's queue is deleted and made again between phases; the steady
tenant's queue is left to grow (50 x 10 messages a second is small).

Output: a line per phase on stdout (steady p50, p99 and max latency in ms,
steady requests done, flood messages accepted per second, flood 429s), progress
on stderr, and as the LAST stdout line one JSON object with those figures per
phase. The node is stopped (SIGTERM) and its directory removed at the end,
also on an error or Ctrl-C. Exit status 1 on a failure (any steady request
not answered 201, any flood answer other than 201 or 429), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import signal
import sys
import threading
import time
from typing import Any

import requests

from drivers.cli import add_http_workers, parser_from_doc
from drivers.run_exit import BenchRun
from drivers.serve_node import BenchError, ServeNode, expect, progress

PAYLOAD_BYTES = 1024
STEADY_BATCH = 10
FLOOD_BATCH = 100
PHASES = ("alone", "flood", "limited")


class Node(ServeNode):
    """The bench's ``atomq serve``, with the untimed calls the phases need."""

    def __init__(self, http_workers: int) -> None:
        # No listeners here: execution workers (serve starts 2 by default) would only take CPU.
        super().__init__("atomq-bench-noisy-", http_workers, workers=0)

    # the API, untimed

    def owner(self, method: str, path: str, body: dict[str, Any], status: int, what: str) -> Any:
        return expect(requests.request(method, f"{self.base}{path}", json=body, timeout=30,
                                       headers={"Authorization": f"Bearer {self.owner_key}"}), status, what)

    def put_queue(self, key: str, name: str) -> None:
        expect(requests.put(f"{self.base}/v1/queues/{name}", json={"model": "point_to_point"}, timeout=30,
                            headers={"Authorization": f"Bearer {key}"}), 201, f"creating queue {name}")

    def delete_queue(self, key: str, name: str) -> None:
        expect(requests.delete(f"{self.base}/v1/queues/{name}", timeout=60,
                               headers={"Authorization": f"Bearer {key}"}), 204, f"deleting queue {name}")


class FloodProcess:
    """The flood tenant's client threads, in a forked process of their own.

    So the flood's client-side CPU does not take the bench process's GIL from
    the steady thread (both still share the machine's CPUs with the server).
    Counters live in shared memory: [accepted requests, 429s] per thread.
    """

    def __init__(self, node: Node, key: str, url: str, body: bytes, threads: int) -> None:
        ctx = mp.get_context("fork")
        self.threads = threads
        self.shared = ctx.Array("q", 2 * threads, lock=False)
        self.err = ctx.Array("c", 400, lock=False)
        self.ready = ctx.Event()
        self.halt = ctx.Event()
        self.proc = ctx.Process(target=self._main, args=(node.base, key, url, body), daemon=True)

    def _main(self, base: str, key: str, url: str, body: bytes) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

        def fail(text: str) -> None:
            self.err.value = text.encode(errors="replace")[:399]
            self.halt.set()

        def work(i: int, s: requests.Session) -> None:
            try:
                while not self.halt.is_set():
                    r = s.post(url, data=body, headers=HEADERS, timeout=60)
                    if r.status_code == 201:
                        self.shared[2 * i] += 1
                    elif r.status_code == 429:
                        self.shared[2 * i + 1] += 1
                    else:
                        fail(f"flood: HTTP {r.status_code}: {r.text[:200]}")
                        return
            except Exception as exc:  # noqa: BLE001 - handed to the parent
                fail(f"flood: {type(exc).__name__}: {exc}")

        sessions = []
        for _ in range(self.threads):
            s = requests.Session()
            s.headers["Authorization"] = f"Bearer {key}"
            s.get(f"{base}/v1/health", timeout=30)
            sessions.append(s)
        ts = [threading.Thread(target=work, args=(i, s), daemon=True) for i, s in enumerate(sessions)]
        for t in ts:
            t.start()
        self.ready.set()
        for t in ts:
            t.join()

    def start(self) -> None:
        self.proc.start()
        if not self.ready.wait(60):
            raise BenchError("the flood process did not start")

    def counts(self) -> tuple[int, int]:
        values = list(self.shared)
        return sum(values[0::2]), sum(values[1::2])

    def error(self) -> str:
        return str(self.err.value.decode(errors="replace"))

    def stop(self) -> None:
        self.halt.set()
        self.proc.join(90)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(10)


def body_of(n: int) -> bytes:
    text = os.urandom(PAYLOAD_BYTES // 2).hex()  # a JSON document's data is text: 1,024 characters
    return json.dumps({"messages": [{"documents": [{"data": text}]} for _ in range(n)]}).encode()


HEADERS = {"Content-Type": "application/json"}


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]


def run_phase(node: Node, name: str, steady_key: str, flood_key: str | None, seconds: float,
              interval_s: float, flood_threads: int) -> dict[str, Any]:
    url_steady = f"{node.base}/v1/queues/steady/messages"
    url_flood = f"{node.base}/v1/queues/flood/messages"
    steady_body = body_of(STEADY_BATCH)
    flood_body = body_of(FLOOD_BATCH)
    errors: list[str] = []
    flood_proc = None
    if flood_key is not None:
        flood_proc = FloodProcess(node, flood_key, url_flood, flood_body, flood_threads)
    steady = node.session(steady_key)
    for _ in range(5):  # warm the steady connection (untimed)
        expect(steady.post(url_steady, data=steady_body, headers=HEADERS, timeout=30), 201, "steady warm-up")
    latencies: list[float] = []
    try:
        if flood_proc is not None:
            flood_proc.start()
            time.sleep(0.5)  # let the flood get going before the steady tenant is measured
        start = time.perf_counter()
        flood_before = flood_proc.counts() if flood_proc else (0, 0)
        n = 0
        while not errors:
            due = start + n * interval_s
            if due >= start + seconds:
                break
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            t0 = time.perf_counter()
            r = steady.post(url_steady, data=steady_body, headers=HEADERS, timeout=60)
            latencies.append(time.perf_counter() - t0)
            if r.status_code != 201:
                errors.append(f"steady: HTTP {r.status_code}: {r.text[:200]}")
            n += 1
            if flood_proc is not None and flood_proc.error():
                errors.append(flood_proc.error())
        elapsed = time.perf_counter() - start
        flood_after = flood_proc.counts() if flood_proc else (0, 0)
    finally:
        steady.close()
        if flood_proc is not None:
            flood_proc.stop()
    if flood_proc is not None and flood_proc.error() and not errors:
        errors.append(flood_proc.error())
    if errors:
        raise BenchError(f"phase {name}: {errors[0]}")
    accepted = flood_after[0] - flood_before[0]
    refused = flood_after[1] - flood_before[1]
    lat = sorted(x * 1000 for x in latencies)
    return {
        "steady_p50_ms": round(percentile(lat, 50), 2),
        "steady_p99_ms": round(percentile(lat, 99), 2),
        "steady_max_ms": round(lat[-1], 2),
        "steady_requests": len(lat),
        "steady_requests_per_s": round(len(lat) / elapsed, 1),
        "flood_msgs_per_s": round(accepted * FLOOD_BATCH / elapsed) if flood_key else None,
        "flood_429s": refused if flood_key else None,
        "seconds": round(elapsed, 2),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, metavar="S",
                        help="length of each phase (default: %(default)s)")
    parser.add_argument("--interval-ms", type=float, default=20.0, metavar="MS",
                        help="the steady tenant's interval between requests (default: %(default)s)")
    parser.add_argument("--flood-threads", type=int, default=4, metavar="N",
                        help="the flood tenant's client threads (default: %(default)s)")
    parser.add_argument("--flood-limit", type=int, default=300, metavar="L",
                        help="the flood tenant's rate_limit_per_minute in the limited phase (default: %(default)s)")
    add_http_workers(parser, default=2)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.interval_ms <= 0:
        parser.error("--seconds and --interval-ms must be positive")
    if args.flood_threads < 1 or args.flood_limit < 1 or args.http_workers < 1:
        parser.error("--flood-threads, --flood-limit and --http-workers must be at least 1")
    return args



def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with BenchRun() as bench:
        node = Node(args.http_workers)
        bench.at_exit(node.stop)
        progress(f"starting atomq serve on 127.0.0.1:{node.port} ({args.http_workers} http workers)")
        node.start()
        steady = node.owner("POST", "/v1/tenants", {"name": "steady", "rate_limit_per_minute": 0}, 201,
                            "creating tenant steady")
        flood = node.owner("POST", "/v1/tenants", {"name": "flood", "rate_limit_per_minute": 0}, 201,
                           "creating tenant flood")
        node.put_queue(steady["api_key"], "steady")
        node.put_queue(flood["api_key"], "flood")
        for phase in PHASES:
            if phase == "limited":
                node.owner("PATCH", f"/v1/tenants/{flood['id']}", {"rate_limit_per_minute": args.flood_limit},
                           200, "setting the flood tenant's rate limit")
                time.sleep(3)  # the workers re-read a tenant's limit every 2 s
            progress(f"phase {phase}: {args.seconds:g} s")
            results[phase] = run_phase(node, phase, steady["api_key"],
                                       None if phase == "alone" else flood["api_key"],
                                       args.seconds, args.interval_ms / 1000, args.flood_threads)
            progress(f"  {results[phase]}")
            if phase != "alone":
                node.delete_queue(flood["api_key"], "flood")
                node.put_queue(flood["api_key"], "flood")
    if bench.status is not None:
        return bench.status
    print(f"{'phase':<8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'steady req':>10} "
          f"{'flood msg/s':>11} {'flood 429s':>10}")
    for phase, r in results.items():
        fm = "-" if r["flood_msgs_per_s"] is None else f"{r['flood_msgs_per_s']:,}"
        f4 = "-" if r["flood_429s"] is None else f"{r['flood_429s']:,}"
        print(f"{phase:<8} {r['steady_p50_ms']:>8.2f} {r['steady_p99_ms']:>8.2f} {r['steady_max_ms']:>8.2f} "
              f"{r['steady_requests']:>10} {fm:>11} {f4:>10}")
    print(json.dumps({**results, "seconds": args.seconds, "interval_ms": args.interval_ms,
                      "flood_threads": args.flood_threads, "flood_limit_per_minute": args.flood_limit,
                      "http_workers": args.http_workers, "cpus": os.cpu_count(),
                      "python": platform.python_version()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
