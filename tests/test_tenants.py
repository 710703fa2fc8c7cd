"""Tenant accounts and API keys: what an operator and a tenant's client rely on.

Semantic tests take ``backend`` (the real Valkey and fakeredis); the ones
about several nodes, the whole server's content and a tenant's removal with
real queue data use the real Valkey. Each test creates its own tenants.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from redis.crc import key_slot

from atomq.errors import Conflict, InvalidInput, NotFound, Unauthorized
from atomq.platform import QueueServer
from atomq.platform.store import keys as k
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.tenants import Principal, Tenant, TenantStore
from atomq.tenants import store as store_module
from atomq.tenants.api_keys import digest, entry, new_api_key, parse_key_id
from support.queues import FAST, msg

OWNER_KEY = "owner-" + secrets.token_urlsafe(24)


@pytest.fixture
def store(backend: redis.Redis) -> TenantStore:
    return TenantStore(backend, OWNER_KEY)


@pytest.fixture
def client(valkey: EmbeddedValkey) -> Iterator[redis.Redis]:
    c = valkey.client()
    yield c
    c.close()


def secret_of(api_key: str) -> str:
    return api_key.split("_", 2)[2]


def every_stored_byte_string(client: redis.Redis) -> Iterator[bytes]:
    """Every key name and every value (members, fields, scores, entries) on the server. A key that
    expired between the scan and its read (a request's record, a de-duplication marker) holds nothing."""
    for key in client.scan_iter(count=1000):
        yield key
        kind = client.type(key)
        if kind == b"none":
            continue
        if kind == b"string":
            yield client.get(key)
        elif kind == b"hash":
            for field, value in client.hgetall(key).items():
                yield field
                yield value
        elif kind == b"set":
            yield from client.smembers(key)
        elif kind == b"zset":
            for member, _ in client.zrange(key, 0, -1, withscores=True):
                yield member
        elif kind == b"list":
            yield from client.lrange(key, 0, -1)
        elif kind == b"stream":
            for _, fields in client.xrange(key):
                for field, value in fields.items():
                    yield field
                    yield value
        else:
            raise AssertionError(f"unexpected type {kind!r} of {key!r}")


# -- pure logic --------------------------------------------------------------------


def test_a_tenants_account_keys_share_its_slot_and_prefix() -> None:
    tenant = "t_0123456789ab"
    slot = key_slot(k.TenantKeys(tenant).seq.encode())
    for key in (k.tenant_record(tenant), k.tenant_api_keys(tenant)):
        assert key_slot(key.encode()) == slot
        assert key.startswith(f"aq:{{{tenant}}}:")
    assert not k.api_key_table("0123456789abcdef").startswith(k.tenant_prefix(tenant)), "a key issued before"


def test_a_key_is_checked_in_its_tenants_own_slot(store: TenantStore) -> None:
    """The key id names its tenant, so its entry is read from the tenant's slot (its primary, on a
    cluster): a request touches no primary but its tenant's."""
    tenant, key_id, api_key = store.create("acme")
    assert len(key_id) == 28 and key_id.startswith(tenant.id.removeprefix("t_"))
    assert parse_key_id(api_key) == key_id
    table = k.api_key_table(key_id)
    assert table.startswith(k.tenant_prefix(tenant.id)) and key_slot(table.encode()) == key_slot(tenant.id.encode())


def test_keys_split_on_the_first_two_underscores_only() -> None:
    for _ in range(200):
        key_id = secrets.token_hex(8)
        api_key = new_api_key(key_id)
        assert parse_key_id(api_key) == key_id
    tricky = "aq_" + "0" * 16 + "_" + "_-_" + "a" * 40
    assert parse_key_id(tricky) == "0" * 16


@pytest.mark.parametrize("bad", [
    "aq_", "aq__x", "aq_0123456789abcdef", "aq_0123456789ABCDEF_" + "a" * 43,
    "aq_0123456789abcde_" + "a" * 43, "aq_0123456789abcdef_" + "a" * 42,
    "aq_0123456789abcdef_" + "a" * 44, "xx_0123456789abcdef_" + "a" * 43,
    "Bearer aq_0123456789abcdef_" + "a" * 43, "aq_0123456789abcdef_" + "a" * 42 + "!",
])
def test_malformed_keys_are_unauthorized(bad: str) -> None:
    with pytest.raises(Unauthorized, match="malformed") as err:
        parse_key_id(bad)
    with pytest.raises(Unauthorized) as reference:
        parse_key_id("nothing like a key")
    assert str(err.value) == str(reference.value) and err.value.details == {}  # nothing of the key
    assert err.value.http_status == 401 and err.value.code == "unauthorized"


@pytest.mark.parametrize("missing", [None, "", 42, b"aq_"])
def test_a_missing_key_is_unauthorized(missing: object) -> None:
    with pytest.raises(Unauthorized, match="required"):
        parse_key_id(missing)


def test_the_owner_key_must_not_be_empty(backend: redis.Redis) -> None:
    with pytest.raises(InvalidInput) as err:
        TenantStore(backend, "")
    assert err.value.details == {"field": "owner_key"}


# -- accounts ----------------------------------------------------------------------


def test_create_get_list_update(store: TenantStore, backend: redis.Redis) -> None:
    tenant, key_id, api_key = store.create("acme", rate_limit_per_minute=60, disk_quota_bytes=10**9)
    assert tenant.name == "acme" and tenant.rate_limit_per_minute == 60 and tenant.disk_quota_bytes == 10**9
    assert tenant.id.startswith("t_") and len(tenant.id) == 14
    seconds, _ = backend.time()
    assert abs(tenant.created_at - seconds) < 5
    assert store.get(tenant.id) == tenant
    assert store.exists(tenant.id)
    assert store.key_ids(tenant.id) == [key_id]
    assert backend.sismember(k.TENANTS_KEY, tenant.id)

    other, _, _ = store.create("globex")
    assert other.rate_limit_per_minute == 0 and other.disk_quota_bytes == 0
    listed = [t for t in store.list() if t.id in (tenant.id, other.id)]
    assert listed == [tenant, other]
    ordered = store.list()
    assert ordered == sorted(ordered, key=lambda t: (t.created_at, t.id))

    changed = store.update(tenant.id, rate_limit_per_minute=0)
    assert changed == Tenant(id=tenant.id, name="acme", rate_limit_per_minute=0,
                             disk_quota_bytes=10**9, created_at=tenant.created_at)
    changed = store.update(tenant.id, name="acme corp", disk_quota_bytes=5)
    assert (changed.name, changed.rate_limit_per_minute, changed.disk_quota_bytes) == ("acme corp", 0, 5)
    assert store.get(tenant.id) == changed
    assert store.update(tenant.id) == changed
    assert store.get(other.id) == other


def test_spark_weight_defaults_to_1_and_can_be_set_and_changed(store: TenantStore) -> None:
    plain, _, _ = store.create("plain")
    assert plain.spark_weight == 1 and store.get(plain.id).spark_weight == 1
    tenant, _, _ = store.create("weighty", spark_weight=3)
    assert tenant.spark_weight == 3 and store.get(tenant.id) == tenant
    changed = store.update(tenant.id, spark_weight=5)
    assert changed == Tenant(id=tenant.id, name="weighty", spark_weight=5, created_at=tenant.created_at)
    assert store.get(tenant.id) == changed
    assert store.update(tenant.id, rate_limit_per_minute=9).spark_weight == 5, "other changes keep the weight"


def test_a_record_stored_before_spark_weights_reads_as_weight_1(store: TenantStore, backend: redis.Redis) -> None:
    tenant, _, _ = store.create("older", spark_weight=7)
    backend.hdel(k.tenant_record(tenant.id), "spark_weight")
    assert store.get(tenant.id).spark_weight == 1
    assert [t.spark_weight for t in store.list() if t.id == tenant.id] == [1]
    assert store.update(tenant.id, name="older still").spark_weight == 1
    assert store.update(tenant.id, spark_weight=2).spark_weight == 2


def test_list_skips_tenants_that_only_have_queues(store: TenantStore, backend: redis.Redis) -> None:
    qs = QueueServer(backend, FAST)
    bare = "t_" + secrets.token_hex(6)
    qs.put_queue(bare, "orders", "point_to_point")
    assert bare not in {t.id for t in store.list()}
    assert not store.exists(bare)


def test_unknown_and_malformed_tenant_ids_are_not_found(store: TenantStore) -> None:
    tenant, key_id, _ = store.create("acme")
    for bad in ["t_" + secrets.token_hex(6), "t_0123456789AB", "{t_0123456789ab}", "t_*", "", None,
                tenant.id + ":x", "t_0123456789a"]:
        with pytest.raises(NotFound, match="does not exist"):
            store.get(bad)  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            store.update(bad, name="x")  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            store.delete(bad)  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            store.create_key(bad)  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            store.key_ids(bad)  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            store.revoke_key(bad, key_id)  # type: ignore[arg-type]
        assert not store.exists(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs, field", [
    ({"name": ""}, "name"),
    ({"name": "x" * 129}, "name"),
    ({"name": "a\nb"}, "name"),
    ({"name": None}, "name"),
    ({"name": 5}, "name"),
    ({"name": "t_0123456789ab"}, "name"),
    ({"name": "ok", "rate_limit_per_minute": -1}, "rate_limit_per_minute"),
    ({"name": "ok", "rate_limit_per_minute": True}, "rate_limit_per_minute"),
    ({"name": "ok", "rate_limit_per_minute": 1.5}, "rate_limit_per_minute"),
    ({"name": "ok", "rate_limit_per_minute": "10"}, "rate_limit_per_minute"),
    ({"name": "ok", "disk_quota_bytes": -5}, "disk_quota_bytes"),
    ({"name": "ok", "disk_quota_bytes": False}, "disk_quota_bytes"),
    ({"name": "ok", "disk_quota_bytes": 2**63}, "disk_quota_bytes"),
    ({"name": "ok", "spark_weight": 0}, "spark_weight"),
    ({"name": "ok", "spark_weight": 1001}, "spark_weight"),
    ({"name": "ok", "spark_weight": -1}, "spark_weight"),
    ({"name": "ok", "spark_weight": True}, "spark_weight"),
    ({"name": "ok", "spark_weight": 2.5}, "spark_weight"),
])
def test_invalid_input_names_the_field_and_changes_nothing(kwargs: dict[str, object], field: str) -> None:
    client = fakeredis.FakeRedis()
    store = TenantStore(client, OWNER_KEY)
    before = set(client.keys())
    with pytest.raises(InvalidInput, match=field if field != "name" else "name") as err:
        store.create(**kwargs)  # type: ignore[arg-type]
    assert err.value.details == {"field": field}
    assert set(client.keys()) == before, "nothing stored"
    tenant, _, _ = store.create("acme", rate_limit_per_minute=7)
    # For update, None means "leave as it is": only the other bad values apply.
    changes = {key: value for key, value in kwargs.items() if value not in ("ok", None)}
    if not changes:
        return
    with pytest.raises(InvalidInput) as err:
        store.update(tenant.id, **changes)  # type: ignore[arg-type]
    assert err.value.details == {"field": field}
    assert store.get(tenant.id) == tenant


