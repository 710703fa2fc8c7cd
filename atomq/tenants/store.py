"""Tenant accounts and their API keys, kept in Redis beside the queues.

A tenant's own keys (its record, its set of key ids, and the entries of the
keys issued since format 6) sit in its cluster slot, so a key is issued in one
step (``scripts.ADD_KEY``). The shared tables of the keys issued before
(``aq:apikeys:{XX}``, 256 hashes spread over the slots by the key id) and the
set of tenants (``aq:tenants``) are in other slots, so no one script can
change both. Every step that spans them is ordered so that a crash between two
steps leaves nothing that works when it should not: revocation and removal
delete a key's entry first, so a key stops working before anything else
changes. Nothing is cached for an API key: every request reads the entry, so
that holds at once on every node. An SQS pair's check keeps what it read for
up to a second in each process (``sqs_keys.SqsKeys.signer``), within the 2 s
the contract allows a revocation to reach every node.
"""

from __future__ import annotations

import builtins
import hmac
import logging
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from atomq import defaults
from atomq.errors import Conflict, InvalidInput, NotFound, Unauthorized
from atomq.platform.store import keys as k
from atomq.platform.store import listener_keys as lk
from atomq.platform.store.carried_check import KeyCheck
from atomq.platform.store.connection import RedisClient
from atomq.platform.store.storage import Storage
from atomq.tenants import api_keys, scripts
from atomq.tenants.execution_tokens import INVALID as INVALID_TOKEN
from atomq.tenants.execution_tokens import ExecutionTokens, is_execution_token
from atomq.tenants.sqs_keys import SqsKeys, secret_access_key
from atomq.tenants.records import (
    Principal,
    Tenant,
    check_issued_tenant_id,
    check_limit,
    check_name,
    check_spark_weight,
    new_tenant_id,
    tenant_from_record,
    tenant_not_found,
)

log = logging.getLogger("atomq.tenants")

BATCH = 500
"""Keys per UNLINK, HDEL or pipeline: no call blocks Redis for long, however big a tenant is."""

OWNER = Principal(tenant_id=None, key_id=None)
NAME_CLAIM_TRIES = 5
"""Tries to claim a name whose holder changes between the read and the swap."""


def _batches(items: Iterable[Any]) -> Iterator[list[Any]]:
    rest = iter(items)
    while batch := list(islice(rest, BATCH)):
        yield batch


