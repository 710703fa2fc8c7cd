#!/usr/bin/env python3
"""What one request costs the node: CPU of the HTTP worker and of the store, per request, by shape.

atomq: `atomq serve` on its own embedded Valkey, --http-workers W (default 1, so that one process
serves every request and its CPU is the whole cost), no execution workers, one queue. One client
thread sends --requests N requests of each shape one after the other over a keep-alive
requests.Session, so the node serves one request at a time and nothing waits in its queues:

  send1   POST /v1/queues/q/messages with one message of one 100-byte document
  get10   POST /v1/queues/q/get of 10 messages, without waiting (the queue is filled first,
          untimed; what was got stays in flight)
  ack10   POST /v1/queues/q/ack of the 10 receipts of one get10

The CPU is read from /proc (utime + stime of the HTTP workers, the children of the node's master
but its Valkey, and of the Valkey server) before and after each shape; less what each side spends
with nothing sent (its background loops, measured for a few seconds before each round, times the
shape's duration) and divided by N, it is the microseconds of CPU a request of that shape costs
each side. The client's time per request (wall)
is reported beside it. Each shape runs --repeat R times (default 3); the median is reported.

Output: a line per shape on stdout, progress on stderr, and as the LAST stdout line one JSON object
with <shape>_worker_cpu_us, <shape>_valkey_cpu_us and <shape>_wall_us for each shape,
background_worker_cpu_pct and background_valkey_cpu_pct, plus requests, repeat, http_workers,
python, valkey. Exit status 1 when a check fails, 130 on Ctrl-C.
Linux only (/proc).
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from drivers.atomq_http import HttpNode
from drivers.cli import add_http_workers, parser_from_doc
from drivers.run_exit import BenchRun
from drivers.serve_node import check, expect, keep_alive_session, progress

QUEUE = "q"
DOCUMENT = "x" * 100
FILL_BATCH = 100
ACK_TIMEOUT_S = 3600
"""The queue's: a get10 round's deliveries wait for their ack10 round, which on a loaded machine came
after the default 30 s (the acks then found them expired)."""
IDLE_S = 3.0
"""How long the node's background CPU is measured for, with nothing sent, before each round."""


@dataclass(frozen=True)
class Background:
    """What the node spends with no request: each HTTP worker's loops (maintenance, the listener
    supervisor, the overview sampler) and Valkey's own cron, in CPU seconds a second."""

    workers: float
    valkey: float


def idle(node: HttpNode) -> Background:
    before = node.cpu_seconds()
    started = time.perf_counter()
    time.sleep(IDLE_S)  # the measurement is of this time with nothing sent
    wall = time.perf_counter() - started
    after = node.cpu_seconds()
    return Background((after["workers"] - before["workers"]) / wall, (after["valkey"] - before["valkey"]) / wall)


def measured(node: HttpNode, background: Background, shape: Callable[[], None], n: int) -> dict[str, float]:
    """Runs ``shape`` ``n`` times; the CPU of the workers and of Valkey beyond their background, and
    the wall time, per call, in µs."""
    before = node.cpu_seconds()
    started = time.perf_counter()
    for _ in range(n):
        shape()
    wall = time.perf_counter() - started
    after = node.cpu_seconds()
    spent_workers = after["workers"] - before["workers"] - background.workers * wall
    spent_valkey = after["valkey"] - before["valkey"] - background.valkey * wall
    return {"worker_cpu_us": spent_workers / n * 1e6, "valkey_cpu_us": spent_valkey / n * 1e6,
            "wall_us": wall / n * 1e6}


def fill(session: requests.Session, base: str, count: int) -> None:
    for start in range(0, count, FILL_BATCH):
        batch = [{"documents": [{"data": DOCUMENT}]} for _ in range(min(FILL_BATCH, count - start))]
        expect(session.post(f"{base}/v1/queues/{QUEUE}/messages", json={"messages": batch}, timeout=30), 201,
               "filling the queue")