def test_the_largest_limits_and_a_long_name_are_accepted(store: TenantStore) -> None:
    tenant, _, _ = store.create("ü" * 128, rate_limit_per_minute=2**63 - 1, disk_quota_bytes=2**63 - 1,
                                spark_weight=1000)
    assert store.get(tenant.id) == tenant


def test_tenant_ids_are_never_reused(store: TenantStore, monkeypatch: pytest.MonkeyPatch) -> None:
    gone, _, _ = store.create("short-lived")
    store.delete(gone.id)
    fresh = "t_" + secrets.token_hex(6)
    proposals = iter([gone.id, gone.id, fresh])
    monkeypatch.setattr(store_module, "new_tenant_id", lambda: next(proposals))
    tenant, _, _ = store.create("next")
    assert tenant.id == fresh


# -- keys --------------------------------------------------------------------------


def test_keys_authenticate_their_tenant_and_revoking_one_stops_only_it(store: TenantStore) -> None:
    tenant, first_id, first = store.create("acme")
    assert store.authenticate(first) == Principal(tenant_id=tenant.id, key_id=first_id)
    second_id, second = store.create_key(tenant.id)
    assert second_id != first_id and second != first
    principal = store.authenticate(second)
    assert principal == Principal(tenant.id, second_id) and not principal.is_owner
    assert store.key_ids(tenant.id) == sorted([first_id, second_id])

    store.revoke_key(tenant.id, first_id)
    with pytest.raises(Unauthorized, match="unknown or was revoked"):
        store.authenticate(first)
    assert store.authenticate(second).key_id == second_id
    assert store.key_ids(tenant.id) == [second_id]
    with pytest.raises(NotFound):
        store.revoke_key(tenant.id, first_id)


