#!/usr/bin/env python3
"""What the store and a node pay as the work grows: memory per message, per idle queue and per idle
tenant, and a maintenance round, a /metrics scrape and a listener supervisor's round against the
number of tenants.

An embedded Valkey of its own (AOF on, as `atomq serve` runs it) in a
temporary directory, and the app in this process on it (the node's own
code, without gunicorn), holding the maintenance lease so that its /metrics
exports the store's figures as the exporting node's does.

  memory    used_memory (INFO memory) before and after, divided by the count:
            --messages 1 KiB messages sent to one queue (100 a call) against
            the same payloads XADDed to a plain stream; --queues empty
            queues of one tenant; --idle-tenants tenants with no queue
  scale     for each N of --tenants (default 10,1000,10000): N tenants with
            10 queues each, one ready message in each queue (nothing due);
            the median of --repeat (default 5) of a maintenance round
            (`maintain_all`, as the node's loop runs it), of a
            GET /metrics with the owner key (the scrape's size too; past
            its wait it serves the last tenants' figures read), and of
            one read of the tenants' figures that a scrape serves
  supervision
            for each N of --tenants: N tenants with one idle listener
            each (its queue empty); the median of --repeat of a listener
            supervisor's round (`Supervisor.round`, as every HTTP worker of
            every node runs it five times a second), after the first one,
            which takes the listeners' leases, wall and CPU of this process

Output: lines on stdout, progress on stderr, and as the LAST stdout line one
JSON object: message_bytes, raw_entry_bytes, message_ratio, idle_queue_bytes,
idle_tenant_bytes, message_bytes_by_structure (MEMORY USAGE of the documents,
ready stream, all index, envelopes and states, per message), and "scale": {"<N>": {"round_ms", "scrape_ms",
"scrape_bytes", "tenant_read_ms"}}, "supervision": {"<N>": {"round_ms", "round_cpu_ms"}}. Exit status 1 when a check fails, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis
from drivers.cli import parser_from_doc
from drivers.run_exit import BenchRun
from drivers.serve_node import check, progress

from atomq import defaults
from atomq.api import create_app
from atomq.api.metrics import TenantFigures
from atomq.api.services import LongPollLimiter, Services
from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer, QueueSettings
from atomq.platform.listeners.deployed import ListenerSpec
from atomq.platform.maintenance import maintain_all
from atomq.platform.store import keys as k
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.lease import Lease
from atomq.tenants import TenantStore
from atomq.workers.supervisor import Supervisor, SupervisorConfig

SETTINGS = QueueSettings(max_queues_per_tenant=1_000_000)
OWNER_KEY = f"aq_owner_{uuid.uuid4().hex}"
QUEUES_PER_TENANT = 10


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def per_item(client: redis.Redis, count: int, make: Callable[[], None]) -> float:
    """used_memory added by ``make()``, per item of ``count``."""
    before = used(client)
    make()
    return (used(client) - before) / count


def memory(client: redis.Redis, qs: QueueServer, tenants: TenantStore, args: argparse.Namespace) -> dict[str, float]:
    n, queues, idle = args.messages, args.queues, args.idle_tenants
    payload = os.urandom(1024)
    batch = [OutgoingMessage(documents=(OutgoingDocument(payload),)) for _ in range(100)]
    tenant = f"t_{uuid.uuid4().hex[:12]}"
    qs.put_queue(tenant, "held", "point_to_point")

    def send() -> None:
        for start in range(0, n, 100):
            qs.send(tenant, "held", batch[:min(100, n - start)])

    def xadd() -> None:
        for start in range(0, n, 100):
            with client.pipeline(transaction=False) as pipe:
                for _ in range(min(100, n - start)):
                    pipe.xadd("bench:raw", {"d": payload})
                pipe.execute()

    message = per_item(client, n, send)
    structures = structure_bytes(client, tenant, "held", n)
    raw = per_item(client, n, xadd)
    check(qs.get_queue(tenant, "held").depth == n and client.xlen("bench:raw") == n, "a message went missing")
    idle_queue = per_item(client, queues, lambda: [qs.put_queue(tenant, f"idle-{i}", "point_to_point")
                                                   for i in range(queues)])
    idle_tenant = per_item(client, idle, lambda: [tenants.create(f"idle-{i}") for i in range(idle)])
    qs.delete_queue(tenant, "held")
    client.delete("bench:raw")
    return {"message_bytes": round(message), "raw_entry_bytes": round(raw), "message_ratio": round(message / raw, 3),
            "idle_queue_bytes": round(idle_queue), "idle_tenant_bytes": round(idle_tenant),
            "message_bytes_by_structure": structures}


def structure_bytes(client: redis.Redis, tenant: str, queue: str, n: int) -> dict[str, float]:
    """Where a stored message's bytes are: ``MEMORY USAGE`` (all samples) of each structure a
    waiting message of a plain queue is in, per message."""
    d = k.TenantKeys(tenant).queue(queue).destination()
    keys = {"documents": k.TenantKeys(tenant).doc, "ready": d.ready, "all": d.all, "envelopes": d.msg,
            "states": d.state}
    return {name: round((client.memory_usage(key, samples=0) or 0) / n, 1) for name, key in keys.items()}


def timed_ms(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), result


def scale(services: Services, http: object, counts: list[int], repeat: int) -> dict[str, dict[str, float]]:
    qs, tenants = services.queues, services.tenants
    out: dict[str, dict[str, float]] = {}
    made = 0
    msg = [OutgoingMessage(documents=(OutgoingDocument("waiting"),))]
    for count in counts:
        progress(f"  {count} tenants of {QUEUES_PER_TENANT} queues: making {count - made} more")
        for i in range(made, count):
            tenant = tenants.create(f"scale-{i}")[0].id
            for q in range(QUEUES_PER_TENANT):
                qs.put_queue(tenant, f"q{q}", "point_to_point")
                qs.send(tenant, f"q{q}", msg)
        made = count
        maintain_all(qs)  # the first round after the making does the work the making left; not timed
        round_ms, _ = timed_ms(lambda: maintain_all(qs), repeat)

        def scrape() -> int:
            answer = http.get("/metrics", headers={"Authorization": f"Bearer {OWNER_KEY}"})  # type: ignore[attr-defined]
            check(answer.status_code == 200, f"/metrics answered {answer.status_code}")
            return len(answer.data)

        scrape_ms, size = timed_ms(scrape, repeat)
        read_ms, _ = timed_ms(TenantFigures(services, defaults.METRICS_MAX_TENANTS, defaults.METRICS_MAX_QUEUES).read,
                              repeat)
        out[str(count)] = {"round_ms": round(round_ms, 1), "scrape_ms": round(scrape_ms, 1),
                           "scrape_bytes": int(size), "tenant_read_ms": round(read_ms, 1)}  # type: ignore[arg-type]
        progress(f"    round {round_ms:.1f} ms, scrape {scrape_ms:.1f} ms ({size} bytes), "
                 f"a read of the tenants' figures {read_ms:.1f} ms")
    return out


def supervision(client: redis.Redis, qs: QueueServer, tenants: TenantStore, counts: list[int],
                repeat: int) -> dict[str, dict[str, float]]:
    supervisor = Supervisor(qs, tenants.execution_tokens, client, SupervisorConfig(api_url="http://unused"),
                            f"bench:{os.getpid()}", tenants.exists)
    spec = ListenerSpec(queue="in", process="forward", settings={"to": "out"})
    out: dict[str, dict[str, float]] = {}
    made = 0
    for count in counts:
        progress(f"  {count} tenants of one idle listener: making {count - made} more")
        for _ in range(made, count):
            tenant = f"t_{uuid.uuid4().hex[:12]}"  # a listener needs no tenant record to be supervised
            qs.put_queue(tenant, "in", "point_to_point")
            supervisor.listeners.put(tenant, "listener", spec)
        made = count
        check(supervisor.round() == 0, "a round scheduled executions for idle listeners")
        cpu: list[float] = []

        def supervised() -> None:
            started = time.process_time()
            check(supervisor.round() == 0, "a round scheduled executions for idle listeners")
            cpu.append((time.process_time() - started) * 1e3)

        round_ms, _ = timed_ms(supervised, repeat)
        out[str(count)] = {"round_ms": round(round_ms, 1), "round_cpu_ms": round(statistics.median(cpu), 1)}
        progress(f"    a supervisor's round {round_ms:.1f} ms, {statistics.median(cpu):.1f} ms of CPU")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = parser_from_doc(__doc__ or "")
    parser.add_argument("--messages", type=int, default=20_000, metavar="N", help="messages (default: 20000)")
    parser.add_argument("--queues", type=int, default=2_000, metavar="Q", help="idle queues (default: 2000)")
    parser.add_argument("--idle-tenants", type=int, default=2_000, metavar="T", help="idle tenants (default: 2000)")
    parser.add_argument("--tenants", default="10,1000,10000", metavar="N,...",
                        help="tenant counts of the scale part (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=5, metavar="R", help="timed repeats (default: 5)")
    args = parser.parse_args(argv)
    counts = sorted(int(c) for c in args.tenants.split(","))
    if min(args.messages, args.queues, args.idle_tenants, args.repeat, *counts) < 1:
        parser.error("every count must be at least 1")
    result: dict[str, object] = {}
    with BenchRun() as bench:
        directory = Path(tempfile.mkdtemp(prefix="atomq-bench-costs-"))
        bench.at_exit(shutil.rmtree, directory, ignore_errors=True)

        def store(name: str) -> tuple[redis.Redis, QueueServer, TenantStore]:
            """A Valkey of its own for each part, so that no part's data is in another's figures."""
            server = EmbeddedValkey(directory / name)
            bench.at_exit(server.stop)
            server.start()
            client = server.client()
            bench.at_exit(client.close)
            return client, QueueServer(client, SETTINGS), TenantStore(client, OWNER_KEY)

        progress("memory")
        client, qs, tenants = store("memory")
        result.update(memory(client, qs, tenants, args))
        progress("scale")
        client, qs, tenants = store("scale")
        services = Services(queues=qs, tenants=tenants, longpolls=LongPollLimiter(2))
        check(Lease(qs.storage, k.MAINTENANCE_LEASE, f"{services.node_id}:{os.getpid()}", 3600).acquire(),
              "the maintenance lease is taken")
        result["scale"] = scale(services, create_app(services).test_client(), counts, args.repeat)
        progress("supervision")
        client, qs, tenants = store("supervision")
        result["supervision"] = supervision(client, qs, tenants, counts, args.repeat)
    if bench.status is not None:
        return bench.status
    print(f"a stored 1 KiB message: {result['message_bytes']} bytes; a raw stream entry: {result['raw_entry_bytes']} "
          f"({result['message_ratio']}x)")
    print("  per message, by structure: " + ", ".join(f"{name} {size} bytes"
                                                     for name, size in result["message_bytes_by_structure"].items()))
    print(f"an idle queue: {result['idle_queue_bytes']} bytes; an idle tenant: {result['idle_tenant_bytes']} bytes")
    for count, figures in result["scale"].items():  # type: ignore[attr-defined]
        print(f"{count:>6} tenants: maintenance round {figures['round_ms']} ms, /metrics {figures['scrape_ms']} ms "
              f"({figures['scrape_bytes']} bytes), a read of the tenants' figures {figures['tenant_read_ms']} ms")
    for count, figures in result["supervision"].items():  # type: ignore[attr-defined]
        print(f"{count:>6} idle listeners: a supervisor's round {figures['round_ms']} ms "
              f"({figures['round_cpu_ms']} ms of CPU)")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
