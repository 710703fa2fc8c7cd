"""The Lua scripts of the queue server, loaded once and called by name.

Each ``<name>.lua`` beside this file documents its KEYS and ARGV in a header.
Redis has no ``include``; the shared helpers of ``_lib.lua``, after the
measured footprint constants of ``atomq.platform.footprint`` and the number of
keys of a destination (``keys.DEST_KEY_COUNT``), are prepended to
every script here, so each script still arrives at Redis as one unit and its
SHA is stable for EVALSHA.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Sequence

from redis.commands.core import Script

from atomq.platform.connection import RedisClient
from atomq.platform.footprint import lua_prelude
from atomq.platform.keys import DEST_KEY_COUNT

NAMES = (
    "send",
    "get",
    "settle",
    "browse",
    "manage",
    "sweep",
    "due",
    "oldest",
    "queue_put",
    "subscriber_put",
    "unlink_component",
    "lease",
    "window",
    "listener_put",
    "listener_control",
    "listener_schedule",
    "listener_start",
    "listener_finish",
)


def _source(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


class ScriptLibrary:
    """The registered scripts of one Redis client.

    redis-py's ``Script`` calls EVALSHA and reloads the script on ``NOSCRIPT``
    (also after a Redis restart), and routes it by its first key on a cluster.
    """

    def __init__(self, client: RedisClient) -> None:
        lib = lua_prelude() + f"local DEST_KEYS = {DEST_KEY_COUNT}\n" + _source("_lib")
        self._scripts: dict[str, Script] = {
            name: client.register_script(lib + "\n" + _source(name)) for name in NAMES
        }

    def __call__(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._scripts[name](keys=list(keys), args=list(args))

    def queue(self, pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Adds a call of script ``name`` to a pipeline (its reply comes with the pipeline's)."""
        self._scripts[name](keys=list(keys), args=list(args), client=pipe)

    def missing(self, client: RedisClient) -> list[str]:
        """Names of scripts Redis does not hold (after a restart or SCRIPT FLUSH)."""
        names = list(self._scripts)
        present = client.script_exists(*(self._scripts[n].sha for n in names))
        return [n for n, ok in zip(names, present) if not ok]

    def load_all(self, client: RedisClient) -> None:
        """Loads every script now, so a syntax error shows at start and not on first use."""
        for script in self._scripts.values():
            script.sha = client.script_load(script.script)
