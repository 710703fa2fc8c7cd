"""The boundary to Redis: script calls with redis-py errors turned into atomq errors once.

Scripts report rule violations as error replies whose first word is a code
(``NOQUEUE``, ``CONFLICT``, ...); callers name the errors they expect and
everything else from Redis becomes a StorageError, never a bare redis-py one.
That includes what redis-py's cluster client raises outside ``RedisError``
(``RedisClusterException`` and its subclasses, such as ``SlotNotCoveredError``)
and socket errors: :data:`STORE_ERRORS`.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Mapping, Sequence

import redis
from redis.exceptions import RedisClusterException

from atomq.errors import AtomqError, StorageError, StorageFull
from atomq.platform.connection import RedisClient
from atomq.platform.scripts import ScriptLibrary

ErrorMap = Mapping[str, Callable[[list[str]], AtomqError]]
"""A script's error codes and the error each raises, made from the words of the reply after its code."""
STORE_ERRORS: tuple[type[Exception], ...] = (
    redis.RedisError, RedisClusterException, builtins.ConnectionError, builtins.TimeoutError)
"""Everything a call to the store may raise when the store, not the caller, failed."""


def script_code(exc: redis.ResponseError) -> str:
    """The code word a script put first in its error reply."""
    text = str(exc).strip()
    return text.split(" ", 1)[0] if text else ""


class Storage:
    """A Redis client and the scripts registered on it."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self.scripts = ScriptLibrary(client)

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any], errors: ErrorMap | None = None) -> Any:
        """Runs script ``name``; error codes in ``errors`` raise the mapped error."""
        try:
            return self.scripts(name, keys, args)
        except redis.ResponseError as exc:
            code = script_code(exc)
            if errors and code in errors:
                raise errors[code](str(exc).split()[1:]) from None
            raise translate(exc) from None
        except STORE_ERRORS as exc:
            raise translate(exc) from None

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs a plain client call with the same error translation."""
        try:
            return fn(*args, **kwargs)
        except STORE_ERRORS as exc:
            raise translate(exc) from None


def translate(exc: Exception) -> StorageError:
    """One of :data:`STORE_ERRORS` as an atomq StorageError."""
    text = str(exc)
    # A command answers "OOM ..."; a script whose first write may grow memory, "command not allowed
    # when used memory > 'maxmemory'".
    if isinstance(exc, redis.ResponseError) and (text.startswith("OOM") or "> 'maxmemory'" in text):
        return StorageFull(
            "Redis reached its maxmemory and refuses writes; free space (ack or delete messages) "
            "or raise maxmemory",
            redis_error=text,
        )
    return StorageError(f"Redis failed: {text}", redis_error=type(exc).__name__)
