#!/usr/bin/env python3
"""Executions: documents/s through the built-in forward process, and what a fork per execution costs.

Two parts, each on its own `atomq serve` (--http-workers, default 2, and its
embedded Valkey) in a temporary data directory, one tenant made through the
API. A run: preload a fresh queue IN with N one-message-one-document texts
of --payload-bytes (default 1 KiB), untimed; then deploy a listener
`{"queue": IN, "process": "forward", "batch_size": B, "settings": {"to": OUT}}`
and time from just before the PUT until OUT holds N messages and IN has none
waiting or in flight (GET /v1/queues every --poll-ms, default 50 ms). A run
fails the bench unless OUT ends with exactly N messages and the listener
counts no failure. Each run's listener and queues are deleted afterwards.
An untimed warm-up run (--warmup-messages) comes first on every worker, so
the worker already listens on the tenant's rq queue (it re-reads the set of
tenants only every 2 s).

  workers   `atomq serve --workers W` for each W of --worker-counts (default
            1 and 2): rq's forking workers, as shipped. N = --messages
            (default 5000), B = --batch-size (default 100), the listener's
            default concurrency.
  fork      `atomq serve --workers 0` and one execution worker started by the
            bench with the code of `atomq worker` (it imports what `atomq
            worker` imports, so its work horses are forked from a process of
            the same size): either rq's forking Worker (atomq's TenantWorker)
            or rq's SimpleWorker on the same queues (atomq's TenantQueues),
            which runs every execution in the worker process, no fork. B in
            --fork-batch-sizes (default 1, 10, 100); N = --fork-messages
            (default 200), or B x --min-executions (default 10) when that is
            more. The two workers take turns within each round. The
            listener's max_concurrent_executions is --max-concurrent (default
            1000, the most allowed): the default cap, 32 executions at once
            topped up by a supervision round every 0.2 s, would hold a batch
            size of 1 under about 160 executions/s whatever the worker, and
            this part measures the worker.

            The worker records, per rq job, how long rq's execute_job took
            in the worker (for the forking one: fork, work horse, waiting for
            it, clean-up) and how long rq's perform_job took (the execution
            with rq's bookkeeping around it, in the work horse or in the
            worker); "outside" is the difference. "w" rates are N (or the
            executions) over the span from the first job's start to the last
            one's end, without the wait for the first supervision round and
            the polling of the end-to-end time.

Output: a table per part on stdout (medians over --rounds, default 3),
progress on stderr, and as the LAST stdout line one JSON object with every
run's figures and the medians. The nodes and the bench's worker are stopped
and the data directories removed at the end, also on an error or Ctrl-C.
Exit status 1 on a failure (a lost or duplicated message, a failed
execution, a time-out), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from drivers.cli import add_http_workers, parser_from_doc
from drivers.run_exit import BenchRun, uninterrupted
from drivers.serve_node import BenchError, ServeNode, die_with_parent, expect, progress, stop_child

RQ_REDIS_URL_ENV = "ATOMQ_RQ_REDIS_URL"
SEND_CHUNK = 100
WORKER_MODES = ("fork", "simple")


# -- the bench's execution worker (a child process) ----------------------------------------------


def worker_child(mode: str, timings_path: str) -> int:
    """Runs one execution worker until SIGTERM, as ``atomq worker`` does; appends per-job timings to a file.

    ``fork``: atomq's TenantWorker (rq's Worker: a forked work horse per job).
    ``simple``: rq's SimpleWorker with the same choice of queues (atomq's
    TenantQueues mixin: the tenants' rq queues, round-robin), every job run
    in the worker process itself.
    """
    import atomq.cli  # noqa: F401  # what `atomq worker` has imported when it forks its work horses
    from rq import SimpleWorker

    from atomq.node.rq_redis import rq_connection
    from atomq.workers.worker import TenantQueues, TenantWorker, run_worker

    fd = os.open(timings_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def timed(kind: str, job: Any, call: Callable[..., Any], *args: Any) -> Any:
        began, started = time.time(), time.perf_counter()
        try:
            return call(*args)
        finally:
            ms = (time.perf_counter() - started) * 1000
            # One short O_APPEND write per line: whole lines even from a work horse.
            os.write(fd, f"{kind} {job.id} {began:.6f} {ms:.3f}\n".encode())

    class Timed:
        def execute_job(self, job: Any, queue: Any, *rest: Any) -> Any:
            """In the worker: fork, work horse and wait (forking), or the job itself (simple)."""
            return timed("execute", job, super().execute_job, job, queue, *rest)  # type: ignore[misc]

        def perform_job(self, job: Any, queue: Any, *rest: Any) -> Any:
            """The job with rq's bookkeeping: in the work horse (forking) or in the worker (simple)."""
            return timed("perform", job, super().perform_job, job, queue, *rest)  # type: ignore[misc]

    class TimedTenantWorker(Timed, TenantWorker):
        pass

    class TimedSimpleTenantWorker(Timed, TenantQueues, SimpleWorker):
        pass

    run_worker(rq_connection(os.environ[RQ_REDIS_URL_ENV]), name=f"bench-{mode}-{os.getpid()}",
               worker_class=TimedTenantWorker if mode == "fork" else TimedSimpleTenantWorker)
    return 0


