"""rq's Redis, which holds the execution job queues: the node's own Redis unless
``--rq-redis-url`` names another (rq does not speak Redis Cluster)."""

from __future__ import annotations

import redis

from atomq.errors import InvalidInput, StorageError

RQ_SOCKET_TIMEOUT_S = 30.0
"""Above rq's own blocking waits (a worker waits at most a few seconds at a time)."""


def rq_client(url: str) -> redis.Redis:
    """A client of rq's Redis that connects on first use, so a node whose rq Redis
    is away for a moment still serves the API (its supervisor retries each round)."""
    return redis.Redis.from_url(url, socket_timeout=RQ_SOCKET_TIMEOUT_S, socket_connect_timeout=5)


def rq_connection(url: str) -> redis.Redis:
    """rq's Redis, checked: a standalone server (rq does not speak Redis Cluster)."""
    if "," in url:
        raise InvalidInput("rq needs one standalone Redis for its job queues, not a cluster's nodes: give "
                           "--rq-redis-url", field="rq_redis_url")
    client = rq_client(url)
    try:
        cluster = int(client.info("cluster").get("cluster_enabled", 0)) == 1
    except redis.RedisError as exc:
        client.close()
        raise StorageError(f"cannot use rq's Redis: {type(exc).__name__}: {exc}") from None
    if cluster:
        client.close()
        raise InvalidInput("rq needs a standalone Redis for its job queues, not a cluster: give --rq-redis-url",
                           field="rq_redis_url")
    return client
