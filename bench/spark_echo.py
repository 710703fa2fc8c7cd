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

--masters runs Spark against each master in one run (comma-separated):
``local[N]``, or ``standalone:C`` for a standalone master and one worker of
C cores started for the run from the installed pyspark (own ports and work
directory, killed by pid after it: drivers/spark_standalone.py); each Spark
label then ends in ``/<master>``. --fork-workers runs the fork engine with
each number of fork workers (labels ``fork/<N>w``; ``fork`` is then the
fastest of them, the one the ratios divide by). --cpu reads, from /proc,
the CPU seconds of the engine (the Spark worker's tree: its driver JVM and
local executors' Python workers, and a standalone cluster's daemons,
executor JVM and its Python workers; or the fork workers with their work
horses) and of the rest of the node (HTTP workers, Valkey) over the timed
run, and adds them with messages per CPU-second to the lines and medians.
The medians of each count also give the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomq.cli.demo.runner import run_demo
from drivers.process_cpu import CpuMeter
from drivers.spark_standalone import StandaloneSpark

STANDALONE = "standalone:"


@dataclass(frozen=True)
class Run:
    label: str
    engine: str
    batch_size: int
    master: str = ""
    fork_workers: int | None = None


def plan(args: argparse.Namespace) -> list[Run]:
    masters = args.masters.split(",") if args.masters else [args.spark_master]
    runs = []
    for b in args.spark_batch_sizes or [args.batch_size]:
        base = f"spark@{b}" if args.spark_batch_sizes else "spark"
        runs += [Run(f"{base}/{m}" if args.masters else base, "spark", b, m) for m in masters]
    if args.fork_workers:
        runs += [Run(f"fork/{n}w", "fork", args.batch_size, fork_workers=n) for n in args.fork_workers]
    else:
        runs.append(Run("fork", "fork", args.batch_size))
    return runs


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def one_run(run: Run, count: int, cpu: bool) -> tuple[dict[str, Any], CpuMeter | None]:
    """One demo on ``run``'s engine; a standalone master's cluster started for it and stopped after."""
    cluster = None
    master = run.master
    with tempfile.TemporaryDirectory(prefix="atomq-spark-echo-") as tmp:
        try:
            if master.startswith(STANDALONE):
                cluster = StandaloneSpark(Path(tmp) / "spark", cores=int(master[len(STANDALONE):]), memory="2g")
                cluster.start()
                master = cluster.master_url
            meter = CpuMeter(cluster.pids if cluster else ()) if cpu else None
            summary = run_demo(count, run.engine, master or "local[2]", run.batch_size, None, say,
                               run.fork_workers, meter)
        finally:
            if cluster is not None:
                cluster.stop()
    return dict(summary), meter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--spark-batch-sizes", type=int, nargs="+",
                        help="Spark listeners' batch sizes to run (default: --batch-size)")
    parser.add_argument("--masters", help="Spark masters to run, comma-separated: local[N] or standalone:C")
    parser.add_argument("--fork-workers", type=int, nargs="+", help="fork workers of the node, one run each")
    parser.add_argument("--cpu", action="store_true", help="CPU seconds of the engine and the node, from /proc")
    args = parser.parse_args(argv)
    runs = plan(args)
    medians: dict[str, Any] = {}
    for count in args.counts:
        rates: dict[str, list[float]] = {r.label: [] for r in runs}
        cpu: dict[str, list[tuple[float, float]]] = {r.label: [] for r in runs}
        load_before = os.getloadavg()[0]
        for round_no in range(args.rounds):
            for run in runs:
                print(f"-- {count} messages on {run.label}, round {round_no + 1}/{args.rounds}", file=sys.stderr)
                summary, meter = one_run(run, count, args.cpu)
                if summary["left_in_tests"] or summary["dead_letters"] or summary["echo"] + summary["errors"] != count:
                    print(f"FAILED: {summary}", file=sys.stderr)
                    return 1
                rate = summary["messages_per_second"]
                rates[run.label].append(rate)
                line = f"{count} {run.label} round {round_no + 1}: {rate:.0f} messages/s, {summary['executions']} executions"
                if meter is not None:
                    cpu[run.label].append((meter.engine_s, meter.node_s))
                    line += (f", engine CPU {meter.engine_s:.1f} s ({count / meter.engine_s:.0f} messages/CPU-s), "
                             f"node CPU {meter.node_s:.1f} s, load {os.getloadavg()[0]:.1f}")
                print(line, flush=True)
        medians[str(count)] = report(runs, rates, cpu, count)
        medians[str(count)]["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(medians))
    return 0


def report(runs: list[Run], rates: dict[str, list[float]], cpu: dict[str, list[tuple[float, float]]],
           count: int) -> dict[str, Any]:
    """The medians of one count: each label's messages/s, ``fork`` (the fastest fork label's), each
    Spark label over it, and with CPU, each label's engine and node CPU-seconds and messages per
    engine CPU-second and per CPU-second of engine and node together."""
    forks = {r.label: statistics.median(rates[r.label]) for r in runs if r.engine == "fork"}
    fork = max(forks.values())
    result: dict[str, Any] = {"fork": round(fork)}
    for run in runs:
        median = statistics.median(rates[run.label])
        result[run.label] = round(median)
        if run.engine == "spark":
            result[f"{run.label}_over_fork"] = round(median / fork, 2)
        if cpu[run.label]:
            engine = statistics.median(e for e, _ in cpu[run.label])
            node = statistics.median(n for _, n in cpu[run.label])
            result[f"{run.label}_engine_cpu_s"] = round(engine, 1)
            result[f"{run.label}_node_cpu_s"] = round(node, 1)
            result[f"{run.label}_messages_per_engine_cpu_s"] = round(count / engine) if engine else None
            result[f"{run.label}_messages_per_cpu_s"] = round(count / (engine + node)) if engine + node else None
    return result


if __name__ == "__main__":
    sys.exit(main())
