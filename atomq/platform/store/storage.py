"""The boundary to Redis: script calls with redis-py errors turned into atomq errors once.

Scripts report rule violations as error replies whose first word is a code
(``NOQUEUE``, ``CONFLICT``, ...); callers name the errors they expect and
everything else from Redis becomes a StorageError, never a bare redis-py one.
That includes what redis-py's cluster client raises outside ``RedisError``
(``RedisClusterException`` and its subclasses, such as ``SlotNotCoveredError``)
and socket errors: :data:`STORE_ERRORS`.

Every call also minds the request's pending API key check (``carried_check``): a script of the
message routes carries it, any other call makes it alone first.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, Mapping, Sequence

import redis
from redis.exceptions import RedisClusterException

from atomq.errors import AtomqError, NotDurable, OutcomeUnknown, StorageError, StorageFull
from atomq.platform.scripts import KEY_CHECKED, ScriptLibrary, keyed
from atomq.platform.store import carried_check
from atomq.platform.store.carried_check import KeyCheck
from atomq.platform.store.connection import RedisClient

ErrorMap = Mapping[str, Callable[[list[str]], AtomqError]]
"""A script's error codes and the error each raises, made from the words of the reply after its code."""
STORE_ERRORS: tuple[type[Exception], ...] = (
    redis.RedisError, RedisClusterException, builtins.ConnectionError, builtins.TimeoutError)
"""Everything a call to the store may raise when the store, not the caller, failed."""
MAYBE_RAN: tuple[type[Exception], ...] = (
    redis.ConnectionError, redis.TimeoutError, builtins.ConnectionError, builtins.TimeoutError)
"""What a call raises when the store may have run it and its answer was lost (a time-out, a
connection cut after the call was sent), as opposed to a refusal that says it did not run."""


def script_code(exc: redis.ResponseError) -> str:
    """The code word a script put first in its error reply."""
    text = str(exc).strip()
    return text.split(" ", 1)[0] if text else ""


