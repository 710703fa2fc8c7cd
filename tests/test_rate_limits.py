"""Send rate limits: two windows per node, exact under concurrency, refused requests take no room."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from atomq.errors import NotFound, RateLimited
from atomq.platform.guards.rate_limit import RateLimiter, retry_after_s
from atomq.platform.store.storage import Storage
from support.waiting import wait_until


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    assert [retry_after_s(ms) for ms in (0, 1, 999, 1000, 1001, 59_999)] == [1, 1, 1, 1, 2, 60]


@pytest.fixture
def limiter(backend) -> RateLimiter:
    return RateLimiter(Storage(backend), f"n_{uuid.uuid4().hex[:8]}")


def take(limiter: RateLimiter, tenant: str, tenant_limit: int, node_limit: int, window_s: float = 60) -> bool:
    try:
        with limiter.send(tenant, tenant_limit, node_limit, window_s):
            return True
    except RateLimited:
        return False


def test_a_window_counts_up_to_its_limit_then_refuses_until_it_closes(limiter, tenant) -> None:
    assert [take(limiter, tenant, 3, 0, window_s=1.0) for _ in range(5)] == [True, True, True, False, False]
    with pytest.raises(RateLimited) as err:
        with limiter.send(tenant, 3, 0, 1.0):
            pass
    assert err.value.retry_after == 1 and err.value.details["limit"] == 3
    wait_until(lambda: take(limiter, tenant, 3, 0, window_s=1.0), 5, "a new window after the first closed")
    assert [take(limiter, tenant, 3, 0, window_s=1.0) for _ in range(3)] == [True, True, False]


def test_zero_is_no_limit(limiter, tenant) -> None:
    assert all(take(limiter, tenant, 0, 0) for _ in range(50))


def test_the_node_window_covers_all_tenants_and_each_tenant_has_its_own(limiter, tenant) -> None:
    a, b = f"{tenant}-a", f"{tenant}-b"
    assert [take(limiter, a, 2, 3) for _ in range(3)] == [True, True, False]
    assert [take(limiter, b, 2, 3) for _ in range(2)] == [True, False], "the node's third, then its window is full"


def test_a_request_refused_by_one_window_takes_no_room_in_the_other(limiter, tenant) -> None:
    other = f"{tenant}-other"
    assert take(limiter, tenant, 1, 2)
    assert not take(limiter, tenant, 1, 2), "the tenant's window refuses; the node's room goes back"
    assert take(limiter, other, 5, 2), "so the node still has room for another tenant"
    assert not take(limiter, other, 5, 2), "the node's window is full now"
    assert not take(limiter, f"{tenant}-third", 5, 2)


def test_a_send_that_fails_otherwise_is_not_counted(limiter, tenant) -> None:
    for _ in range(3):
        with pytest.raises(NotFound):
            with limiter.send(tenant, 1, 1, 60):
                raise NotFound("queue 'q' does not exist")
    assert take(limiter, tenant, 1, 1) and not take(limiter, tenant, 1, 1)


def test_hundreds_of_concurrent_sends_are_counted_exactly(valkey, tenant) -> None:
    node = f"n_{uuid.uuid4().hex[:8]}"
    limiters = [RateLimiter(Storage(valkey.client()), node) for _ in range(8)]  # eight workers of one node

    def attempt(i: int) -> bool:
        return take(limiters[i % 8], f"{tenant}-{i % 3}", 40, 100)

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(attempt, range(600)))
    assert sum(results) == 100, "exactly the node's limit, spread over three tenants of 40 each"
    by_tenant = [sum(r for i, r in enumerate(results) if i % 3 == t) for t in range(3)]
    assert all(n <= 40 for n in by_tenant) and sum(by_tenant) == 100


def test_processes_of_one_node_count_one_window_exactly(valkey, tenant) -> None:
    """Three processes (as gunicorn workers of one node would be), eight threads each."""
    import json
    import os
    import subprocess
    import sys

    node = f"n_{uuid.uuid4().hex[:8]}"
    code = """
import json, os, sys
from concurrent.futures import ThreadPoolExecutor
import redis
from atomq.errors import RateLimited
from atomq.platform.guards.rate_limit import RateLimiter
from atomq.platform.store.storage import Storage
limiter = RateLimiter(Storage(redis.Redis.from_url(os.environ["REDIS_URL"])), sys.argv[1])
def attempt(i):
    try:
        with limiter.send(sys.argv[2], 70, 0, 60):
            return 1
    except RateLimited:
        return 0
with ThreadPoolExecutor(max_workers=8) as pool:
    print(json.dumps(sum(pool.map(attempt, range(100)))))
"""
    env = {**os.environ, "REDIS_URL": valkey.url}
    procs = [subprocess.Popen([sys.executable, "-c", code, node, tenant], env=env, stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    accepted = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(accepted) == 70, f"per process: {accepted}"
