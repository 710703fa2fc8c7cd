"""Every API key's SQS credential pair: issued with the key, asked for again with the key, stored
late for keys issued before, and ended with the key (on the app in this process, on real Valkey)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from atomq.api.key_checks import MAX_FAILURES
from atomq.api.sqs.signing import authenticate
from atomq.errors import RateLimited, SqsError
from atomq.platform.store import keys as k
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.tenants import TenantStore
from atomq.tenants.sqs_keys import access_key_id, key_id_of, secret_access_key
from support.in_process_app import OWNER_KEY, InProcessApp, error_of, strict_loads
from support.served_node import ServeFactory

SECRET = re.compile(r"[A-Za-z0-9]{40}")


@pytest.fixture(scope="module")
def app(valkey: EmbeddedValkey) -> Iterator[InProcessApp]:
    with InProcessApp(valkey.client()) as app:
        yield app


def credentials_of(app: InProcessApp, key: str) -> dict[str, str]:
    response = app.call("GET", "/v1/credentials/sqs", key=key)
    assert response.status_code == 200, response.data
    return strict_loads(response.data)  # type: ignore[no-any-return]


def test_the_pair_maps_back_to_its_key_and_looks_as_sqs_clients_expect() -> None:
    for key_id in ("0123456789ab" + "cdef0123456789ab", "fedcba9876543210"):
        ident = access_key_id(key_id)
        assert re.fullmatch(r"AQ[0-9A-F]+", ident) and len(ident) in (30, 18)
        assert key_id_of(ident) == key_id
    for wrong in ("AKIAIOSFODNN7EXAMPLE", "AQ" + "0" * 27, "aq" + "0" * 28, "AQ" + "g" * 28, ""):
        assert key_id_of(wrong) is None
    one, other = "aq_" + "1" * 28 + "_" + "a" * 43, "aq_" + "1" * 28 + "_" + "b" * 43
    assert SECRET.fullmatch(secret_access_key(one)) and secret_access_key(one) == secret_access_key(one)
    assert secret_access_key(one) != secret_access_key(other)


def test_every_issued_key_carries_its_pair_and_the_key_gets_it_again(app: InProcessApp) -> None:
    created = app.owner("POST", "/v1/tenants", {"name": "sqs-pairs"})
    assert created.status_code == 201
    tenant = strict_loads(created.data)
    try:
        sqs = tenant["sqs"]
        assert sqs["access_key_id"] == access_key_id(tenant["key_id"])
        assert SECRET.fullmatch(sqs["secret_access_key"]) and re.fullmatch(r"[1-9][0-9]{11}", sqs["account_id"])
        assert sqs["endpoint_url"] == "http://localhost"
        assert credentials_of(app, tenant["api_key"]) == sqs
        another = app.owner("POST", f"/v1/tenants/{tenant['id']}/keys")
        assert another.status_code == 201
        second = strict_loads(another.data)
        assert credentials_of(app, second["api_key"]) == second["sqs"]
        assert second["sqs"]["account_id"] == sqs["account_id"]  # one account per tenant
        assert second["sqs"]["access_key_id"] != sqs["access_key_id"]
        assert second["sqs"]["secret_access_key"] != sqs["secret_access_key"]
        assert credentials_of(app, app.key)["account_id"] != sqs["account_id"]  # another tenant's
        identity = app.services.tenants.sqs.identity(sqs["access_key_id"])
        assert identity is not None and identity.tenant_id == tenant["id"]
        assert identity.secret_access_key == sqs["secret_access_key"]
    finally:
        app.services.tenants.delete(tenant["id"])
    assert app.services.tenants.sqs.identity(sqs["access_key_id"]) is None


def test_only_an_api_key_has_a_pair(app: InProcessApp) -> None:
    assert error_of(app.owner("GET", "/v1/credentials/sqs"), 403)["code"] == "forbidden"
    error_of(app.call("GET", "/v1/credentials/sqs", key=None), 401)
    error_of(app.call("GET", "/v1/credentials/sqs", key="aq_" + "0" * 28 + "_" + "x" * 43), 401)


def test_revoking_a_key_ends_its_pair_at_once_on_every_node(app: InProcessApp) -> None:
    store = app.services.tenants
    other_node = TenantStore(app.client, OWNER_KEY)  # nothing cached: a second node reads the same
    key_id, api_key = store.create_key(app.tenant)
    ident = access_key_id(key_id)
    assert other_node.sqs.identity(ident) is not None
    store.revoke_key(app.tenant, key_id)
    assert other_node.sqs.identity(ident) is None and store.sqs.identity(ident) is None
    assert app.client.hget(k.sqs_secret_table(key_id), key_id) is None
    error_of(app.call("GET", "/v1/credentials/sqs", key=api_key), 401)


def test_a_key_and_a_tenant_from_before_get_their_pair_when_the_key_asks(app: InProcessApp) -> None:
    """Keys issued before SQS credentials existed have no stored secret (the node never saw the key
    again), and their tenants no account id: the key's first ask stores both, for good."""
    store = app.services.tenants
    tenant, key_id, api_key = store.create("sqs-before")
    try:
        app.client.hdel(k.sqs_secret_table(key_id), key_id)
        app.client.hdel(k.tenant_record(tenant.id), "sqs_account")
        assert store.sqs.identity(access_key_id(key_id)) is None
        pair = credentials_of(app, api_key)
        assert pair["secret_access_key"] == secret_access_key(api_key)
        identity = store.sqs.identity(pair["access_key_id"])
        assert identity is not None and identity.secret_access_key == pair["secret_access_key"]
        assert credentials_of(app, api_key) == pair  # stable
        assert app.client.hget(k.SQS_ACCOUNTS_KEY, pair["account_id"]) == tenant.id.encode()
        # A wrong key of that id stores nothing and gets no pair.
        app.client.hdel(k.sqs_secret_table(key_id), key_id)
        error_of(app.call("GET", "/v1/credentials/sqs", key=api_key[:-1] + ("A" if api_key[-1] != "A" else "B")), 401)
        assert store.sqs.identity(pair["access_key_id"]) is None
    finally:
        store.delete(tenant.id)