class WorkerProcess:
    """The bench's execution worker: this file run with --worker-child, stopped like ``atomq worker``."""

    def __init__(self, mode: str, rq_redis_url: str, directory: Path) -> None:
        self.mode = mode
        self.timings = directory / f"timings-{mode}-{time.monotonic_ns()}.txt"
        self.timings.touch(mode=0o600)
        self._offset = 0
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker-child", mode, "--timings", str(self.timings)],
            stdin=subprocess.DEVNULL, env={**os.environ, RQ_REDIS_URL_ENV: rq_redis_url},  # never on a command line
            start_new_session=True, preexec_fn=die_with_parent)

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"the bench's {self.mode} worker exited with status {self.proc.returncode}")

    def new_timings(self) -> dict[str, dict[str, tuple[float, float]]]:
        """The per-job timings recorded since the last call: {"execute" or "perform": {job: (began, ms)}},
        ``began`` in seconds since the epoch."""
        with open(self.timings, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]
        self._offset += len(complete)
        out: dict[str, dict[str, tuple[float, float]]] = {"execute": {}, "perform": {}}
        for line in complete.decode().splitlines():
            kind, job, began, ms = line.split()
            out[kind][job] = (float(began), float(ms))
        return out

    def settled_timings(self, executions: int, timeout: float = 10.0) -> dict[str, dict[str, tuple[float, float]]]:
        """The timings since the last call, once every job the worker began has recorded them: a job's
        execution may have finished (its messages acked) while rq still does its bookkeeping."""
        out = self.new_timings()
        deadline = time.monotonic() + timeout
        while (len(out["execute"]) < executions or set(out["perform"]) - set(out["execute"])) \
                and time.monotonic() < deadline:
            time.sleep(0.02)
            for kind, entries in self.new_timings().items():
                out[kind].update(entries)
        return out

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (rq finishes the job it runs, then stops); kill only if it hangs."""
        stop_child(self.proc, timeout,
                   f"the bench's {self.mode} worker (pid {self.proc.pid}) did not stop: killing it")


# -- the node and the runs -----------------------------------------------------------------------


class Node(ServeNode):
    """The bench's ``atomq serve`` with one tenant, and the untimed calls a run needs."""

    def __init__(self, http_workers: int, workers: int) -> None:
        super().__init__("atomq-bench-exec-", http_workers, workers)
        self.key = ""

    def start_with_tenant(self) -> None:
        self.start()
        tenant = expect(self.session(self.owner_key).post(f"{self.base}/v1/tenants", timeout=30,
                                                          json={"name": "bench", "rate_limit_per_minute": 0}),
                        201, "creating the tenant")
        self.key = tenant["api_key"]
        self.api = self.session(self.key)

    def call(self, method: str, path: str, body: Any, status: int, what: str) -> Any:
        return expect(self.api.request(method, f"{self.base}{path}", json=body, timeout=60), status, what)

    def rq_redis_url(self) -> str:
        """The embedded Valkey's URL (unix socket, password), as the node hands it to its workers."""
        valkey = self.data_dir / "valkey"
        socket_path = None
        for line in (valkey / "valkey.conf").read_text().splitlines():
            if line.startswith("unixsocket "):
                socket_path = shlex.split(line)[1]
        if socket_path is None:
            raise BenchError("the embedded Valkey's configuration names no unix socket")
        password = (valkey / "password").read_text().strip()
        return f"unix://:{quote(password, safe='')}@{quote(socket_path)}"


