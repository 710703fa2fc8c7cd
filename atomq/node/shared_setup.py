"""What every node on one store must share: its owner key and its rq Redis.

Two nodes on one store with different owner keys would each take owner calls the other refuses;
with different rq Redis servers, the executions one node schedules would never reach the other's
workers, and each would take the other's listeners for dead. The first node to start records a
digest of the owner key (never the key) and the identity of its rq Redis (a random id kept in
that Redis) in the store; a node that differs refuses to start and says which.
"""

from __future__ import annotations

import hashlib
import uuid

import redis

from atomq.errors import InvalidInput, StorageError
from atomq.platform.store import keys as k
from atomq.platform.store.storage import Storage


def check_shared_setup(storage: Storage, rq: redis.Redis, owner_key: str, replace_owner_key: bool = False) -> None:
    """Records the node's owner key digest and rq identity where none is known yet; refuses
    (InvalidInput) a node whose differ from those known. ``replace_owner_key``: this node's owner
    key replaces the known one (every other node must then be restarted with it)."""
    owner = hashlib.sha256(owner_key.encode("utf-8")).hexdigest()
    try:
        rq.set(k.RQ_IDENTITY_KEY, uuid.uuid4().hex, nx=True)
        stored: bytes = rq.get(k.RQ_IDENTITY_KEY) or b""  # type: ignore[assignment]  # a bytes client
        rq_identity = stored.decode()
    except redis.RedisError as exc:
        raise StorageError(f"cannot read rq's Redis: {type(exc).__name__}: {exc}") from None
    client = storage.client
    if replace_owner_key:
        storage.call(client.hset, k.NODES_SETUP_KEY, "owner", owner)
    storage.call(client.hsetnx, k.NODES_SETUP_KEY, "owner", owner)
    storage.call(client.hsetnx, k.NODES_SETUP_KEY, "rq", rq_identity)
    known_owner, known_rq = storage.call(client.hmget, k.NODES_SETUP_KEY, ["owner", "rq"])
    if known_owner.decode() != owner:
        raise InvalidInput("the other nodes of this store have another owner key: give this node theirs "
                           "(ATOMQ_OWNER_KEY), or, to change the owner key of every node, stop them all and start "
                           "one with --replace-owner-key", field="owner_key")
    if known_rq.decode() != rq_identity:
        raise InvalidInput("the other nodes of this store use another rq Redis for their executions: give this "
                           "node the same --rq-redis-url", field="rq_redis_url")
