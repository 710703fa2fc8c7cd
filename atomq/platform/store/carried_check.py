"""A request's API key check carried by the script of its operation: one round trip, not two.

A key's entry lives in its tenant's cluster slot (``keys.api_key_table``), the slot of every key a
tenant's send, get and settle scripts touch. So the check need not be a read of its own before the
operation: the script's keyed form (``ScriptLibrary``, ``_lib_keycheck.lua``) compares the entry
with the one the presented key makes first, and refuses (``NOKEY``) before it reads or writes
anything else. On a store where redis-py costs some 50 µs of the node's CPU a command (BENCHMARKS.md,
"Store round trips"), that is a command less on every message request.

The check is *pending* for a request (a context variable: each thread's request has its own) from
the moment the front knows the key well-formed until one of:

- the first script call that can carry it (``Storage.run``, ``run_together``, ``run_durably`` of a
  script with a keyed form, whose first key is in the key's own slot) takes it;
- any other call to the store (every other method of ``Storage``) makes it alone first, so that no
  read or write is made for a key not yet known good;
- the front makes it alone (:func:`settle`) before it answers, whatever it answers (an error found
  before any store call, a success that needed none), and before it takes a share of something a
  tenant holds in the process (a long-poll slot).

A carried call that ends otherwise than with its script's reply (a lost connection, a store at its
maxmemory that refused the script before it ran) puts the check back, pending: the script may not
have made it. A check that failed stays with the request, refused: every later call to the store,
and the front's last :func:`settle`, raise its refusal again, so code that caught it on the way
cannot go on for the key. So a request with a bad key gets the answer it got when the key was read
first, and what it makes happen is what it made happen then: nothing but the count of a failed check.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from atomq.errors import AtomqError

REFUSED = "NOKEY"
"""The error code a keyed script replies with when the key's entry is not the one expected."""


@dataclass(eq=False)
class KeyCheck:
    """That hash ``table`` holds ``entry`` at ``key_id``: the key's entry is there and is the one the
    presented key makes (its tenant and digest). ``read_entry`` reads it alone; ``refusal`` is the
    error a failed check raises. ``refused`` tells, afterwards, that it failed."""

    table: str
    key_id: str
    entry: str
    read_entry: Callable[[], bytes | None]
    refusal: Callable[[], AtomqError]
    refused: bool = False

    def refuse(self) -> AtomqError:
        self.refused = True
        return self.refusal()

    def make_alone(self) -> None:
        """The check as a read of its own; raises the refusal when the entry is not the one expected
        (the check then pending again, refused). Digests compared in constant time
        (``api_keys.verify``'s reason)."""
        stored = self.read_entry()
        if stored is None or not hmac.compare_digest(stored, self.entry.encode()):
            _PENDING.set(self)
            raise self.refuse()

    def carried_by(self, first_key: str) -> bool:
        """Whether a script whose first key is ``first_key`` may carry the check: its key is in the
        same slot (the same hash tag). A script of another tenant's slot never carries it, and a
        cluster never sees a script of two slots."""
        return _hash_tag(first_key) == _hash_tag(self.table)


_PENDING: ContextVar[KeyCheck | None] = ContextVar("atomq_pending_key_check", default=None)


@contextmanager
def pending(check: KeyCheck | None) -> Iterator[None]:
    """Holds ``check`` pending for the calls made in the ``with`` body (None: no check pending)."""
    token = _PENDING.set(check)
    try:
        yield
    finally:
        _PENDING.reset(token)


def settle() -> None:
    """Makes the pending check alone now, if one is pending (it is no longer pending after); raises
    the refusal of one that failed."""
    check = _pending()
    if check is not None:
        _PENDING.set(None)
        check.make_alone()


def take(first_key: str) -> KeyCheck | None:
    """The pending check, taken to be carried by a script whose first key is ``first_key``; None
    when none is pending, or when it was pending but that script cannot carry it (it is then made
    alone first). Raises the refusal of one that failed."""
    check = _pending()
    if check is None:
        return None
    _PENDING.set(None)
    if check.carried_by(first_key):
        return check
    check.make_alone()
    return None


def put_back(check: KeyCheck) -> None:
    """Makes ``check`` pending again after a call that carried it got no reply of its script's:
    the script may not have made it, or it refused it."""
    _PENDING.set(check)


def _pending() -> KeyCheck | None:
    """The pending check; raises its refusal again when it failed."""
    check = _PENDING.get()
    if check is not None and check.refused:
        raise check.refusal()
    return check


def _hash_tag(key: str) -> str:
    """The part of ``key`` a cluster hashes: the first ``{...}`` that is not empty, else all of it."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key
