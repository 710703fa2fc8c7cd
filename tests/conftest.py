"""Shared fixtures: a real Valkey and a real Valkey Cluster per test session, fakeredis for fast
runs of the same tests.

Semantic tests take the ``backend`` fixture and run three times: against the real embedded
Valkey, against a 6-node Valkey Cluster (3 masters, 3 replicas; their tenants placed on every
master in turn) and against fakeredis (with its Lua support). Tests of processes, crashes and
durability use ``valkey`` alone.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from atomq import telemetry
from atomq.platform import QueueServer
from atomq.platform.store import keys as k
from atomq.platform.store.connection import open_redis
from atomq.platform.store.embedded import EmbeddedValkey
from support.audit import assert_audit_clean
from support.ports import free_port
from support.queues import FAST
from support.served_node import ServeFactory
from support.valkey_cluster import ValkeyCluster


@pytest.fixture(scope="session")
def valkey(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedValkey]:
    """One real Valkey for the session, on a free loopback port, in a fresh data directory."""
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey") / "valkey", port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyCluster]:
    """One 6-node Valkey Cluster for the session (3 masters, 3 replicas), on free loopback ports."""
    cluster = ValkeyCluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _backend_of(request: pytest.FixtureRequest) -> str | None:
    callspec = getattr(request.node, "callspec", None)
    return callspec.params.get("backend") if callspec is not None else None


@pytest.fixture(autouse=True)
def audit_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the session's real Valkey or cluster: the tenants it made pass the audit."""
    backend = _backend_of(request)
    if backend == "cluster":
        client = open_redis(request.getfixturevalue("valkey_cluster").url)
    elif "valkey" in request.fixturenames or backend == "valkey":
        client = request.getfixturevalue("valkey").client()
    else:
        yield
        return
    before = {t.decode() for t in client.smembers(k.TENANTS_KEY)}
    yield
    try:
        made = {t.decode() for t in client.smembers(k.TENANTS_KEY)} - before
        assert_audit_clean(client, made)
        _free_names(client, made)
    finally:
        client.close()


def _free_names(client: redis.Redis, tenants: set[str]) -> None:
    """Frees the names of a test's tenants (names are unique in a store): the session's store
    outlives each test, whose tenants keep their data but not their names, as if each test had a
    store of its own. Tests of the names themselves make their own tenants."""
    for name, holder in client.hgetall(k.TENANT_NAMES_KEY).items():
        if holder.decode() in tenants:
            client.hdel(k.TENANT_NAMES_KEY, name)


@pytest.fixture(params=["valkey", "cluster", "fakeredis"])
def backend(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A Redis client: the real server, a real cluster, or fakeredis."""
    if request.param == "valkey":
        client = request.getfixturevalue("valkey").client()
    elif request.param == "cluster":
        client = open_redis(request.getfixturevalue("valkey_cluster").url)
    else:
        client = fakeredis.FakeRedis()
    yield client
    client.close()


_next_master = itertools.count()


@pytest.fixture
def tenant(request: pytest.FixtureRequest) -> str:
    """A fresh tenant per test: tests never see each other's data. On the cluster, the tenants of
    successive tests live on each master in turn (a tenant's keys share its hash slot)."""
    if _backend_of(request) != "cluster":
        return f"t_{uuid.uuid4().hex[:12]}"
    return str(request.getfixturevalue("valkey_cluster").tenant_on(next(_next_master)))


@pytest.fixture
def qs(backend: redis.Redis) -> QueueServer:
    """A queue server with a fast redelivery schedule (0.05, 0.1, 0.15 s)."""
    return QueueServer(backend, FAST)


@pytest.fixture
def queue(qs: QueueServer, tenant: str) -> str:
    """A point-to-point queue, "orders", that dead-letters a message at its first failed delivery."""
    qs.put_queue(tenant, "orders", "point_to_point", max_redeliveries=0)
    return "orders"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeFactory]:
    """Starts ``atomq serve`` nodes for one test (``ServeFactory``); stops them all at its teardown."""
    nodes = ServeFactory(tmp_path)
    try:
        yield nodes
    finally:
        nodes.stop_all()


@pytest.fixture(scope="module")
def serve_for_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeFactory]:
    """``serve`` for the node a module's tests share: stopped after the module's last test."""
    nodes = ServeFactory(tmp_path_factory.mktemp("serve"))
    try:
        yield nodes
    finally:
        nodes.stop_all()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One SparkSession for the whole suite (local[2]); made by the first test that needs it."""
    from atomq.spark_workers.datasource import register
    from atomq.spark_workers.session import start_session

    session = start_session("local[2]", "atomq-tests", **{"spark.scheduler.mode": "FAIR"})
    register(session)
    yield session
    session.stop()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for one test, its spans kept in memory; off again afterwards."""
    exporter = InMemorySpanExporter()
    telemetry.setup_tracing(exporter)
    yield exporter
    telemetry.shutdown_tracing()
