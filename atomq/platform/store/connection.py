"""Clients for an outside Redis or Valkey (``--redis-url``), checked before atomq trusts them.

atomq keeps every message in Redis, so a server that may evict keys under
memory pressure would lose messages silently: atomq refuses one unless told
to accept the risk. Streams features atomq uses need Redis 7.0 or later.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlsplit, urlunsplit

import redis
import redis.cluster
from redis.cluster import ClusterNode
from redis.exceptions import RedisClusterException

from atomq.errors import InvalidInput, StorageError, UnsafeStorage

RedisClient = redis.Redis | redis.cluster.RedisCluster
"""What atomq stores through: one server, or a Redis or Valkey Cluster (redis-py's cluster client)."""

__all__ = ["open_redis", "check_server", "redact_url"]

log = logging.getLogger("atomq")

_MIN_VERSION = (7, 0)


def redact_url(url: str) -> str:
    """``url`` without its password (in the user part or a ``password=`` query parameter)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        username = userinfo.partition(":")[0]
        netloc = f"{username}@{hostport}" if username else hostport
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


SOCKET_TIMEOUT_S = 15.0
"""Above the longest a call may rightly take: a blocking read waits at most a second at a time, a
send to a sync queue at most ``defaults.MAX_SYNC_TIMEOUT_MS``, a script a bounded chunk."""
CONNECT_TIMEOUT_S = 5.0


def open_redis(
    url: str, *, allow_eviction: bool = False, **kwargs: Any
) -> RedisClient:
    """A checked client for ``url`` (``redis://``, ``rediss://``, ``unix://``).

    A Redis Cluster (``cluster_enabled:1``) gets a ``RedisCluster`` client. ``url``
    may name several nodes of one cluster, comma-separated: the first that
    answers is asked, and all are the client's seeds, so a process that
    connects while one of them is down still finds the cluster.
    Raises StorageError when no server can be reached and UnsafeStorage
    when it may evict keys (see :func:`check_server`). Unless ``kwargs`` say
    otherwise, a call gives up after ``SOCKET_TIMEOUT_S`` and a connection
    after ``CONNECT_TIMEOUT_S``: redis-py would wait for ever on a store that
    stopped answering, and hold a request thread with it.
    """
    kwargs.setdefault("socket_timeout", SOCKET_TIMEOUT_S)
    kwargs.setdefault("socket_connect_timeout", CONNECT_TIMEOUT_S)
    urls = [u.strip() for u in url.split(",") if u.strip()] or [url]
    shown = ",".join(redact_url(u) for u in urls)
    client: RedisClient | None = None
    try:
        failure: Exception | None = None
        for candidate in urls:
            client = redis.Redis.from_url(candidate, **kwargs)
            try:
                cluster = int(client.info("cluster").get("cluster_enabled", 0)) == 1
                break
            except (redis.ConnectionError, redis.TimeoutError) as e:
                client.close()
                client, failure = None, e
        if client is None:
            raise failure or redis.ConnectionError("no server")
        if cluster:
            client.close()
            seeds = [ClusterNode(p.hostname or "127.0.0.1", p.port or 6379)  # type: ignore[no-untyped-call]
                     for p in map(urlparse, urls)]
            client = redis.cluster.RedisCluster.from_url(candidate, startup_nodes=seeds, **kwargs)
        elif len(urls) > 1:
            raise InvalidInput(f"{shown} names several servers, which only the nodes of a Redis Cluster may be",
                               field="redis_url")
        check_server(client, allow_eviction=allow_eviction, name=shown)
    except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as e:
        if client is not None:
            client.close()
        raise StorageError(
            f"cannot use Redis at {shown}: {type(e).__name__}: {e}", url=shown
        ) from None
    except BaseException:
        if client is not None:
            client.close()
        raise
    return client


def check_server(
    client: RedisClient, *, allow_eviction: bool = False, name: str = "Redis"
) -> list[str]:
    """Refuse a server atomq cannot trust with messages; return the warnings it logged.

    Rules: version 7.0 or later, and ``maxmemory-policy noeviction`` (an
    evicting server is accepted only with ``allow_eviction``, and loudly).
    A cluster is checked node by node.
    """
    if isinstance(client, redis.cluster.RedisCluster):
        # A node down (failing over) is not checked now; the others are, and one must answer.
        warnings: list[str] = []
        answered = 0
        for node in client.get_nodes():  # type: ignore[no-untyped-call]
            node_client = client.get_redis_connection(node)
            try:
                warnings += check_server(node_client, allow_eviction=allow_eviction,
                                         name=f"{name} node {node.name}")
                answered += 1
            except (redis.ConnectionError, redis.TimeoutError) as e:
                message = f"WARNING: {name} node {node.name} does not answer ({e}): not checked"
                log.warning(message)
                warnings.append(message)
        if not answered:
            raise redis.ConnectionError(f"no node of {name} answers")
        return warnings

    warnings = []

    def warn(message: str) -> None:
        log.warning(message)
        warnings.append(message)

    try:
        info = client.info("server")
    except redis.ResponseError as e:  # INFO may be denied by an ACL
        warn(f"WARNING: could not check the version of {name} ({e}); atomq needs Redis 7.0 or later.")
        info = None
    version = str(info.get("valkey_version") or info.get("redis_version") or "0") if info else ""
    if info is not None and _version_tuple(version) < _MIN_VERSION:
        raise UnsafeStorage(
            f"{name} runs version {version}; atomq needs Redis 7.0 or later (or Valkey 7.2 or later)",
            version=version,
        )

    try:
        policy = _config_value(client.config_get("maxmemory-policy"), "maxmemory-policy")
    except redis.ResponseError as e:  # CONFIG is often disabled on managed services
        warn(
            f"WARNING: could not check the maxmemory-policy of {name} ({e}). atomq needs "
            "maxmemory-policy noeviction: a server that evicts keys loses messages silently. "
            "Make sure the service is configured with noeviction."
        )
        return warnings
    if policy != "noeviction":
        rule = (
            f"{name} has maxmemory-policy {policy}: when it runs out of memory it evicts keys "
            "and atomq loses messages silently. atomq needs noeviction: run "
            "`CONFIG SET maxmemory-policy noeviction` (and set it in the server's config file "
            "so it survives a restart)"
        )
        if not allow_eviction:
            raise UnsafeStorage(rule + ", or allow eviction explicitly to accept the risk", policy=policy)
        warn(f"WARNING: eviction allowed, messages may be lost. {rule}.")
    return warnings


def _config_value(reply: Any, key: str) -> str:
    """One value of a CONFIG GET reply, whether the client decodes responses or not."""
    value = reply.get(key, reply.get(key.encode())) if isinstance(reply, dict) else None
    if isinstance(value, bytes):
        value = value.decode()
    return str(value or "")


def _version_tuple(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers)
