"""Pure logic: the keyspace, name validation and the redelivery schedule (no server)."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from atomq.errors import InvalidInput
from atomq.platform.queues.names import check_queue_name, check_tenant_id
from atomq.platform.queues.queue_settings import QueueSettings, redelivery_delay
from atomq.platform.store import keys as k


def every_key_of(tenant: str) -> list[str]:
    tk = k.TenantKeys(tenant)
    qk = tk.queue("orders.v2")
    keys = [tk.seq, tk.queues, tk.deleting, tk.doc, tk.doc_props, tk.doc_refs, qk.config, qk.subscribers,
            qk.dedupe("anything {with} :odd: chars")]
    keys += qk.destination().as_list() + qk.destination("billing").as_list()
    return keys


def test_every_key_of_a_tenant_maps_to_one_cluster_slot() -> None:
    for tenant in ("t_42", "acme", "a-b_c"):
        slots = {key_slot(key.encode()) for key in every_key_of(tenant)}
        assert len(slots) == 1, tenant
        assert all(key.startswith(f"aq:{{{tenant}}}:") for key in every_key_of(tenant))


def test_two_tenants_never_share_a_key() -> None:
    assert not set(every_key_of("t_1")) & set(every_key_of("t_2"))


def test_destinations_of_one_queue_are_distinct() -> None:
    qk = k.TenantKeys("t").queue("q")
    lists = [qk.destination().as_list(), qk.destination("a").as_list(), qk.destination("b").as_list()]
    flat = [key for keys in lists for key in keys]
    assert len(flat) == len(set(flat)) == 3 * k.DEST_KEY_COUNT


@pytest.mark.parametrize("name", ["orders", "A", "a.b-c_d", "9lives", "x" * 128])
def test_valid_queue_names(name: str) -> None:
    assert check_queue_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "{t_other}", "a:b", "*", "..", ".hidden", "-x", "naïve", "a b", "x" * 129, "x" * 4096, "a/b"]
)
def test_names_that_could_escape_the_keyspace_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="must start with a letter or digit") as err:
        check_queue_name(name)
    assert err.value.details == {"field": "name"}


@pytest.mark.parametrize("tenant", ["", "{x}", "a:b", "t*", "t" * 65])
def test_bad_tenant_ids_are_refused(tenant: str) -> None:
    with pytest.raises(InvalidInput):
        check_tenant_id(tenant)


def test_redelivery_delay_follows_the_schedule_and_repeats_the_last() -> None:
    delays = (1, 2, 3, 5, 8, 24)
    assert [redelivery_delay(delays, n) for n in range(1, 10)] == [1, 2, 3, 5, 8, 24, 24, 24, 24]


def test_settings_refuse_an_empty_or_negative_schedule() -> None:
    with pytest.raises(InvalidInput, match="redelivery_delays_s"):
        QueueSettings(redelivery_delays_s=())
    with pytest.raises(InvalidInput, match="redelivery_delays_s"):
        QueueSettings(redelivery_delays_s=(1, -1))
    assert QueueSettings(redelivery_delays_s=(0.05, 1)).delays_ms_arg == "50,1000"