def test_a_key_of_another_tenant_cannot_be_revoked_through_this_one(store: TenantStore) -> None:
    acme, _, _ = store.create("acme")
    globex, globex_key_id, globex_key = store.create("globex")
    for key_id in (globex_key_id, secrets.token_hex(8), acme.id[2:] + secrets.token_hex(8), "../x", "", "A" * 16):
        with pytest.raises(NotFound, match="does not exist"):
            store.revoke_key(acme.id, key_id)
    assert store.authenticate(globex_key).tenant_id == globex.id


def test_unknown_ids_and_wrong_secrets_are_unauthorized(store: TenantStore) -> None:
    _, key_id, api_key = store.create("acme")
    unknown = new_api_key(secrets.token_hex(8))
    unknown_of_the_tenant = new_api_key(key_id[:12] + secrets.token_hex(8))
    of_no_tenant = new_api_key(secrets.token_hex(14))
    wrong_secret = new_api_key(key_id)
    for bad in (unknown, unknown_of_the_tenant, of_no_tenant, wrong_secret,
                api_key[:-1] + ("A" if api_key[-1] != "A" else "B")):
        with pytest.raises(Unauthorized, match="unknown or was revoked") as err:
            store.authenticate(bad)
        assert bad not in str(err.value) and secret_of(bad) not in repr(err.value.details)
    for bad in ("", "aq_" + key_id, api_key + "x", " " + api_key):
        with pytest.raises(Unauthorized):
            store.authenticate(bad)