def run(args: Any, bench: BenchRun) -> dict[str, Any]:
    node = HttpNode(args.http_workers or 1)
    bench.at_exit(node.stop)
    node.start()
    node.put_queue(QUEUE, ack_timeout_s=ACK_TIMEOUT_S)
    check(node.proc is not None, "the node did not start")
    workers = node.worker_pids()
    check(len(workers) == (args.http_workers or 1), f"expected {args.http_workers or 1} HTTP workers, found "
                                                    f"{len(workers)} children of the master but its Valkey")
    session = keep_alive_session(node.base, node.tenant_key)
    base, n = node.base, args.requests
    receipts: list[list[str]] = []

    def send1() -> None:
        expect(session.post(f"{base}/v1/queues/{QUEUE}/messages",
                            json={"messages": [{"documents": [{"data": DOCUMENT}]}]}, timeout=30), 201, "send1")

    def get10() -> None:
        got = expect(session.post(f"{base}/v1/queues/{QUEUE}/get", json={"max": 10, "wait_ms": 0}, timeout=30),
                     200, "get10")["messages"]
        check(len(got) == 10, f"get10 got {len(got)} messages")
        receipts.append([m["receipt"] for m in got])

    def ack10() -> None:
        acked = expect(session.post(f"{base}/v1/queues/{QUEUE}/ack", json={"receipts": receipts.pop()}, timeout=30),
                       200, "ack10")["acked"]
        check(acked == 10, f"ack10 acked {acked}")

    runs: dict[str, list[dict[str, float]]] = {"send1": [], "get10": [], "ack10": []}
    backgrounds: list[Background] = []
    for round_ in range(args.repeat):
        progress(f"round {round_ + 1} of {args.repeat}: the background for {IDLE_S:g} s, then {n} requests of "
                 "each shape")
        background = idle(node)
        backgrounds.append(background)
        send1()  # warm: the first request of a connection and of a route costs more
        runs["send1"].append(measured(node, background, send1, n))
        fill(session, base, n * 10 + 10)
        get10()
        runs["get10"].append(measured(node, background, get10, n))
        ack10()
        runs["ack10"].append(measured(node, background, ack10, n))
        check(not receipts, "every get10 was acked")
        expect(session.delete(f"{base}/v1/queues/{QUEUE}/messages", json={"all": True}, timeout=120), 200,
               "emptying the queue")
    session.close()
    out: dict[str, Any] = {}
    for shape, results in runs.items():
        for key in ("worker_cpu_us", "valkey_cpu_us", "wall_us"):
            out[f"{shape}_{key}"] = round(statistics.median(r[key] for r in results), 1)
        print(f"{shape}: {out[f'{shape}_worker_cpu_us']} µs of the HTTP worker's CPU, "
              f"{out[f'{shape}_valkey_cpu_us']} µs of Valkey's, {out[f'{shape}_wall_us']} µs a request at the client")
    assert node.valkey is not None
    out.update(background_worker_cpu_pct=round(statistics.median(b.workers for b in backgrounds) * 100, 2),
               background_valkey_cpu_pct=round(statistics.median(b.valkey for b in backgrounds) * 100, 2))
    print(f"background, with nothing sent: {out['background_worker_cpu_pct']}% of a core in the HTTP workers, "
          f"{out['background_valkey_cpu_pct']}% in Valkey (taken off the figures above)")
    out.update(requests=n, repeat=args.repeat, http_workers=args.http_workers or 1,
               python=platform.python_version(), valkey=str(node.valkey.info("server").get("valkey_version")))
    return out


def main() -> int:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--requests", type=int, default=5000, metavar="N",
                        help="requests of each shape and round (default: 5000)")
    parser.add_argument("--repeat", type=int, default=3, metavar="R",
                        help="rounds of every shape; the median is reported (default: %(default)s)")
    add_http_workers(parser, 1)
    args = parser.parse_args()
    if args.requests < 1 or args.repeat < 1:
        parser.error("--requests and --repeat must be at least 1")
    with BenchRun() as bench:
        print(json.dumps(run(args, bench)))
    return bench.status or 0

if __name__ == "__main__":
    sys.exit(main())
