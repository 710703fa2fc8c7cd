#!/usr/bin/env python3
"""A maintenance round's time as one tenant's idle queues grow.

An embedded Valkey of its own (AOF on, as `atomq serve` runs it) in a
temporary directory. Two tenants: "busy" has one queue with --busy messages in
flight past their ack deadline (the round's real work); "idle" has N queues
(--queues, default 10,1000,100000), each holding one ready message (nothing
due). For each N, the median over --repeat rounds (default 5) of:

  indexed   `maintain_all`: what the node's loop runs now; it reads the
            tenants' due indexes and sweeps only what is due
  full      the walk every round made before: `sweep` and `purge` of every
            destination of every tenant (now the format migration's and
            operators' full pass)

Each round starts with the busy queue's deliveries expired again (re-got),
so both do the same real work (the failed deliveries wait an hour: they
never fall due during the run). Output: a line per N on stdout, progress on
stderr, and as the LAST stdout line one JSON object {"<N>": {"indexed_ms",
"full_ms"}, ...}. Exit status 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer, QueueSettings
from atomq.platform.maintenance import maintain_all
from atomq.platform.store.embedded import EmbeddedValkey

# One tenant past the default cap of 1,000 queues: the point is how a round grows with them.
SETTINGS = QueueSettings(redelivery_delays_s=(3600,), max_queues_per_tenant=1_000_000)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def message(text: str) -> OutgoingMessage:
    return OutgoingMessage(documents=(OutgoingDocument(text),))


def expire_busy(qs: QueueServer, busy: int) -> None:
    """Puts ``busy`` fresh deliveries in flight, their deadlines already past."""
    qs.send("busy", "work", [message("work") for _ in range(busy)])
    got = 0
    while got < busy:
        got += len(qs.get("busy", "work", max_messages=busy - got))
    time.sleep(0.02)  # past the 10 ms ack time-out


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000


def full_walk(qs: QueueServer) -> None:
    for tenant in qs.tenants():
        qs.sweep(tenant)
        qs.purge(tenant)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", default="10,1000,100000", help="idle queue counts, comma-separated")
    parser.add_argument("--busy", type=int, default=100, help="deliveries the busy tenant has due each round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of each kind per count")
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.queues.split(","))
    root = Path(tempfile.mkdtemp(prefix="atomq-bench-"))
    server = EmbeddedValkey(root / "valkey")
    results: dict[str, dict[str, float]] = {}
    try:
        server.start()
        qs = QueueServer(server.client(), SETTINGS)
        qs.put_queue("busy", "work", "point_to_point", max_redeliveries=1000, ack_timeout_s=0.01)
        made = 0
        for count in counts:
            progress(f"growing to {count} idle queues")
            for i in range(made, count):
                qs.put_queue("idle", f"q{i:06d}", "point_to_point")
                qs.send("idle", f"q{i:06d}", [message("waiting")])
                if i and i % 10_000 == 0:
                    progress(f"  {i} idle queues")
            made = count
            maintain_all(qs)  # settle anything the set-up left due
            figures: dict[str, list[float]] = {"indexed": [], "full": []}
            for _ in range(args.repeat):
                for kind, work in (("indexed", lambda: maintain_all(qs)), ("full", lambda: full_walk(qs))):
                    expire_busy(qs, args.busy)
                    figures[kind].append(timed(work))
            row = {f"{kind}_ms": round(statistics.median(values), 2) for kind, values in figures.items()}
            results[str(count)] = row
            print(f"{count:>7} idle queues: indexed round {row['indexed_ms']:9.2f} ms, "
                  f"full walk {row['full_ms']:9.2f} ms", flush=True)
    except KeyboardInterrupt:
        return 130
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