def test_the_owner_key_gives_the_owner_and_a_wrong_one_nothing(store: TenantStore) -> None:
    principal = store.authenticate(OWNER_KEY)
    assert principal == Principal(None, None) and principal.is_owner
    for wrong in (OWNER_KEY + "x", OWNER_KEY[:-1], OWNER_KEY.upper()):
        with pytest.raises(Unauthorized) as err:
            store.authenticate(wrong)
        assert OWNER_KEY not in str(err.value)
    assert OWNER_KEY not in repr(vars(store))


def test_reprs_hold_no_key_material(store: TenantStore) -> None:
    tenant, key_id, api_key = store.create("acme")
    principal = store.authenticate(api_key)
    for text in (repr(tenant), str(tenant), repr(principal), repr(store.list()), repr(vars(store))):
        assert api_key not in text and secret_of(api_key) not in text


def test_a_key_pasted_where_an_id_belongs_is_not_echoed(store: TenantStore) -> None:
    tenant, _, api_key = store.create("acme")
    for call in (lambda: store.get(api_key), lambda: store.revoke_key(tenant.id, api_key),
                 lambda: store.revoke_key(api_key, "0" * 16)):
        with pytest.raises(NotFound) as err:
            call()
        assert secret_of(api_key) not in str(err.value) + repr(err.value.details)
    assert store.authenticate(api_key).tenant_id == tenant.id