def preload(node: Node, queue: str, count: int, payload_bytes: int) -> None:
    node.call("PUT", f"/v1/queues/{queue}", {"model": "point_to_point"}, 201, f"creating queue {queue}")
    text = "x" * payload_bytes
    for start in range(0, count, SEND_CHUNK):
        n = min(SEND_CHUNK, count - start)
        node.call("POST", f"/v1/queues/{queue}/messages",
                  {"messages": [{"documents": [{"data": text}]} for _ in range(n)]}, 201, f"preloading {queue}")


def depths(node: Node) -> dict[str, dict[str, int]]:
    return {q["name"]: q for q in node.call("GET", "/v1/queues", None, 200, "listing the queues")["queues"]}


def run_once(node: Node, tag: str, count: int, batch: int, payload_bytes: int, poll_s: float,
             timeout_s: float, max_concurrent: int, worker: WorkerProcess | None = None) -> dict[str, Any]:
    """One timed run (see the module's doc); its figures."""
    src, dst, name = f"in-{tag}", f"out-{tag}", f"fwd-{tag}"
    preload(node, src, count, payload_bytes)
    node.call("PUT", f"/v1/queues/{dst}", {"model": "point_to_point"}, 201, f"creating queue {dst}")
    if worker is not None:
        worker.new_timings()  # forget what earlier runs left
    body = {"queue": src, "process": "forward", "batch_size": batch, "settings": {"to": dst},
            "max_concurrent_executions": max_concurrent}
    started = time.perf_counter()
    node.call("PUT", f"/v1/listeners/{name}", body, 201, f"deploying listener {name}")
    while True:
        q = depths(node)
        if q[dst]["depth"] >= count and q[src]["depth"] == 0 and q[src]["in_flight"] == 0:
            elapsed = time.perf_counter() - started
            done_at = time.time()
            break
        if time.perf_counter() - started > timeout_s:
            listener = node.call("GET", f"/v1/listeners/{name}", None, 200, "reading the listener")
            raise BenchError(f"run {tag}: not done within {timeout_s:g} s: {src} {q[src]}, {dst} {q[dst]}, "
                             f"listener {listener}")
        if worker is not None:
            worker.check()
        time.sleep(poll_s)
    # Untimed: the executions scheduled last (which may find nothing) end, then the checks.
    deadline = time.perf_counter() + 30
    while True:
        listener = node.call("GET", f"/v1/listeners/{name}", None, 200, "reading the listener")
        if listener["outstanding"] == 0 or time.perf_counter() > deadline:
            break
        time.sleep(0.05)
    q = depths(node)
    if q[dst]["depth"] != count:
        raise BenchError(f"run {tag}: {dst} holds {q[dst]['depth']} messages, {count} were sent")
    if q[src]["depth"] or q[src]["in_flight"] or q[src]["dead_letters"]:
        raise BenchError(f"run {tag}: {src} ends with {q[src]}")
    if listener["failures"]:
        raise BenchError(f"run {tag}: {listener['failures']} failed execution(s); last error: "
                         f"{listener['last_error']!r}")
    node.call("DELETE", f"/v1/listeners/{name}", None, 204, f"deleting listener {name}")
    for queue in (src, dst):
        node.call("DELETE", f"/v1/queues/{queue}", None, 204, f"deleting queue {queue}")
    result: dict[str, Any] = {
        "seconds": round(elapsed, 3), "executions": listener["executions"],
        "docs_per_s": round(count / elapsed, 1), "executions_per_s": round(listener["executions"] / elapsed, 1),
    }
    if worker is not None:
        t = worker.settled_timings(listener["executions"])
        execute = {job: ms for job, (_, ms) in t["execute"].items()}
        perform = {job: ms for job, (_, ms) in t["perform"].items()}
        # The worker's time outside the job: fork, work horse start and exit, wait, clean-up (or nothing much).
        outside = [execute[job] - perform[job] for job in execute if job in perform]
        # From the first job's start to the last one's end: the worker's rate, without the wait for the
        # first supervision round and the watch's polling.
        # Jobs begun after the run was seen done found nothing: left out of the span.
        timed = [(b, b + ms / 1000) for b, ms in t["execute"].values() if b < done_at]
        span = max(end for _, end in timed) - min(b for b, _ in timed) if timed else None
        result.update({
            "rq_jobs": len(execute),
            "execute_ms_p50": _median(execute.values()),
            "perform_ms_p50": _median(perform.values()),
            "outside_ms_p50": _median(outside),
            "worker_busy_s": round(sum(execute.values()) / 1000, 3),
            "worker_span_s": None if span is None else round(span, 3),
            "worker_docs_per_s": round(count / span, 1) if span else None,
            "worker_executions_per_s": round(listener["executions"] / span, 1) if span else None,
        })
    return result


