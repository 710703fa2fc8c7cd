#!/usr/bin/env python3
"""The SQS endpoint against the native API on the same node: messages a second, and what a request of
10 messages costs the node through each.

atomq: `atomq serve` on its own embedded Valkey (--http-workers W, default the command's own), no
execution workers, one tenant with its SQS credentials. Four phases, in this order each round, each
moving --messages N messages of 1,024 bytes with --clients C threads (default 4), each thread with its
own keep-alive connection (a boto3 client of its own for the SQS phases):

  boto3_send          SendMessageBatch of 10 entries to queue "sqs"
  native_send_10      POST /v1/queues/native/messages of 10 messages
  boto3_consume       ReceiveMessage of 10 (WaitTimeSeconds 0) + DeleteMessageBatch of what came,
                      until a receive finds nothing
  native_consume_10   POST /v1/queues/native/get of 10 (wait_ms 0) + POST /v1/queues/native/ack of
                      their receipts, until a get finds nothing

The consume phases make two requests per 10 messages through both APIs, so a request compares with a
request of the same size. The node's CPU is read from /proc (utime + stime of the HTTP workers, the
children of the node's master but its Valkey, and of that Valkey) around each phase, less what it
spends with nothing sent (measured for a few seconds before each round, times the phase's duration),
and divided by the phase's requests. Each figure is the median of --repeat R rounds (default 3).

Output: a line per phase on stdout, progress on stderr, and as the LAST stdout line one JSON object
with boto3_send, boto3_consume, native_send_10, native_consume_10 (messages a second),
node_cpu_ms_per_sqs_request and node_cpu_ms_per_native_request (over all four phases' requests of
each API), the same per phase (<phase>_node_cpu_ms), sqs_to_native_cpu (the ratio), and messages,
clients, repeat, http_workers, python, valkey, boto3. Exit status 1 when a check fails (every message
sent must be received once and deleted), 130 on Ctrl-C. Linux only (/proc).
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3
import requests
from botocore.config import Config

from drivers.atomq_http import HttpNode
from drivers.cli import add_http_workers, parser_from_doc
from drivers.run_exit import BenchRun
from drivers.serve_node import check, expect, keep_alive_session, progress
from drivers.workload import PAYLOAD_BYTES, threaded_phase

SQS_QUEUE = "sqs"
NATIVE_QUEUE = "native"
BATCH = 10
IDLE_S = 3.0
BODY = "m" * PAYLOAD_BYTES


class Batches:
    """Hands out batch sizes of at most 10 until ``n`` messages are given out, to whichever thread asks."""

    def __init__(self, n: int) -> None:
        self.left, self.lock = n, threading.Lock()

    def take(self) -> int:
        with self.lock:
            size = min(BATCH, self.left)
            self.left -= size
            return size


def sqs_client(node: HttpNode, pair: dict[str, str]) -> Any:
    return boto3.session.Session().client(
        "sqs", endpoint_url=node.base, region_name="us-east-1", aws_access_key_id=pair["access_key_id"],
        aws_secret_access_key=pair["secret_access_key"], config=Config(retries={"mode": "standard"}))


Work = Callable[[int, Callable[[], Any], threading.Event], tuple[float, tuple[int, int]]]
"""A phase's thread: (when it finished, (messages it moved, requests it made))."""


def boto3_send(node: HttpNode, pair: dict[str, str], url: str, batches: Batches) -> Work:
    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[int, int]]:
        sqs = sqs_client(node, pair)
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])  # connects, untimed
        ready()
        moved = calls = 0
        while not stop.is_set() and (size := batches.take()):
            answer = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(k), "MessageBody": BODY}
                                                                   for k in range(size)])
            check(len(answer.get("Successful", [])) == size, f"boto3_send: {answer.get('Failed')}")
            moved, calls = moved + size, calls + 1
        return time.perf_counter(), (moved, calls)

    return work


def boto3_consume(node: HttpNode, pair: dict[str, str], url: str) -> Work:
    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[int, int]]:
        sqs = sqs_client(node, pair)
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        ready()
        moved = calls = 0
        while not stop.is_set():
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=0,
                                      AttributeNames=["ApproximateReceiveCount"]).get("Messages", [])
            calls += 1
            if not got:
                break
            check(all(m["Body"] == BODY and m["Attributes"]["ApproximateReceiveCount"] == "1" for m in got),
                  "boto3_consume: a message came with another body or a second time")
            done = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]}
                                                                   for k, m in enumerate(got)])
            check(len(done.get("Successful", [])) == len(got), f"boto3_consume: {done.get('Failed')}")
            moved, calls = moved + len(got), calls + 1
        return time.perf_counter(), (moved, calls)

    return work


def native_send(node: HttpNode, batches: Batches) -> Work:
    url = f"{node.base}/v1/queues/{NATIVE_QUEUE}/messages"

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[int, int]]:
        with keep_alive_session(node.base, node.tenant_key) as s:
            ready()
            moved = calls = 0
            while not stop.is_set() and (size := batches.take()):
                ids = expect(s.post(url, json={"messages": [{"documents": [{"data": BODY}]}] * size}, timeout=60),
                             201, "native_send_10")["ids"]
                check(len(ids) == size, f"native_send_10: a send of {size} answered {len(ids)} ids")
                moved, calls = moved + size, calls + 1
        return time.perf_counter(), (moved, calls)

    return work