class TenantStore:
    """Creates, changes and removes tenants and their keys; tells who a key belongs to.

    Args:
        client: a redis-py client (standalone or cluster) with
            ``decode_responses=False``, as the queue server uses.
        owner_key: the runtime owner's key. Only its digest is kept.
    """

    def __init__(self, client: RedisClient, owner_key: str) -> None:
        if not isinstance(owner_key, str) or not owner_key:
            raise InvalidInput("owner_key must be a non-empty string", field="owner_key")
        self.client = client
        self.storage = Storage(client)
        self._owner_digest = api_keys.digest(owner_key)
        self._add_key = client.register_script(scripts.ADD_KEY)
        self._update = client.register_script(scripts.UPDATE)
        self._mark_deleting = client.register_script(scripts.MARK_DELETING)
        self._swap_name = client.register_script(scripts.SWAP_NAME)
        self.execution_tokens = ExecutionTokens(self.storage)
        self.sqs = SqsKeys(client, self.storage)
        self._move_legacy_keys()
        self._index_names()

    def _move_legacy_keys(self) -> None:
        """Moves the entries of the one key table of format 4 and before into their shards
        (``keys.api_key_table``); one step a key, so a crash part way loses none."""
        legacy = k.LEGACY_API_KEYS_KEY
        for key_id, stored in self.storage.call(self.client.hgetall, legacy).items():
            self.storage.call(self.client.hsetnx, k.api_key_table(key_id.decode()), key_id, stored)
            self.storage.call(self.client.hdel, legacy, key_id)

    def _index_names(self) -> None:
        """Builds the index of names (``keys.TENANT_NAMES_KEY``) from the tenants' records, once: for
        data written before names were unique. Tenants that already share a name keep it; the name
        then finds the oldest, and the others are logged, to be renamed."""
        if self.storage.call(self.client.exists, k.TENANT_NAMES_INDEXED_KEY):
            return
        for tenant in self.list():
            if not self.storage.call(self.client.hsetnx, k.TENANT_NAMES_KEY, tenant.name, tenant.id):
                holder = self.storage.call(self.client.hget, k.TENANT_NAMES_KEY, tenant.name)
                if holder is not None and holder.decode() != tenant.id:
                    log.warning("tenants %s and %s share the name %r, which now finds %s: rename %s "
                                "(PATCH /v1/tenants/%s)", holder.decode(), tenant.id, tenant.name,
                                holder.decode(), tenant.id, tenant.id)
        self.storage.call(self.client.set, k.TENANT_NAMES_INDEXED_KEY, 1)

    def _claim_name(self, name: str, tenant_id: str) -> None:
        """Makes ``name`` find ``tenant_id``, unless another live tenant has it (409 name_taken).
        A name held by a tenant that is gone, or whose removal began, is free. (A live holder that
        bears the name no more, after a rename cut short by a failed store, keeps it until renamed
        again: freeing it here would let two renames to one name both succeed.)"""
        for _ in range(NAME_CLAIM_TRIES):
            raw = self.storage.call(self.client.hget, k.TENANT_NAMES_KEY, name)
            holder = raw.decode() if raw is not None else ""
            if holder and holder != tenant_id and self.exists(holder):
                raise Conflict(f"tenant {holder} is named {name!r}: tenant names are unique", code="name_taken",
                               name=name, tenant=holder)
            if holder == tenant_id or self.storage.call(self._swap_name, keys=[k.TENANT_NAMES_KEY],
                                                         args=[name, holder, tenant_id]):
                return
        raise Conflict(f"the name {name!r} kept changing hands; try again", code="name_taken", name=name)

    def _release_name(self, name: str, tenant_id: str) -> None:
        """Frees ``name`` if it still finds ``tenant_id``."""
        self.storage.call(self._swap_name, keys=[k.TENANT_NAMES_KEY], args=[name, tenant_id, ""])

    def named(self, name: str) -> Tenant | None:
        """The tenant of this name (names are unique), or None."""
        raw = self.storage.call(self.client.hget, k.TENANT_NAMES_KEY, name)
        return None if raw is None else self._bearing(raw.decode(), name)

    def _bearing(self, tenant_id: str, name: str) -> Tenant | None:
        """Tenant ``tenant_id`` if it is live and named ``name``: the index may name one that was
        removed, or renamed, before it freed the name."""
        try:
            tenant = self.get(tenant_id)
        except NotFound:
            return None
        return tenant if tenant.name == name else None

    # -- tenants ----------------------------------------------------------------

    def create(self, name: str, rate_limit_per_minute: int = defaults.TENANT_RATE_LIMIT_PER_MINUTE,
               disk_quota_bytes: int = defaults.TENANT_DISK_QUOTA_BYTES,
               spark_weight: int = defaults.SPARK_WEIGHT) -> tuple[Tenant, str, str]:
        """Creates a tenant with its first key; returns (tenant, key id, API key).

        The API key is shown only here: it is stored as a digest.
        """
        check_name(name)
        check_limit(rate_limit_per_minute, "rate_limit_per_minute")
        check_limit(disk_quota_bytes, "disk_quota_bytes")
        check_spark_weight(spark_weight)
        tenant_id = new_tenant_id()
        while not self.storage.call(self.client.sadd, k.ISSUED_TENANT_IDS_KEY, tenant_id):
            tenant_id = new_tenant_id()  # issued before, maybe to a removed tenant: never reuse
        seconds, micros = self.storage.call(self.client.time)
        tenant = Tenant(id=tenant_id, name=name, rate_limit_per_minute=rate_limit_per_minute,
                        disk_quota_bytes=disk_quota_bytes, spark_weight=spark_weight,
                        created_at=seconds + micros / 1_000_000)
        self.storage.call(self.client.hset, k.tenant_record(tenant_id), mapping={
            "name": name,
            "rate_limit_per_minute": rate_limit_per_minute,
            "disk_quota_bytes": disk_quota_bytes,
            "spark_weight": spark_weight,
            "created_at": repr(tenant.created_at),
        })
        # The record first: while the name is claimed, another creation of it sees a live holder.
        try:
            self._claim_name(name, tenant_id)
        except Conflict:
            self.storage.call(self.client.unlink, k.tenant_record(tenant_id))
            raise
        self.sqs.account_id(tenant_id)
        key_id, api_key = self._issue_key(tenant_id)
        self.storage.call(self.client.sadd, k.TENANTS_KEY, tenant_id)
        return tenant, key_id, api_key

    def get(self, tenant_id: str) -> Tenant:
        """The tenant; NotFound if it does not exist or its removal began."""
        tenant_id = check_issued_tenant_id(tenant_id)
        tenant = tenant_from_record(tenant_id, self.storage.call(self.client.hgetall, k.tenant_record(tenant_id)))
        if tenant is None:
            raise tenant_not_found(tenant_id)
        return tenant

    def exists(self, tenant_id: str) -> bool:
        """Whether the tenant exists (and its removal has not begun)."""
        try:
            self.get(tenant_id)
        except NotFound:
            return False
        return True

    def list(self) -> list[Tenant]:
        """Every tenant, oldest first (ties by id)."""
        ids = sorted(t.decode() for t in self.storage.call(self.client.smembers, k.TENANTS_KEY))
        tenants: list[Tenant] = []
        for batch in _batches(ids):
            pipe = self.client.pipeline(transaction=False)
            for tenant_id in batch:
                pipe.hgetall(k.tenant_record(tenant_id))
            for tenant_id, fields in zip(batch, self.storage.call(pipe.execute)):
                # aq:tenants also names tenants that only have queues (the platform adds them).
                tenant = tenant_from_record(tenant_id, fields)
                if tenant is not None:
                    tenants.append(tenant)
        return sorted(tenants, key=lambda t: (t.created_at, t.id))

    def update(self, tenant_id: str, *, rate_limit_per_minute: int | None = None,
               disk_quota_bytes: int | None = None, spark_weight: int | None = None,
               name: str | None = None) -> Tenant:
        """Changes the given fields (None leaves one as it is); returns the tenant as changed."""
        tenant_id = check_issued_tenant_id(tenant_id)
        changes: list[Any] = []
        if name is not None:
            changes += ["name", check_name(name)]
        if rate_limit_per_minute is not None:
            changes += ["rate_limit_per_minute", check_limit(rate_limit_per_minute, "rate_limit_per_minute")]
        if disk_quota_bytes is not None:
            changes += ["disk_quota_bytes", check_limit(disk_quota_bytes, "disk_quota_bytes")]
        if spark_weight is not None:
            changes += ["spark_weight", check_spark_weight(spark_weight)]
        if name is not None:
            self.get(tenant_id)  # NotFound before the name is looked at
            self._claim_name(name, tenant_id)
        reply = self.storage.call(self._update, keys=[k.tenant_record(tenant_id)], args=changes)
        flat = reply[1:]
        tenant = tenant_from_record(tenant_id, dict(zip(flat[::2], flat[1::2])))
        if tenant is None:
            if name is not None:
                self._release_name(name, tenant_id)
            raise tenant_not_found(tenant_id)
        # The name the record had just before this change (another rename may have raced this one).
        before = reply[0].decode()
        if name is not None and before != name:
            self._release_name(before, tenant_id)
        return tenant

    def delete(self, tenant_id: str) -> None:
        """Removes a tenant, its keys and every key of its keyspace.

        The tenant disappears at once (a mark on its record), then its keys
        stop working, then its data goes in batches; the record goes last, so
        a removal that a crash interrupted is finished by calling this again.
        Raises NotFound once the tenant is gone (or never existed).
        """
        tenant_id = check_issued_tenant_id(tenant_id)
        record = k.tenant_record(tenant_id)
        if not self.storage.call(self._mark_deleting, keys=[record], args=[]):
            raise tenant_not_found(tenant_id)
        key_ids = self.storage.call(self.client.smembers, k.tenant_api_keys(tenant_id))
        for key_id in sorted(i.decode() for i in key_ids):
            # Only entries that name this tenant: an id of a key issued before format 6 may have
            # lost the race for its shared entry to another tenant's key.
            table = k.api_key_table(key_id)
            if api_keys.tenant_of(self.storage.call(self.client.hget, table, key_id)) == tenant_id:
                self.storage.call(self.client.hdel, table, key_id)
                self.storage.call(self.client.hdel, k.sqs_secret_table(key_id), key_id)
                self.sqs.forget(key_id)
        self._unlink_keyspace(tenant_id, keep=record)
        self.storage.call(self.client.srem, k.TENANTS_KEY, tenant_id)
        self.storage.call(self.client.srem, lk.LISTENER_TENANTS_KEY, tenant_id)
        name = self.storage.call(self.client.hget, record, "name")
        self.storage.call(self.client.unlink, record)
        if name is not None:
            self._release_name(name.decode(), tenant_id)

    def _unlink_keyspace(self, tenant_id: str, keep: str) -> None:
        """UNLINKs every ``aq:{T}:*`` key but ``keep``, in batches, on every node of a cluster.

        SCAN visits the whole server, which costs time but finds keys that no
        index names (a removal's leftovers, keys of later features).
        """
        pattern = k.TenantKeys(tenant_id).all_keys_pattern()

        def unlink_all() -> None:
            doomed = (key for key in self.client.scan_iter(match=pattern, count=BATCH) if key != keep.encode())
            for batch in _batches(doomed):
                self.client.unlink(*batch)

        self.storage.call(unlink_all)

    # -- keys -------------------------------------------------------------------

    def create_key(self, tenant_id: str) -> tuple[str, str]:
        """Issues another key for the tenant; returns (key id, API key), the key shown only here."""
        return self._issue_key(check_issued_tenant_id(tenant_id))

    def _issue_key(self, tenant_id: str) -> tuple[str, str]:
        """A new key, its id, entry and SQS secret added in one step with the check that the tenant is
        live: all four keys are in the tenant's slot (``keys.api_key_table``), so a removal that began
        before finds no new key, and one that begins after finds it in the tenant's set."""
        record, key_set = k.tenant_record(tenant_id), k.tenant_api_keys(tenant_id)
        while True:
            key_id = api_keys.new_key_id(tenant_id)
            api_key = api_keys.new_api_key(key_id)
            stored = api_keys.entry(tenant_id, api_keys.digest(api_key))
            added = self.storage.call(self._add_key, keys=[record, key_set, k.api_key_table(key_id),
                                                            k.sqs_secret_table(key_id)],
                                      args=[key_id, stored, secret_access_key(api_key)])
            if added == -1:
                raise tenant_not_found(tenant_id)
            if added == 1:
                return key_id, api_key
            # 0: the tenant already has this id (1 in 2**64): another

    def revoke_key(self, tenant_id: str, key_id: str) -> None:
        """Revokes one key: it stops working at once, on every node.

        NotFound if ``key_id`` is not a key of this tenant (another tenant's looks the same).
        """
        tenant_id = check_issued_tenant_id(tenant_id)
        if not isinstance(key_id, str) or not api_keys.KEY_ID.fullmatch(key_id):
            # Not repeated: it may be a whole key pasted where its id belongs.
            raise NotFound(f"that key of tenant {tenant_id!r} does not exist: a key id is 28 (or, issued "
                           "before, 16) lowercase hex characters", tenant=tenant_id)
        missing = NotFound(f"key {key_id!r} of tenant {tenant_id!r} does not exist",
                           tenant=tenant_id, key_id=key_id)
        table = k.api_key_table(key_id)
        owned = api_keys.tenant_of(self.storage.call(self.client.hget, table, key_id)) == tenant_id
        if owned:
            self.storage.call(self.client.hdel, table, key_id)  # first: the key and its SQS pair end here
            self.storage.call(self.client.hdel, k.sqs_secret_table(key_id), key_id)
            self.sqs.forget(key_id)
        # Also finishes a revocation (or a key's creation) that a crash cut short.
        if not self.storage.call(self.client.srem, k.tenant_api_keys(tenant_id), key_id) and not owned:
            raise missing

    def key_ids(self, tenant_id: str) -> builtins.list[str]:
        """The ids of the tenant's keys, sorted (never the keys: those are not stored)."""
        tenant_id = self.get(tenant_id).id
        return sorted(i.decode() for i in self.storage.call(self.client.smembers, k.tenant_api_keys(tenant_id)))

    def authenticate(self, api_key: str) -> Principal:
        """Who ``api_key`` acts as: the owner, or a tenant through one of its keys.

        One read of the key's entry per call (in its tenant's slot), nothing cached, so a
        revoked key fails at once. Raises Unauthorized for a missing,
        malformed, unknown or revoked key, with a message that never repeats it.
        """
        if isinstance(api_key, str) and api_keys.is_owner_key(api_key, self._owner_digest):
            return OWNER
        if is_execution_token(api_key):
            grant = self.execution_tokens.verify(api_key)
            if not self.exists(grant.tenant):
                raise Unauthorized(INVALID_TOKEN)
            return Principal(tenant_id=grant.tenant, key_id=None, execution=grant)
        key_id = api_keys.parse_key_id(api_key)
        stored = self.storage.call(self.client.hget, k.api_key_table(key_id), key_id)
        if stored is None:
            raise Unauthorized(api_keys.UNKNOWN_KEY)
        return Principal(tenant_id=api_keys.verify(api_key, stored.decode()), key_id=key_id)

    def claim(self, api_key: str) -> tuple[Principal, KeyCheck] | None:
        """Who ``api_key`` says it acts as, and the check of that claim, for a tenant's key of the
        current form: its key id names its tenant, and its entry is in that tenant's slot, so the
        script of the request's operation can carry the check (``atomq.platform.store.carried_check``;
        the same one read, nothing cached, so a revoked key fails at once). The claim names the
        key's own tenant only: a key id naming another tenant checks that tenant's entry, which the
        key's secret must match. None for any other string (the owner's key, an execution token, a
        key issued before format 6, a malformed one): :meth:`authenticate` tells who those are."""
        match = api_keys.API_KEY.fullmatch(api_key) if isinstance(api_key, str) else None
        if match is None:
            return None
        key_id = match.group(1)
        tenant_id = api_keys.tenant_of_key_id(key_id)
        key_digest = api_keys.digest(api_key)
        if tenant_id is None or hmac.compare_digest(key_digest, self._owner_digest):
            return None
        table = k.api_key_table(key_id)
        check = KeyCheck(table=table, key_id=key_id, entry=api_keys.entry(tenant_id, key_digest),
                         read_entry=lambda: self.storage.call(self.client.hget, table, key_id),
                         refusal=lambda: Unauthorized(api_keys.UNKNOWN_KEY))
        return Principal(tenant_id=tenant_id, key_id=key_id), check

    def reauthenticate(self, key_id: str | None, key_digest: str) -> Principal:
        """Who a key known only by its id and SHA-256 digest acts as now (``key_id``
        None for the owner's key); raises Unauthorized once it no longer works.

        For holders that must not keep the key itself, such as a dashboard
        session: the same one read as ``authenticate``, nothing cached, the
        digests compared in constant time, so a revoked key fails at once.
        """
        if key_id is None:
            if not hmac.compare_digest(key_digest, self._owner_digest):
                raise Unauthorized(api_keys.UNKNOWN_KEY)
            return OWNER
        if not api_keys.KEY_ID.fullmatch(key_id):
            raise Unauthorized(api_keys.UNKNOWN_KEY)
        stored = self.storage.call(self.client.hget, k.api_key_table(key_id), key_id)
        tenant_id, _, stored_digest = (stored or b"").decode().partition("|")
        if not hmac.compare_digest(key_digest, stored_digest) or not tenant_id:
            raise Unauthorized(api_keys.UNKNOWN_KEY)
        return Principal(tenant_id=tenant_id, key_id=key_id)