def test_a_key_is_not_issued_to_a_tenant_whose_removal_began(store: TenantStore, backend: redis.Redis) -> None:
    tenant, _, _ = store.create("acme")
    backend.hset(k.tenant_record(tenant.id), "deleting", "1")  # as if a removal had just begun
    tables = [k.api_key_table(f"{i:02x}") for i in range(256)] + [k.api_key_table(tenant.id[2:] + "0" * 16)]
    entries = sum(backend.hlen(t) for t in tables)
    with pytest.raises(NotFound):
        store.create_key(tenant.id)
    assert sum(backend.hlen(t) for t in tables) == entries
    assert not store.exists(tenant.id)


def test_revocation_is_seen_at_once_by_another_node(valkey: EmbeddedValkey) -> None:
    node_a, node_b = valkey.client(), valkey.client()
    try:
        a, b = TenantStore(node_a, OWNER_KEY), TenantStore(node_b, OWNER_KEY)
        tenant, key_id, api_key = a.create("acme")
        other_id, other_key = a.create_key(tenant.id)
        assert b.authenticate(api_key).tenant_id == tenant.id
        a.revoke_key(tenant.id, key_id)
        with pytest.raises(Unauthorized):
            b.authenticate(api_key)
        assert b.authenticate(other_key).key_id == other_id
    finally:
        node_a.close()
        node_b.close()


def test_keys_are_stored_only_as_digests(client: redis.Redis) -> None:
    store = TenantStore(client, OWNER_KEY)
    tenant, _, first = store.create("acme")
    _, second = store.create_key(tenant.id)
    QueueServer(client, FAST).put_queue(tenant.id, "orders", "point_to_point")
    secrets_ = [secret_of(first).encode(), secret_of(second).encode(), OWNER_KEY.encode()]
    for stored in every_stored_byte_string(client):
        for secret in secrets_:
            assert secret not in stored
    assert store.authenticate(first).tenant_id == tenant.id


# -- removal -----------------------------------------------------------------------


def test_delete_removes_the_tenant_its_keys_and_every_key_of_its_keyspace(client: redis.Redis) -> None:
    store, qs = TenantStore(client, OWNER_KEY), QueueServer(client, FAST)
    doomed, _, doomed_key = store.create("doomed")
    _, doomed_key2 = store.create_key(doomed.id)
    kept, _, kept_key = store.create("kept")
    for tenant in (doomed, kept):
        qs.put_queue(tenant.id, "orders", "point_to_point")
        qs.send(tenant.id, "orders", [msg("a", dedupe_id="d1"), msg("b", "c", color="red")])
        qs.put_queue(tenant.id, "news", "publish_subscribe")
        qs.put_subscriber(tenant.id, "news", "reader")
        qs.send(tenant.id, "news", [msg("x"), msg("y")])
        delivered = qs.get(tenant.id, "orders", max_messages=1)
        qs.nack(tenant.id, "orders", ids=[delivered[0].id])
        qs.get(tenant.id, "news", subscriber="reader", max_messages=1)
    client.set(f"aq:{{{doomed.id}}}:stray", "not made by atomq")
    kept_before = {key: client.dump(key) for key in client.keys(f"aq:{{{kept.id}}}:*")}
    assert client.keys(f"aq:{{{doomed.id}}}:*")

    store.delete(doomed.id)

    assert client.keys(f"aq:{{{doomed.id}}}:*") == []
    for api_key in (doomed_key, doomed_key2):
        with pytest.raises(Unauthorized):
            store.authenticate(api_key)
    assert not client.sismember(k.TENANTS_KEY, doomed.id)
    assert doomed.id not in {t.id for t in store.list()}
    with pytest.raises(NotFound):
        store.get(doomed.id)
    with pytest.raises(NotFound, match="does not exist"):
        store.delete(doomed.id)

    assert {key: client.dump(key) for key in client.keys(f"aq:{{{kept.id}}}:*")} == kept_before
    assert store.authenticate(kept_key).tenant_id == kept.id
    assert qs.get_queue(kept.id, "orders").depth == 2


