"""The Lua scripts of the queue server, loaded once and called by name.

Each ``<name>.lua`` beside this file documents its KEYS and ARGV in a header.
Redis has no ``include``; the shared helpers of the ``_lib_*.lua`` parts, after the
measured footprint constants of ``atomq.platform.queues.footprint``, the number of
keys of a destination (``keys.DEST_KEY_COUNT``) and the length of a tenant's log of topic
pattern changes (``defaults.TOPIC_CHANGE_LOG_LENGTH``), are prepended to
every script here, so each script still arrives at Redis as one unit and its
SHA is stable for EVALSHA. The scripts of the message routes have a keyed form too, which checks
the request's API key before all that (``_lib_keycheck.lua``, ``KEY_CHECKED``).
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Sequence

import redis
from redis.commands.core import Script

from atomq import defaults
from atomq.platform.queues.footprint import lua_prelude
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.keys import DEST_KEY_COUNT

LIB_PARTS = ("_lib_state", "_lib_groups", "_lib_values", "_lib_failures", "_lib_exclusive", "_lib_sweep", "_lib_send")
"""The shared helpers, by concern, prepended to every script in this order (a Lua local is seen
only below its definition, and helpers of one part call those of the parts before it). Every
script gets all of them rather than only those it calls: Valkey compiles a script once per SHA,
so the unused ones cost nothing at run time, and picking them would need a resolver of the
calls between some hundred helpers for no gain."""

NAMES = (
    "send",
    "send_apply",
    "send_stage",
    "send_reserve",
    "send_release",
    "get",
    "settle",
    "browse",
    "dead_reasons",
    "manage",
    "sweep",
    "due",
    "oldest",
    "queue_put",
    "queue_fields",
    "subscriber_put",
    "unlink_component",
    "topics_since",
    "lease",
    "window",
    "listener_put",
    "listener_control",
    "listener_schedule",
    "listener_start",
    "listener_finish",
    "memory_state",
    "refusal",
    "reserve",
    "forget_nodes",
    "counts_now",
    "move_start",
    "move_cancel",
    "move_step",
)


KEY_CHECKED = frozenset({"send", "get", "settle"})
"""The scripts of the message routes (send and publish, get, ack, nack, extend, release): each is
also registered in a keyed form (:func:`keyed`) that first checks the request's API key and takes
the check's key and arguments off again (``_lib_keycheck.lua``), so that a request's key check and
its operation are one round trip (``atomq.platform.store.carried_check``)."""


def keyed(name: str) -> str:
    """The name of script ``name``'s keyed form (``KEY_CHECKED``)."""
    return f"{name}+key"


ALWAYS_RUN = frozenset(NAMES) - {"send", "send_stage", "send_reserve", "queue_put", "queue_fields", "subscriber_put",
                                 "listener_put"}
"""The scripts that run also while the store is at its maxmemory: Valkey refuses a script whose
first write may grow memory (XADD, HSET, ZADD...) at maxmemory, and a get that takes, an ack that
frees, a nack, a sweep, a lease renewal, a listener's execution must keep working so consumers can
bring memory back down; a send refused there must still be counted (its rate-limit window, its
refusal) and answered as the memory state says. They are flagged ``allow-oom`` (a shebang line before the prelude) where
the store knows script flags (Valkey, Redis 7 and later; not fakeredis); what they add (an
in-flight entry, a dead letter) is small against what acks free. Sends and the creation of queues,
subscribers and listeners are not flagged: at maxmemory the store refuses them, as the node's
memory state already does before it (``atomq.platform.watch.memory_state``). The steps of a chunked send
after its first (``send_apply``) are flagged: the first step admitted and counted their bytes, and a
request half made must be finished, not stuck until memory comes down; so is the release of a
wide send's reservation (``send_release``), which only gives back."""
ALLOW_OOM = "#!lua flags=allow-oom\n"


def knows_script_flags(client: RedisClient) -> bool:
    """Whether the store takes a script's flags on a shebang line (Valkey and Redis 7 do)."""
    try:
        client.eval(ALLOW_OOM + "return 1", 0)
    except redis.ResponseError:
        return False
    return True


def _source(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


class ScriptLibrary:
    """The registered scripts of one Redis client, run by EVALSHA (routed by the first key on a
    cluster).

    Where the store answers ``NOSCRIPT`` (after a restart, a failover or SCRIPT FLUSH) every
    script is loaded again, not only the one that was missing (as redis-py's ``Script`` would):
    the store then holds all of them or none, so a pipeline of two scripts (an ack, then a get)
    never finds the second loaded and the first missing, and runs them out of order.
    """

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        lib = (lua_prelude() + f"local DEST_KEYS = {DEST_KEY_COUNT}\n"
               f"local TOPIC_LOG_LENGTH = {defaults.TOPIC_CHANGE_LOG_LENGTH}\n"
               + "".join(_source(part) for part in LIB_PARTS))
        flagged = ALLOW_OOM if knows_script_flags(client) else ""
        self._scripts: dict[str, Script] = {
            name: client.register_script((flagged if name in ALWAYS_RUN else "") + lib + "\n" + _source(name))
            for name in NAMES
        }
        check = _source("_lib_keycheck")
        self._scripts.update({
            keyed(name): client.register_script((flagged if name in ALWAYS_RUN else "") + check + lib + "\n"
                                                + _source(name))
            for name in KEY_CHECKED
        })

    def __call__(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        sha = self._scripts[name].sha
        try:
            return self.client.evalsha(sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            self.load_all(self.client)
            return self.client.evalsha(sha, len(keys), *keys, *args)

    def queue(self, pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Adds an EVALSHA of script ``name`` to a pipeline (its reply comes with the pipeline's).

        Not through redis-py's ``Script``, which makes a pipeline ask ``SCRIPT EXISTS`` first: a
        round trip more on every call. A reply that is ``NOSCRIPT`` (the script did not run) is
        the caller's to retry, with :meth:`__call__`, which loads them all."""
        pipe.execute_command("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)

    def missing(self, client: RedisClient) -> list[str]:
        """Names of scripts Redis does not hold (after a restart or SCRIPT FLUSH)."""
        names = list(self._scripts)
        present = client.script_exists(*(self._scripts[n].sha for n in names))
        return [n for n, ok in zip(names, present) if not ok]

    def load_all(self, client: RedisClient) -> None:
        """Loads every script (on every primary of a cluster, or on the one node ``client`` is of):
        at start, so a syntax error shows then and not on first use, and whenever one is missing."""
        for script in self._scripts.values():
            script.sha = client.script_load(script.script)
