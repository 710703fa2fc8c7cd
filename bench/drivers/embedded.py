"""The embedded Valkey of the core benches: AOF with appendfsync everysec, in a fresh temporary
data directory that the run removes, as every library phase measures it."""

from __future__ import annotations

import shutil
import tempfile

import redis

from atomq.platform.embedded import EmbeddedValkey

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
