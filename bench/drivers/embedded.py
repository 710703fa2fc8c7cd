"""The embedded Valkey of the core benches: AOF with appendfsync everysec, in a fresh temporary
data directory that the run removes, as every library phase measures it."""

from __future__ import annotations

import shutil
import tempfile
import time

import redis

from atomq.platform.store.embedded import EmbeddedValkey

from .run_exit import BenchRun
from .serve_node import check, progress


def start_valkey(bench: BenchRun, tenant: str) -> tuple[redis.Redis, str]:
    """Starts it (stopped and removed when ``bench`` ends); its client and Valkey's version."""
    data_dir = tempfile.mkdtemp(prefix="atomq-bench-")
    bench.at_exit(shutil.rmtree, data_dir, ignore_errors=True)
    server = EmbeddedValkey(data_dir)
    bench.at_exit(server.stop)
    progress(f"starting Valkey in a temporary data directory (AOF everysec), tenant {tenant}")
    server.start()
    client = server.client()
    bench.at_exit(client.close)
    info = client.info("server")
    persistence = client.info("persistence")
    check(int(persistence.get("aof_enabled", 0)) == 1, "the embedded server runs without AOF")
    check(client.config_get("appendfsync").get("appendfsync") == "everysec",
          "the embedded server does not use appendfsync everysec")
    return client, str(info.get("valkey_version") or info.get("redis_version"))


def quiesce_aof(client: redis.Redis, timeout: float = 60.0) -> int:
    """Rewrites the AOF now and waits for it; returns the count of rewrites so far.

    Run before each timed phase, so an automatic rewrite (a fork and a child
    competing for the CPUs) never lands inside one phase and not another.
    """
    deadline = time.monotonic() + timeout

    def busy() -> bool:
        p = client.info("persistence")
        return bool(int(p.get("aof_rewrite_in_progress", 0)) or int(p.get("aof_rewrite_scheduled", 0)))

    while busy():
        check(time.monotonic() < deadline, "an AOF rewrite did not finish in time")
        time.sleep(0.01)
    client.bgrewriteaof()
    while busy():
        check(time.monotonic() < deadline, "an AOF rewrite did not finish in time")
        time.sleep(0.01)
    p = client.info("persistence")
    check(p.get("aof_last_bgrewrite_status") == "ok", "the AOF rewrite failed")
    return int(p.get("aof_rewrites", 0))
