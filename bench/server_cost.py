#!/usr/bin/env python3
"""What one request costs the HTTP worker under gunicorn and under granian: the same app, paired.

Two servers of the same WSGI app (the hot path in front of Flask, a node's services) side by side on
one store: `atomq serve --http-workers W` (gunicorn's threaded workers with the node's protections;
W is 1 by default) and granian with W workers serving the app `bench/drivers/granian_app.py` builds
on the node's own Valkey and owner key. granian runs it through its WSGI interface (--interface
wsgi: --blocking-threads T threads a worker, 32 by default as the node's) or through an asyncio
front that reads each body on the event loop under a deadline before one of T threads of its own
runs the app (--interface rsgi). One client thread sends --requests N requests of each of
request_cost.py's shapes (send1, get10, ack10) over a keep-alive requests.Session to one server,
then to the other, --pairs P times in the order A B B A A B ..., so that both see the same load of
the machine. Each server has its own queue of the one tenant.

The CPU of each server's worker processes (utime + stime from /proc, every thread) is read before
and after each shape of a burst, less what they spend with nothing sent (measured for a few seconds
before each pair of bursts), and divided by N. Medians over the bursts of each side. With
--latency-rate R, latency.py's requests side (8 producers sending one message a request, 2
consumers long-polling a second) then runs against each server in the order A B B A.

granian is not a dependency of atomq (the bench extra has it): install it to run this.

Output: a line per shape on stdout, progress on stderr, and as the LAST stdout line one JSON object
with <server>_<shape>_worker_cpu_us (and _each, every burst's), <server>_<shape>_wall_us and
<server>_background_cpu_pct for the servers gunicorn and granian, <shape>_change (granian against
gunicorn), <server>_latency_rate, _p50 and _p99 (a list, a run each) with --latency-rate, plus
requests, pairs, http_workers, blocking_threads, interface, backpressure, the load average at the
start and the end, granian's version. Exit status 1 when a check fails, 130 on Ctrl-C. Linux only.
"""


from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import requests

import latency
from drivers.atomq_http import HttpNode
from drivers.cli import parser_from_doc
from drivers.run_exit import BenchRun
from drivers.serve_node import check, die_with_parent, expect, free_port, keep_alive_session, progress, stop_child

DOCUMENT = "x" * 100
FILL_BATCH = 100
IDLE_S = 3.0
SHAPES = ("send1", "get10", "ack10")


def cpu_of(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError):
                continue
    return out


@dataclass
class Side:
    """One server: its name, base URL, worker processes, queue, and the figures of its bursts."""

    name: str
    base: str
    workers: list[int]
    queue: str
    background: float = 0.0
    figures: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {s: [] for s in SHAPES})


