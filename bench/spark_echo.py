#!/usr/bin/env python3
"""The echo-service on Spark against the fork engine: documents/s end to end.

Each run is ``atomq demo``'s: its own ``atomq serve`` in a temporary data
directory (with ``--spark`` on --spark-master, default local[2], or with 2
fork workers), a tenant, the queues tests/echo/errors, the echo-service
listener (--batch-size, default 500, for both engines; --spark-batch-sizes
runs Spark at each of those instead: up to 10,000, where the fork engine's
most is 1,000), a warm-up of 10 messages (so the
JVM's and the workers' start are left out), then N test messages (80% valid,
10% without msgId, 10% not JSON) sent in requests of 100, timed from the
first send until every message has arrived on echo or errors.

For each count in --counts (default 10000 100000) and each engine (and
Spark batch size), --rounds runs (default 1); the median messages/s per
engine and count, and the ratio spark/fork of the same count, measured in
the same run. Progress on
stderr, a line per run on stdout and, last, one JSON object with the medians.
Exit status 1 if any run loses or dead-letters a message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from atomq.cli.demo.runner import run_demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--spark-batch-sizes", type=int, nargs="+",
                        help="Spark listeners' batch sizes to run (default: --batch-size)")
    args = parser.parse_args(argv)
    runs = [(f"spark@{b}" if args.spark_batch_sizes else "spark", "spark", b)
            for b in args.spark_batch_sizes or [args.batch_size]] + [("fork", "fork", args.batch_size)]
    medians: dict[str, Any] = {}
    for count in args.counts:
        rates: dict[str, list[float]] = {label: [] for label, _, _ in runs}
        for round_no in range(args.rounds):
            for label, engine, batch_size in runs:
                print(f"-- {count} messages on {label}, round {round_no + 1}/{args.rounds}", file=sys.stderr)
                summary = run_demo(count, engine, args.spark_master, batch_size, None,
                                   lambda line: print(line, file=sys.stderr, flush=True))
                if summary["left_in_tests"] or summary["dead_letters"] or summary["echo"] + summary["errors"] != count:
                    print(f"FAILED: {summary}", file=sys.stderr)
                    return 1
                rate = summary["messages_per_second"]
                rates[label].append(rate)
                print(f"{count} {label} round {round_no + 1}: {rate:.0f} messages/s, "
                      f"{summary['executions']} executions", flush=True)
        fork = statistics.median(rates["fork"])
        result: dict[str, Any] = {"fork": round(fork)}
        for label, engine, _ in runs:
            if engine == "spark":
                spark = statistics.median(rates[label])
                result[label] = round(spark)
                result[f"{label}_over_fork"] = round(spark / fork, 2)
        medians[str(count)] = result
    print(json.dumps(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