def _median(values: Any) -> float | None:
    values = list(values)
    return round(statistics.median(values), 2) if values else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


# -- the two parts --------------------------------------------------------------------------------


def part_workers(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for workers in args.worker_counts:
        node = Node(args.http_workers, workers)
        try:
            progress(f"workers={workers}: starting atomq serve --workers {workers} on 127.0.0.1:{node.port}")
            node.start_with_tenant()
            progress(f"  warm-up: {args.warmup_messages} messages")
            run_once(node, f"w{workers}-warm", args.warmup_messages, args.batch_size, args.payload_bytes,
                     args.poll_ms / 1000, args.timeout, 0)
            runs = []
            for r in range(1, args.rounds + 1):
                result = run_once(node, f"w{workers}-r{r}", args.messages, args.batch_size, args.payload_bytes,
                                  args.poll_ms / 1000, args.timeout, 0)
                progress(f"  round {r}: {result}")
                runs.append(result)
        finally:
            uninterrupted(node.stop)
        out[str(workers)] = {"runs": runs, **{f"{key}_median": median_of(runs, key) for key in
                                              ("seconds", "docs_per_s", "executions_per_s")}}
    return out


def fork_count(args: argparse.Namespace, batch: int) -> int:
    """Messages in a fork run: --fork-messages, but enough for --min-executions full batches."""
    return max(int(args.fork_messages), batch * int(args.min_executions))


def part_fork(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {m: {b: [] for b in args.fork_batch_sizes}
                                                        for m in WORKER_MODES}
    node = Node(args.http_workers, 0)
    scratch = Path(tempfile.mkdtemp(prefix="atomq-bench-exec-timings-"))
    worker: WorkerProcess | None = None
    try:
        progress(f"fork: starting atomq serve --workers 0 on 127.0.0.1:{node.port}")
        node.start_with_tenant()
        url = node.rq_redis_url()
        for r in range(1, args.rounds + 1):
            for mode in WORKER_MODES:
                worker = WorkerProcess(mode, url, scratch)
                run_once(node, f"{mode}-r{r}-warm", args.warmup_messages, 10, args.payload_bytes,
                         args.poll_ms / 1000, args.timeout, args.max_concurrent, worker)
                for batch in args.fork_batch_sizes:
                    result = run_once(node, f"{mode}-b{batch}-r{r}", fork_count(args, batch), batch, args.payload_bytes,
                                      args.poll_ms / 1000, args.timeout, args.max_concurrent, worker)
                    progress(f"  round {r} {mode} batch {batch}: {result}")
                    runs[mode][batch].append(result)
                uninterrupted(worker.stop)
                worker = None
    finally:
        try:
            if worker is not None:
                uninterrupted(worker.stop)
        finally:
            uninterrupted(node.stop)
            shutil.rmtree(scratch, ignore_errors=True)
    out: dict[str, Any] = {}
    for batch in args.fork_batch_sizes:
        entry: dict[str, Any] = {}
        for mode in WORKER_MODES:
            entry[mode] = {"runs": runs[mode][batch], **{f"{key}_median": median_of(runs[mode][batch], key) for key in
                           ("seconds", "docs_per_s", "executions_per_s", "worker_docs_per_s",
                            "worker_executions_per_s", "execute_ms_p50", "perform_ms_p50", "outside_ms_p50")}}
        fork, simple = entry["fork"], entry["simple"]
        entry["fork_over_simple_docs_per_s"] = _ratio(fork["docs_per_s_median"], simple["docs_per_s_median"])
        entry["fork_over_simple_worker_docs_per_s"] = _ratio(fork["worker_docs_per_s_median"],
                                                             simple["worker_docs_per_s_median"])
        if fork["execute_ms_p50_median"] is not None and simple["execute_ms_p50_median"] is not None:
            entry["fork_minus_simple_execute_ms"] = round(fork["execute_ms_p50_median"]
                                                          - simple["execute_ms_p50_median"], 2)
        out[str(batch)] = entry
    return out


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_tables(results: dict[str, Any]) -> None:
    if "workers" in results:
        print(f"{'workers':>7} {'seconds':>8} {'docs/s':>8} {'execs/s':>8}")
        for workers, r in results["workers"].items():
            print(f"{workers:>7} {_f(r['seconds_median'], '.2f'):>8} {_f(r['docs_per_s_median'], ',.0f'):>8} "
                  f"{_f(r['executions_per_s_median'], '.1f'):>8}")
        print()
    if "fork" in results:
        print(f"{'batch':>5} {'worker':<7} {'seconds':>8} {'execs/s':>8} {'docs/s':>8} {'w execs/s':>9} "
              f"{'w docs/s':>8} {'execute ms':>10} {'job ms':>7} {'outside ms':>10} {'fork/simple':>11} "
              f"{'w fork/simple':>13}")
        for batch, entry in results["fork"].items():
            for mode in WORKER_MODES:
                r = entry[mode]
                fork = mode == "fork"
                print(f"{batch:>5} {mode:<7} {_f(r['seconds_median'], '.2f'):>8} "
                      f"{_f(r['executions_per_s_median'], '.1f'):>8} {_f(r['docs_per_s_median'], ',.0f'):>8} "
                      f"{_f(r['worker_executions_per_s_median'], '.1f'):>9} "
                      f"{_f(r['worker_docs_per_s_median'], ',.0f'):>8} "
                      f"{_f(r['execute_ms_p50_median'], '.2f'):>10} {_f(r['perform_ms_p50_median'], '.2f'):>7} "
                      f"{_f(r['outside_ms_p50_median'], '.2f'):>10} "
                      f"{_f(entry['fork_over_simple_docs_per_s'], '.2f') if fork else '':>11} "
                      f"{_f(entry['fork_over_simple_worker_docs_per_s'], '.2f') if fork else '':>13}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--parts", default="workers,fork", metavar="P,...",
                        help="which parts to run: workers, fork or both (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, metavar="R",
                        help="timed runs per configuration; medians over them (default: %(default)s)")
    parser.add_argument("--messages", type=int, default=5000, metavar="N",
                        help="messages per run in the workers part (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=100, metavar="B",
                        help="the listener's batch_size in the workers part (default: %(default)s)")
    parser.add_argument("--worker-counts", default="1,2", metavar="N,...",
                        help="atomq serve --workers values for the workers part (default: %(default)s)")
    parser.add_argument("--fork-messages", type=int, default=200, metavar="N",
                        help="messages per run in the fork part (default: %(default)s)")
    parser.add_argument("--min-executions", type=int, default=10, metavar="E",
                        help="in the fork part, a batch size B gets at least B x E messages "
                             "(default: %(default)s)")
    parser.add_argument("--fork-batch-sizes", default="1,10,100", metavar="B,...",
                        help="batch sizes in the fork part (default: %(default)s)")
    parser.add_argument("--max-concurrent", type=int, default=1000, metavar="C",
                        help="the listener's max_concurrent_executions in the fork part; 0 = the listener's "
                             "default cap (default: %(default)s)")
    parser.add_argument("--warmup-messages", type=int, default=100, metavar="N",
                        help="messages in the untimed warm-up run before each worker's timed runs "
                             "(default: %(default)s)")
    parser.add_argument("--payload-bytes", type=int, default=1024, metavar="BYTES",
                        help="size of each message's one text document (default: %(default)s)")
    parser.add_argument("--poll-ms", type=float, default=50.0, metavar="MS",
                        help="interval between the GET /v1/queues that watch a run (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=180.0, metavar="S",
                        help="a run that is not done after S seconds fails the bench (default: %(default)s)")
    add_http_workers(parser, default=2)
    parser.add_argument("--worker-child", choices=WORKER_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--timings", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_child:
        return args
    try:
        args.parts = [p for p in args.parts.split(",") if p]
        args.worker_counts = [int(n) for n in args.worker_counts.split(",") if n]
        args.fork_batch_sizes = [int(n) for n in args.fork_batch_sizes.split(",") if n]
    except ValueError:
        parser.error("--worker-counts and --fork-batch-sizes take integers separated by commas")
    if not args.parts or set(args.parts) - {"workers", "fork"}:
        parser.error("--parts takes workers, fork or workers,fork")
    if min(args.rounds, args.messages, args.fork_messages, args.warmup_messages, args.min_executions) < 1:
        parser.error("--rounds, --min-executions and the message counts must be at least 1")
    if any(n < 1 for n in args.worker_counts) or args.http_workers < 1:
        parser.error("--worker-counts and --http-workers must be at least 1")
    if not 1 <= args.batch_size <= 1000 or any(not 1 <= b <= 1000 for b in args.fork_batch_sizes):
        parser.error("batch sizes go from 1 to 1000")
    if not 0 <= args.max_concurrent <= 1000:
        parser.error("--max-concurrent goes from 0 to 1000")
    if args.payload_bytes < 1 or args.poll_ms <= 0 or args.timeout <= 0:
        parser.error("--payload-bytes, --poll-ms and --timeout must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker_child:
        return worker_child(args.worker_child, args.timings)
    results: dict[str, Any] = {}
    started = time.monotonic()
    with BenchRun() as bench:
        if "workers" in args.parts:
            results["workers"] = part_workers(args)
        if "fork" in args.parts:
            results["fork"] = part_fork(args)
    if bench.status is not None:
        return bench.status
    print_tables(results)
    print(json.dumps({**results, "rounds": args.rounds, "messages": args.messages, "batch_size": args.batch_size,
                      "fork_messages": {str(b): fork_count(args, b) for b in args.fork_batch_sizes},
                      "max_concurrent": args.max_concurrent,
                      "payload_bytes": args.payload_bytes, "http_workers": args.http_workers,
                      "poll_ms": args.poll_ms, "cpus": os.cpu_count(), "python": platform.python_version(),
                      "seconds": round(time.monotonic() - started, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