class Granian:
    """granian serving the node's app on a port of its own: ``workers`` processes, each with ``threads``
    threads for the app (granian's WSGI threads, or the asyncio front's own pool)."""

    def __init__(self, node: HttpNode, workers: int, threads: int, backpressure: int | None,
                 interface: str = "wsgi") -> None:
        self.node = node
        self.workers = workers
        self.threads = threads
        self.backpressure = backpressure
        self.interface = interface
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Any = None

    def start(self, timeout: float = 60.0) -> None:
        vdir = self.node.data_dir / "valkey"
        sock = next(shlex.split(line)[1] for line in (vdir / "valkey.conf").read_text().splitlines()
                    if line.startswith("unixsocket "))
        url = f"unix://:{quote((vdir / 'password').read_text().strip(), safe='')}@{quote(sock)}"
        env = {**os.environ, "BENCH_DATA_DIR": str(self.node.data_dir), "BENCH_REDIS_URL": url,
               "ATOMQ_OWNER_KEY": self.node.owner_key, "BENCH_THREADS": str(self.threads),
               "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.abspath(__file__))]
                                             + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
        self.log = open(self.node.root / "granian.log", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "granian", "--interface", self.interface, "--workers", str(self.workers),
             # granian's ASGI and RSGI interfaces take one thread: the front runs the app in its own pool
             "--blocking-threads", str(self.threads if self.interface == "wsgi" else 1),
             "--port", str(self.port), "--factory", "--no-ws"]
            + ([] if self.backpressure is None else ["--backpressure", str(self.backpressure)])
            + [f"drivers.granian_app:{self.interface}_app"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while True:
            check(self.proc.poll() is None, f"granian exited with status {self.proc.returncode}; its output ends:\n"
                  + (self.node.root / "granian.log").read_text(errors="replace")[-2000:])
            try:
                if requests.get(f"{self.base}/v1/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            check(time.monotonic() < deadline, "granian did not answer /v1/health")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc, 30, "granian did not stop: killing it")
            self.log.close()


def burst(side: Side, key: str, n: int) -> None:
    """n requests of each shape to one side, each shape's CPU and wall time per request recorded."""
    session = keep_alive_session(side.base, key)
    base, q = side.base, side.queue
    receipts: list[list[str]] = []

    def send1() -> None:
        expect(session.post(f"{base}/v1/queues/{q}/messages",
                            json={"messages": [{"documents": [{"data": DOCUMENT}]}]}, timeout=30), 201, "send1")

    def get10() -> None:
        got = expect(session.post(f"{base}/v1/queues/{q}/get", json={"max": 10, "wait_ms": 0}, timeout=30),
                     200, "get10")["messages"]
        check(len(got) == 10, f"get10 got {len(got)}")
        receipts.append([m["receipt"] for m in got])

    def ack10() -> None:
        acked = expect(session.post(f"{base}/v1/queues/{q}/ack", json={"receipts": receipts.pop()}, timeout=30),
                       200, "ack10")["acked"]
        check(acked == 10, f"ack10 acked {acked}")

    def timed(shape: str, call: Callable[[], None]) -> None:
        call()  # warm
        before = cpu_of(side.workers)
        started = time.perf_counter()
        for _ in range(n):
            call()
        wall = time.perf_counter() - started
        spent = cpu_of(side.workers) - before - side.background * wall
        side.figures[shape].append({"cpu": spent / n * 1e6, "wall": wall / n * 1e6})

    timed("send1", send1)
    for start in range(0, n * 10 + 20, FILL_BATCH):
        batch = [{"documents": [{"data": DOCUMENT}]} for _ in range(FILL_BATCH)]
        expect(session.post(f"{base}/v1/queues/{q}/messages", json={"messages": batch}, timeout=30), 201, "fill")
    timed("get10", get10)
    timed("ack10", ack10)
    expect(session.delete(f"{base}/v1/queues/{q}/messages", json={"all": True}, timeout=120), 200, "emptying")
    session.close()


def latency_pair(sides: tuple[Side, Side], key: str, args: Any) -> dict[str, Any]:
    """latency.py's requests side (8 producers, 2 long-polling consumers) against each server, A B B A."""
    out: dict[str, Any] = {}
    runs: dict[str, list[dict[str, float]]] = {s.name: [] for s in sides}
    for turn, s in enumerate((sides[0], sides[1], sides[1], sides[0])):
        queue = f"latency{turn}"
        node_like = SimpleNamespace(base=s.base, tenant_key=key)
        expect(requests.put(f"{s.base}/v1/queues/{queue}", json={"model": "point_to_point"}, timeout=30,
                            headers={"Authorization": f"Bearer {key}"}), 201, f"creating queue {queue}")
        progress(f"latency, {s.name}: {args.latency_rate:g} msg/s for {args.latency_seconds:g} s, load "
                 f"{os.getloadavg()[0]:.2f}")
        runs[s.name].append(latency.requests_side(node_like, latency.Run(args.latency_rate, 8, 2,  # type: ignore[arg-type]
                                                                         args.latency_seconds), queue))
        r = runs[s.name][-1]
        progress(f"    {r['rate']:,.0f} msg/s, p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms")
    for name, results in runs.items():
        for key_ in ("rate", "p50", "p99"):
            out[f"{name}_latency_{key_}"] = [round(r[key_], 1) for r in results]
    return out


def run(args: Any, bench: BenchRun) -> dict[str, Any]:
    load_start = os.getloadavg()
    node = HttpNode(args.http_workers)
    bench.at_exit(node.stop)
    node.start()
    server = Granian(node, args.http_workers, args.blocking_threads, args.backpressure, args.interface)
    bench.at_exit(server.stop)
    server.start()
    assert server.proc is not None
    for q in ("qa", "qb"):  # an ack timeout past a burst's gets, however long the machine's load makes them
        expect(requests.put(f"{node.base}/v1/queues/{q}", json={"model": "point_to_point", "ack_timeout_s": 3600},
                            headers={"Authorization": f"Bearer {node.tenant_key}"}, timeout=30), 201,
               f"creating queue {q}")
    gunicorn = Side("gunicorn", node.base, node.worker_pids(), "qa")
    granian = Side("granian", server.base, children_of(server.proc.pid), "qb")
    check(len(gunicorn.workers) == args.http_workers and len(granian.workers) == args.http_workers,
          f"{args.http_workers} worker(s) each: gunicorn {gunicorn.workers}, granian {granian.workers}")
    out: dict[str, Any] = {}
    backgrounds: dict[str, list[float]] = {"gunicorn": [], "granian": []}
    for pair in range(args.pairs):
        before = {s.name: cpu_of(s.workers) for s in (gunicorn, granian)}
        time.sleep(IDLE_S)
        for s in (gunicorn, granian):
            s.background = (cpu_of(s.workers) - before[s.name]) / IDLE_S
            backgrounds[s.name].append(s.background)
        order = (gunicorn, granian) if pair % 2 == 0 else (granian, gunicorn)
        progress(f"pair {pair + 1} of {args.pairs}: {order[0].name} then {order[1].name}, load "
                 f"{os.getloadavg()[0]:.2f}")
        for s in order:
            burst(s, node.tenant_key, args.requests)
    for shape in SHAPES if args.pairs else ():
        for s in (gunicorn, granian):
            out[f"{s.name}_{shape}_worker_cpu_us"] = round(statistics.median(f["cpu"] for f in s.figures[shape]), 1)
            out[f"{s.name}_{shape}_wall_us"] = round(statistics.median(f["wall"] for f in s.figures[shape]), 1)
            out[f"{s.name}_{shape}_worker_cpu_us_each"] = [round(f["cpu"]) for f in s.figures[shape]]
        g, r = out[f"gunicorn_{shape}_worker_cpu_us"], out[f"granian_{shape}_worker_cpu_us"]
        out[f"{shape}_change"] = round(r / g - 1, 3)
        print(f"{shape}: worker CPU gunicorn {g} µs, granian {r} µs ({out[f'{shape}_change']:+.1%}); at the "
              f"client {out[f'gunicorn_{shape}_wall_us']} / {out[f'granian_{shape}_wall_us']} µs")
    if args.pairs:
        for name, values in backgrounds.items():
            out[f"{name}_background_cpu_pct"] = round(statistics.median(values) * 100, 2)
    if args.latency_rate:
        out.update(latency_pair((gunicorn, granian), node.tenant_key, args))
    out.update(requests=args.requests, pairs=args.pairs, http_workers=args.http_workers,
               blocking_threads=args.blocking_threads, interface=args.interface, backpressure=args.backpressure,
               load_start=[round(x, 2) for x in load_start], load_end=[round(x, 2) for x in os.getloadavg()],
               granian=version("granian"))
    return out


def main() -> int:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--requests", type=int, default=1000, metavar="N",
                        help="requests of each shape a burst (default: %(default)s)")
    parser.add_argument("--pairs", type=int, default=4, metavar="P",
                        help="bursts of each server, alternating A B B A; 0: none (default: %(default)s)")
    parser.add_argument("--http-workers", type=int, default=1, metavar="W",
                        help="worker processes of each server (default: %(default)s)")
    parser.add_argument("--blocking-threads", type=int, default=32, metavar="T",
                        help="granian's WSGI threads a worker (default: the node's threads, %(default)s)")
    parser.add_argument("--interface", choices=("wsgi", "rsgi"), default="wsgi",
                        help="granian's interface: its WSGI threads, or an asyncio front that reads each body "
                             "under a deadline before a thread of its own runs the app (default: %(default)s)")
    parser.add_argument("--backpressure", type=int, default=None, metavar="B",
                        help="granian's --backpressure (default: granian's own)")
    parser.add_argument("--latency-rate", type=float, default=0.0, metavar="R",
                        help="also run latency.py's requests side at R msg/s against each server, A B B A "
                             "(default: 0, not run)")
    parser.add_argument("--latency-seconds", type=float, default=10.0, metavar="S",
                        help="measured seconds of each latency run (default: %(default)s)")
    args = parser.parse_args()
    with BenchRun() as bench:
        print(json.dumps(run(args, bench)))
    return bench.status or 0


if __name__ == "__main__":
    sys.exit(main())