def test_the_openapi_document_names_the_pair(app: InProcessApp) -> None:
    spec = strict_loads(app.http.get("/openapi.json").data)
    assert "/v1/credentials/sqs" in spec["paths"]
    assert set(spec["components"]["schemas"]["SqsCredentials"]["required"]) == {
        "access_key_id", "secret_access_key", "account_id", "endpoint_url"}
    assert "sqs" in spec["components"]["schemas"]["KeyCreated"]["properties"]


def test_the_client_and_the_cli_give_the_pair_of_their_key(serve: ServeFactory) -> None:
    node = serve(http_workers=1)
    with node.tenant_client("sqs-cli") as client:
        pair = client.sqs_credentials()
        key = client.headers["Authorization"].removeprefix("Bearer ")
        assert pair["endpoint_url"] == node.url and SECRET.fullmatch(pair["secret_access_key"])
        done = subprocess.run([sys.executable, "-m", "atomq", "credentials", "sqs", "--url", node.url,
                               "--key", key], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert pair["access_key_id"] in done.stdout and pair["secret_access_key"] in done.stdout
        assert f'endpoint_url="{node.url}"' in done.stdout and "aws sqs list-queues" in done.stdout
        as_json = subprocess.run([sys.executable, "-m", "atomq", "credentials", "sqs", "--url", node.url,
                                  "--key", key, "--json"], capture_output=True, text=True, timeout=60)
        assert json.loads(as_json.stdout) == pair


def signed_environ(access: str, secret: str, body: bytes = b"{}") -> dict[str, Any]:
    """A request to this app signed by botocore with the pair, as test_request_context takes it."""
    request = AWSRequest(method="POST", url="http://localhost/", data=body,
                         headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"})
    SigV4Auth(Credentials(access, secret), "sqs", "eu-central-1").add_auth(request)
    return {"method": "POST", "path": "/", "data": body, "headers": dict(request.headers)}


def test_a_request_signed_with_the_pair_names_its_key_and_failures_are_throttled(app: InProcessApp) -> None:
    store = app.services.tenants
    throttle = app.app.extensions["atomq_key_checks"]
    key_id, api_key = store.create_key(app.tenant)
    pair = store.sqs.issued(app.tenant, key_id, api_key)
    with app.app.test_request_context(**signed_environ(pair.access_key_id, pair.secret_access_key)) as ctx:
        identity = authenticate(ctx.request, store.sqs, throttle)
        assert (identity.tenant_id, identity.key_id) == (app.tenant, key_id)
    wrong = signed_environ(pair.access_key_id, "x" * 40)
    for _ in range(MAX_FAILURES):
        with app.app.test_request_context(**wrong, environ_base={"REMOTE_ADDR": "10.8.0.1"}) as ctx:
            with pytest.raises(SqsError) as raised:
                authenticate(ctx.request, store.sqs, throttle)
            assert raised.value.shape == "SignatureDoesNotMatch"
    right = signed_environ(pair.access_key_id, pair.secret_access_key)
    with app.app.test_request_context(**right, environ_base={"REMOTE_ADDR": "10.8.0.1"}) as ctx:
        with pytest.raises(RateLimited):  # the key guessed at, from that address: refused before it is checked
            authenticate(ctx.request, store.sqs, throttle)
    # The same count as the key presented as a bearer key from there.
    error_of(app.call("GET", "/v1/queues", key=api_key, address="10.8.0.1"), 429)
    with app.app.test_request_context(**right, environ_base={"REMOTE_ADDR": "10.8.0.2"}) as ctx:
        assert authenticate(ctx.request, store.sqs, throttle).key_id == key_id
    store.revoke_key(app.tenant, key_id)
    with app.app.test_request_context(**right, environ_base={"REMOTE_ADDR": "10.8.0.2"}) as ctx:
        with pytest.raises(SqsError) as raised:
            authenticate(ctx.request, store.sqs, throttle)
        assert raised.value.shape == "InvalidClientTokenId"