def test_delete_removes_many_keys_in_batches(backend: redis.Redis) -> None:
    store = TenantStore(backend, OWNER_KEY)
    tenant, _, _ = store.create("big")
    pipe = backend.pipeline(transaction=False)
    for i in range(3 * store_module.BATCH + 7):
        pipe.set(f"aq:{{{tenant.id}}}:junk:{i}", i)
    pipe.execute()
    store.delete(tenant.id)
    assert backend.keys(f"aq:{{{tenant.id}}}:*") == []


def test_an_interrupted_delete_finishes_when_called_again(backend: redis.Redis) -> None:
    store, qs = TenantStore(backend, OWNER_KEY), QueueServer(backend, FAST)
    tenant, _, api_key = store.create("acme")
    qs.put_queue(tenant.id, "orders", "point_to_point")
    qs.send(tenant.id, "orders", [msg("a")])
    backend.hset(k.tenant_record(tenant.id), "deleting", "1")  # the first step, then a crash
    assert not store.exists(tenant.id)
    assert tenant.id not in {t.id for t in store.list()}
    with pytest.raises(NotFound):
        store.update(tenant.id, name="back")
    store.delete(tenant.id)
    assert backend.keys(f"aq:{{{tenant.id}}}:*") == []
    with pytest.raises(Unauthorized):
        store.authenticate(api_key)


def legacy_key(backend: redis.Redis, tenant_id: str, table: str | None = None) -> tuple[str, str]:
    """A key as atomq issued it before format 6: an id of 16 random hex, its entry in a shared table
    (``table``, or its shard), its id in the tenant's set. Returns (key id, API key)."""
    key_id = secrets.token_hex(8)
    api_key = new_api_key(key_id)
    backend.hset(table or k.api_key_table(key_id), key_id, entry(tenant_id, digest(api_key)))
    backend.sadd(k.tenant_api_keys(tenant_id), key_id)
    return key_id, api_key


def test_keys_issued_before_format_6_keep_working_until_revoked(store: TenantStore, backend: redis.Redis) -> None:
    tenant, new_id, new_key = store.create("old-and-new")
    old_id, old_key = legacy_key(backend, tenant.id)
    assert not k.api_key_table(old_id).startswith(k.tenant_prefix(tenant.id)), "in its shared shard"
    assert store.authenticate(old_key) == Principal(tenant.id, old_id)
    assert store.reauthenticate(old_id, digest(old_key)) == Principal(tenant.id, old_id)
    assert store.key_ids(tenant.id) == sorted([new_id, old_id])
    store.revoke_key(tenant.id, old_id)
    with pytest.raises(Unauthorized):
        store.authenticate(old_key)
    assert store.authenticate(new_key).key_id == new_id
    _, older_key = legacy_key(backend, tenant.id)
    store.delete(tenant.id)
    for gone in (new_key, older_key):
        with pytest.raises(Unauthorized):
            store.authenticate(gone)


def test_the_key_table_of_format_4_moves_into_its_shards_and_its_keys_keep_working(backend: redis.Redis) -> None:
    store = TenantStore(backend, "o" * 40)
    tenant, _, _ = store.create("old-keys")
    key_id, api_key = legacy_key(backend, tenant.id, table=k.LEGACY_API_KEYS_KEY)  # where format 4 kept it
    with pytest.raises(Unauthorized):
        store.authenticate(api_key)
    restarted = TenantStore(backend, "o" * 40)
    assert restarted.authenticate(api_key).tenant_id == tenant.id
    assert backend.hexists(k.api_key_table(key_id), key_id)
    assert backend.exists(k.LEGACY_API_KEYS_KEY) == 0
    restarted.delete(tenant.id)