def native_consume(node: HttpNode) -> Work:
    base = f"{node.base}/v1/queues/{NATIVE_QUEUE}"

    def work(i: int, ready: Callable[[], Any], stop: threading.Event) -> tuple[float, tuple[int, int]]:
        with keep_alive_session(node.base, node.tenant_key) as s:
            ready()
            moved = calls = 0
            while not stop.is_set():
                got = expect(s.post(f"{base}/get", json={"max": BATCH, "wait_ms": 0}, timeout=60), 200,
                             "native_consume_10: get")["messages"]
                calls += 1
                if not got:
                    break
                check(all(m["documents"][0]["data"] == BODY and m["delivery_count"] == 1 for m in got),
                      "native_consume_10: a message came with another body or a second time")
                acked = expect(s.post(f"{base}/ack", json={"receipts": [m["receipt"] for m in got]}, timeout=60),
                               200, "native_consume_10: ack")["acked"]
                check(acked == len(got), f"native_consume_10: an ack of {len(got)} acknowledged {acked}")
                moved, calls = moved + len(got), calls + 1
        return time.perf_counter(), (moved, calls)

    return work


def idle_cpu_per_s(node: HttpNode) -> float:
    """The node's CPU seconds a second with nothing sent (its background loops and Valkey's cron)."""
    before, started = node.cpu_seconds(), time.perf_counter()
    time.sleep(IDLE_S)  # the measurement is of this time with nothing sent
    after = node.cpu_seconds()
    return (after["workers"] + after["valkey"] - before["workers"] - before["valkey"]) / (time.perf_counter() - started)


def phase(node: HttpNode, name: str, work: Work, clients: int, n: int, background: float) -> dict[str, float]:
    """Runs one phase; its messages a second, requests, and the node's CPU ms a request."""
    before: dict[str, float] = {}
    seconds, parts = threaded_phase(name, clients, work, on_start=lambda: before.update(node.cpu_seconds()))
    after = node.cpu_seconds()
    moved, calls = sum(p[0] for p in parts), sum(p[1] for p in parts)
    check(moved == n, f"{name}: moved {moved} messages of {n}")
    cpu = after["workers"] + after["valkey"] - before["workers"] - before["valkey"] - background * seconds
    out = {"rate": n / seconds, "requests": calls, "cpu_s": cpu, "cpu_ms": cpu / calls * 1e3}
    progress(f"  {name}: {out['rate']:,.0f} msg/s, {calls} requests, node CPU {out['cpu_ms']:.3f} ms a request")
    return out


def run(args: Any, bench: BenchRun) -> dict[str, Any]:
    node = HttpNode(args.http_workers)
    bench.at_exit(node.stop)
    node.start()
    for name in (SQS_QUEUE, NATIVE_QUEUE):
        node.put_queue(name)
    pair = expect(requests.get(f"{node.base}/v1/credentials/sqs", headers={"Authorization": f"Bearer {node.tenant_key}"},
                               timeout=30), 200, "the SQS credentials")
    url = f"{node.base}/{pair['account_id']}/{SQS_QUEUE}"
    n, clients = args.messages, args.clients
    rounds: list[dict[str, dict[str, float]]] = []
    for round_ in range(args.repeat):
        progress(f"round {round_ + 1} of {args.repeat}: the background for {IDLE_S:g} s, then {n} messages a phase")
        background = idle_cpu_per_s(node)
        rounds.append({
            "boto3_send": phase(node, "boto3_send", boto3_send(node, pair, url, Batches(n)), clients, n, background),
            "native_send_10": phase(node, "native_send_10", native_send(node, Batches(n)), clients, n, background),
            "boto3_consume": phase(node, "boto3_consume", boto3_consume(node, pair, url), clients, n, background),
            "native_consume_10": phase(node, "native_consume_10", native_consume(node), clients, n, background),
        })
        for name in (SQS_QUEUE, NATIVE_QUEUE):
            info = node.queue_info(name)
            check(info["depth"] == 0 and info["in_flight"] == 0, f"queue {name} did not end empty: {info}")
    out: dict[str, Any] = {}
    for name in rounds[0]:
        out[name] = round(statistics.median(r[name]["rate"] for r in rounds))
        out[f"{name}_node_cpu_ms"] = round(statistics.median(r[name]["cpu_ms"] for r in rounds), 3)
        print(f"{name}: {out[name]:,} msg/s; the node's CPU {out[f'{name}_node_cpu_ms']} ms a request of 10")

    def per_request(*names: str) -> float:
        return statistics.median(sum(r[x]["cpu_s"] for x in names) / sum(r[x]["requests"] for x in names) * 1e3
                                 for r in rounds)

    out["node_cpu_ms_per_sqs_request"] = round(per_request("boto3_send", "boto3_consume"), 3)
    out["node_cpu_ms_per_native_request"] = round(per_request("native_send_10", "native_consume_10"), 3)
    out["sqs_to_native_cpu"] = round(out["node_cpu_ms_per_sqs_request"] / out["node_cpu_ms_per_native_request"], 2)
    print(f"a request of 10 costs the node {out['node_cpu_ms_per_sqs_request']} ms of CPU through SQS, "
          f"{out['node_cpu_ms_per_native_request']} ms natively: {out['sqs_to_native_cpu']}x")
    assert node.valkey is not None
    out.update(messages=n, clients=clients, repeat=args.repeat, http_workers=len(node.worker_pids()),
               python=platform.python_version(), valkey=str(node.valkey.info("server").get("valkey_version")),
               boto3=boto3.__version__)
    return out


def main() -> int:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--messages", type=int, default=20_000, metavar="N",
                        help="messages per phase and round (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=4, metavar="C",
                        help="client threads of every phase (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, metavar="R",
                        help="rounds of every phase; the median is reported (default: %(default)s)")
    add_http_workers(parser, None)
    args = parser.parse_args()
    if args.messages < 1 or args.clients < 1 or args.repeat < 1:
        parser.error("--messages, --clients and --repeat must be at least 1")
    with BenchRun() as bench:
        print(json.dumps(run(args, bench)))
    return bench.status or 0


if __name__ == "__main__":
    sys.exit(main())