class Storage:
    """A Redis client and the scripts registered on it."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self.scripts = ScriptLibrary(client)

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any], errors: ErrorMap | None = None, *,
            writes_once: bool = False) -> Any:
        """Runs script ``name``; error codes in ``errors`` raise the mapped error. ``writes_once``:
        the script recognises a repeat of itself (a request token), and a lost answer raises
        OutcomeUnknown rather than StorageError, since it may have stored what it was given."""
        check = _carried([name], keys)
        if check is not None:
            name, keys, args, errors = _with_check(check, name, keys, args, errors)
        try:
            return self.scripts(name, keys, args)
        except redis.ResponseError as exc:
            error = script_error(exc, errors)
        except STORE_ERRORS as exc:
            error = translate(exc, writes_once)
        _after_error(check)
        raise error

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.client, redis.cluster.RedisCluster)

    def node_name(self, key: str) -> str:
        """The name of the node holding ``key`` on a cluster ("" on a single server)."""
        node = self._node_of(key)
        return "" if node is None else str(node.name)

    def _node_of(self, key: str) -> Any:
        """On a cluster, the node that holds ``key``'s slot; None on a single server."""
        if isinstance(self.client, redis.cluster.RedisCluster):
            return self.client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return None

    def _client_of(self, node: Any) -> Any:
        """The client of one node (``_node_of``), or the only one."""
        return self.client if node is None else self.client.get_redis_connection(node)  # type: ignore[union-attr]

    def node_infos(self, section: str, key: str | None = None) -> list[dict[str, Any]]:
        """``INFO section`` of the server; on a cluster, of the primary holding ``key``, or of every
        primary without one (a cluster client's own INFO asks one node only)."""
        client: Any = self.client
        if not isinstance(client, redis.cluster.RedisCluster):
            return [self.call(client.info, section)]
        nodes = [self._node_of(key)] if key is not None else self.call(client.get_primaries)
        return [self.call(client.get_redis_connection(node).info, section) for node in nodes]

    def run_many(self, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> list[Any]:
        """Runs script ``name`` once per ``(keys, args)`` in one round trip, or on a cluster one
        per node (a cluster pipeline refuses scripts: each call goes to the node of its keys).
        Returns each call's reply in order; a call that failed gives its exception instead."""
        carried_check.settle()
        by_node: dict[Any, list[int]] = {}
        for i, (keys, _) in enumerate(calls):
            by_node.setdefault(self._node_of(keys[0]), []).append(i)
        replies: list[Any] = [None] * len(calls)
        for node, indexes in by_node.items():
            pipe = self._client_of(node).pipeline(transaction=False)
            for i in indexes:
                self.scripts.queue(pipe, name, calls[i][0], calls[i][1])
            for i, reply in zip(indexes, self._execute(pipe)):
                replies[i] = self._unless_missing(reply, name, *calls[i])
        return replies

    def _execute(self, pipe: Any, writes_once: bool = False) -> list[Any]:
        """The replies of a pipeline sent to one node (errors in place). On a cluster, a node that
        fails, or no longer holds the slot (MOVED or ASK: nothing ran there), makes the client read
        the slot map again, so that the next call goes where the slot is now; this one fails with
        the store's error (503), as the cluster client's own calls do once their retries are spent."""
        try:
            replies: list[Any] = pipe.execute(raise_on_error=False)
        except STORE_ERRORS as exc:
            self._reread_slots()
            raise translate(exc, writes_once) from None
        moved = next((r for r in replies if isinstance(r, redis.exceptions.AskError)), None)
        if moved is not None:
            self._reread_slots()
            raise translate(moved)
        return replies

    def _reread_slots(self) -> None:
        if isinstance(self.client, redis.cluster.RedisCluster):
            try:
                self.client.nodes_manager.initialize()
            except STORE_ERRORS:
                pass  # the next call's own client reads it again

    def _unless_missing(self, reply: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """A pipelined script's reply; where the store did not hold the script (after a restart or a
        failover: NOSCRIPT, so it did not run), the reply of running it now, which loads it."""
        if not isinstance(reply, redis.exceptions.NoScriptError):
            return reply
        try:
            return self.scripts(name, keys, args)
        except STORE_ERRORS as exc:
            return exc

    def run_together(self, calls: Sequence[tuple[str, Sequence[str], Sequence[Any], ErrorMap | None]]) -> list[Any]:
        """Runs scripts ``(name, keys, args, errors)`` in order in one round trip (a pipeline, not a
        transaction: each script is atomic, the sequence is not). Their keys share one slot, so on a
        cluster the pipeline goes to the node of that slot. Returns each reply, where a script failed
        the error :meth:`run` would raise (not raised: the caller sees what the others did first).
        A pending key check is carried by each of them (each may be the one that runs first)."""
        check = _carried([name for name, _, _, _ in calls], calls[0][1])
        if check is not None:
            calls = [_with_check(check, *call) for call in calls]
        try:
            try:
                pipe = self._client_of(self._node_of(calls[0][1][0])).pipeline(transaction=False)
            except STORE_ERRORS as exc:
                raise translate(exc) from None
            for name, keys, args, _ in calls:
                self.scripts.queue(pipe, name, keys, args)
            replies = [self._unless_missing(reply, name, keys, args)
                       for (name, keys, args, _), reply in zip(calls, self._execute(pipe))]
        except AtomqError:
            _after_error(check)
            raise
        answers = [script_error(reply, errors) if isinstance(reply, redis.ResponseError)
                   else translate(reply) if isinstance(reply, Exception) else reply
                   for (_, _, _, errors), reply in zip(calls, replies)]
        if any(isinstance(answer, AtomqError) for answer in answers):
            _after_error(check)
        return answers

    def run_durably(self, name: str, keys: Sequence[str], args: Sequence[Any], errors: ErrorMap | None,
                    replicas: int, timeout_ms: int, *, writes_once: bool = False) -> tuple[Any, list[int]]:
        """Runs script ``name`` (as :meth:`run`), then waits on the same connection until what it
        wrote is synced to the append-only file, locally and on ``replicas`` replicas, for at most
        ``timeout_ms``: Valkey's WAITAOF, which waits for the writes of its own connection only, so
        both go in one pipeline. On a cluster the pipeline goes to the node of the keys' slot (the
        cluster client would send WAITAOF to a default node). Returns the script's reply and
        WAITAOF's ``[local, replicas]`` acknowledgements (each below its target on a time-out).
        ``writes_once`` as in :meth:`run`."""
        check = _carried([name], keys)
        if check is not None:
            name, keys, args, errors = _with_check(check, name, keys, args, errors)
        try:
            client = self._client_of(self._node_of(keys[0]))
            for attempt in range(2):
                pipe = client.pipeline(transaction=False)
                self.scripts.queue(pipe, name, keys, args)
                pipe.execute_command("WAITAOF", 1, replicas, timeout_ms)
                reply, synced = self._execute(pipe, writes_once)
                if not isinstance(reply, redis.exceptions.NoScriptError) or attempt:
                    break
                self.scripts.load_all(client)  # the script did not run: loaded, it runs again
        except STORE_ERRORS as exc:
            _after_error(check)
            raise translate(exc, writes_once) from None
        except AtomqError:
            _after_error(check)
            raise
        if isinstance(reply, redis.ResponseError):
            error = script_error(reply, errors)
            _after_error(check)
            raise error
        if isinstance(synced, redis.ResponseError) and "appendonly" in str(synced):
            raise NotDurable("the store keeps no append-only file (appendonly no), so a send to a sync queue is "
                             "never synced to disk: turn appendonly on, or make the queue async",
                             redis_error=str(synced))
        if isinstance(synced, Exception):
            raise translate(synced)
        return reply, [int(n) for n in synced]

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs a plain client call with the same error translation (a pending key check made first)."""
        carried_check.settle()
        try:
            return fn(*args, **kwargs)
        except STORE_ERRORS as exc:
            raise translate(exc) from None


def _carried(names: Sequence[str], keys: Sequence[str]) -> KeyCheck | None:
    """The request's pending key check, taken to be carried by scripts ``names`` run on ``keys``'s
    slot; None when none is pending, or when they cannot carry it (a script without a keyed form,
    another slot: it is then made alone first)."""
    if not all(name in KEY_CHECKED for name in names):
        carried_check.settle()
        return None
    return carried_check.take(keys[0])


def _with_check(check: KeyCheck, name: str, keys: Sequence[str], args: Sequence[Any],
                errors: ErrorMap | None) -> tuple[str, list[str], list[Any], ErrorMap]:
    """A call of script ``name`` as its keyed form, carrying ``check`` (``_lib_keycheck.lua``)."""
    return (keyed(name), [*keys, check.table], [*args, check.key_id, check.entry],
            {**(errors or {}), carried_check.REFUSED: lambda _: check.refuse()})


def _after_error(check: KeyCheck | None) -> None:
    """After a carried call that got no reply of its script's: ``check`` pending again (an error may
    mean the script did not run, nor check; a refused check refuses every later call)."""
    if check is not None:
        carried_check.put_back(check)


def script_error(exc: redis.ResponseError, errors: ErrorMap | None) -> AtomqError:
    """A script's error reply as the error its code maps to in ``errors``, else as a StorageError."""
    code = script_code(exc)
    if errors and code in errors:
        return errors[code](str(exc).split()[1:])
    return translate(exc)


def translate(exc: Exception, writes_once: bool = False) -> StorageError:
    """One of :data:`STORE_ERRORS` as an atomq StorageError; with ``writes_once`` (a call that
    recognises its own repeat), a lost answer as OutcomeUnknown."""
    text = str(exc)
    if writes_once and isinstance(exc, MAYBE_RAN):
        return OutcomeUnknown(f"the store did not answer in time ({type(exc).__name__}: {text}), so what was "
                              "sent may or may not be stored", redis_error=type(exc).__name__)
    # A command answers "OOM ..."; a script whose first write may grow memory, "command not allowed
    # when used memory > 'maxmemory'".
    if isinstance(exc, redis.ResponseError) and (text.startswith("OOM") or "> 'maxmemory'" in text):
        return StorageFull(
            "Redis reached its maxmemory and refuses writes; free space (ack or delete messages) "
            "or raise maxmemory",
            redis_error=text,
        )
    return StorageError(f"Redis failed: {text}", redis_error=type(exc).__name__)