def test_key_entries_spread_over_the_clusters_masters(valkey_cluster) -> None:
    """The shared tables of the keys issued before format 6 live on every master: one shard's failover
    stops only the old keys it holds."""
    slots = {key_slot(k.api_key_table(f"{i:02x}").encode()) for i in range(256)}
    masters = valkey_cluster.masters()
    holding = {port for port, first, last in masters for slot in slots if first <= slot <= last}
    assert holding == {port for port, _, _ in masters}


# -- names --------------------------------------------------------------------------------------


def test_tenant_names_are_unique_and_free_again_once_renamed_or_removed(store: TenantStore) -> None:
    acme, _, _ = store.create("names-acme")
    with pytest.raises(Conflict) as taken:
        store.create("names-acme")
    assert taken.value.code == "name_taken" and taken.value.http_status == 409
    assert taken.value.details == {"name": "names-acme", "tenant": acme.id}
    globex, _, _ = store.create("names-globex")
    with pytest.raises(Conflict, match="unique"):
        store.update(globex.id, name="names-acme")
    assert store.get(globex.id).name == "names-globex", "a refused rename changes nothing"
    assert store.update(acme.id, name="names-acme", disk_quota_bytes=5).name == "names-acme", "its own name"
    assert store.named("names-acme") == store.get(acme.id)
    store.update(acme.id, name="names-acme-2")
    assert store.create("names-acme")[0].name == "names-acme", "free once renamed"
    store.delete(globex.id)
    assert store.create("names-globex")[0].name == "names-globex", "free once removed"
    assert store.named("names-nobody") is None and store.named(acme.id) is None, "a name, not an id"


def test_names_shared_before_they_were_unique_find_the_oldest_and_are_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    client = fakeredis.FakeRedis()
    store = TenantStore(client, OWNER_KEY)
    first, _, _ = store.create("twin")
    second, _, _ = store.create("other")
    client.hset(k.tenant_record(second.id), "name", "twin")  # as an older atomq let it be
    client.delete(k.TENANT_NAMES_KEY, k.TENANT_NAMES_INDEXED_KEY)
    with caplog.at_level("WARNING", logger="atomq.tenants"):
        restarted = TenantStore(client, OWNER_KEY)
    assert restarted.named("twin") == restarted.get(first.id)
    assert [r.getMessage() for r in caplog.records if "share the name" in r.getMessage()] == [
        f"tenants {first.id} and {second.id} share the name 'twin', which now finds {first.id}: rename "
        f"{second.id} (PATCH /v1/tenants/{second.id})"]
    assert restarted.update(second.id, name="twin-2").name == "twin-2"
    assert restarted.named("twin") == restarted.get(first.id), "renaming the other leaves the name to its holder"


def test_two_renames_at_once_leave_one_name_held(store: TenantStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename frees the name the record had just before it, not the one read before the claim: two
    renames of one tenant racing each other leave only the last name held."""
    tenant, _, _ = store.create("race-a")
    claim = store._claim_name

    def claim_then_rename_elsewhere(name: str, tenant_id: str) -> None:
        claim(name, tenant_id)
        if name == "race-x":  # the other rename runs between this one's claim and its update
            monkeypatch.setattr(store, "_claim_name", claim)
            store.update(tenant_id, name="race-y")

    monkeypatch.setattr(store, "_claim_name", claim_then_rename_elsewhere)
    assert store.update(tenant.id, name="race-x").name == "race-x"
    assert store.named("race-x") == store.get(tenant.id)
    assert store.named("race-y") is None and store.named("race-a") is None
    other, _, _ = store.create("race-y")
    assert other.name == "race-y", "the name the first rename replaced is free again"
    store.create("race-a")
