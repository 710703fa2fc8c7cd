"""The OpenAPI document holds: schemathesis generates requests from it and
finds no 500 and no response that breaks its documented schema.

Only those checks run: whether a schema-valid request is accepted depends on
state the document cannot state (a publish/subscribe queue needs its
subscriber named, a point-to-point one refuses it), so a generated request
that breaks such a rule gets a 400 that is right.

Bounded in examples (hypothesis settings) so the run stays in seconds; it
runs in-process on the session's Valkey, as a tenant with a queue of its own.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from atomq.api import create_app
from atomq.api.services import LongPollLimiter, Services
from atomq.platform import QueueServer
from atomq.tenants import TenantStore
from support import FAST

OWNER_KEY = f"aq_owner_{secrets.token_urlsafe(32)}"
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance]


@pytest.fixture(scope="module")
def app_and_key(valkey) -> Iterator[tuple[Any, str]]:
    client = valkey.client()
    services = Services(queues=QueueServer(client, FAST), tenants=TenantStore(client, OWNER_KEY),
                        longpolls=LongPollLimiter(2))
    app = create_app(services)
    tenant, _, key = services.tenants.create("contract")
    services.queues.put_queue(tenant.id, "orders", "point_to_point")
    yield app, key
    services.tenants.delete(tenant.id)
    client.close()


def test_no_server_error_and_every_response_matches_its_schema(app_and_key) -> None:
    """Every operation of the document, a bounded number of generated requests each.

    The operations are walked here rather than through schemathesis's pytest
    plugin, which does not run on this pytest.
    """
    app, key = app_and_key
    api = schemathesis.openapi.from_wsgi("/openapi.json", app)
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 20

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            # A tenant's key: the owner's calls answer 403, which the document lists too.
            case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=CHECKS)

        check()
