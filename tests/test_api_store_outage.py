"""A failing store: every call answers 503 with ``Retry-After``, whatever the store raises.

The app in this process, on a Valkey of each test's own that it stops, or
with the store's calls made to raise what a Redis Cluster client raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError

from atomq.errors import StorageError
from atomq.platform.store.embedded import EmbeddedValkey
from support.in_process_app import InProcessApp, error_of, send_body
from support.ports import free_port


@pytest.fixture
def private_store(tmp_path: Path) -> Iterator[tuple[EmbeddedValkey, InProcessApp]]:
    """A Valkey of this test's own, which it may stop, and the app on it."""
    server = EmbeddedValkey(tmp_path / "valkey", port=free_port())
    server.start()
    client = server.client()
    app = InProcessApp(client)
    yield server, app
    client.close()
    if server.pid is not None:
        server.stop()


def assert_unavailable(response: Any) -> None:
    error = error_of(response, 503)
    assert error["code"] == "storage_unavailable", error
    assert int(response.headers["Retry-After"]) >= 1


def test_a_stopped_store_answers_503_with_retry_after(private_store: tuple[EmbeddedValkey, InProcessApp]) -> None:
    server, app = private_store
    assert app.call("POST", "/v1/queues/orders/messages", send_body()).status_code == 201
    server.stop()
    assert_unavailable(app.call("GET", "/v1/queues"))
    assert_unavailable(app.call("POST", "/v1/queues/orders/messages", send_body()))
    assert_unavailable(app.call("POST", "/v1/queues/orders/get", {"max": 1}))
    assert_unavailable(app.call("GET", "/v1/queues", key="aq_0123456789abcdef_wrong"))
    assert_unavailable(app.owner("GET", "/v1/tenants"))
    assert_unavailable(app.owner("GET", "/v1/server"))


@pytest.mark.parametrize("exc", [RedisClusterException("no slots"), SlotNotCoveredError("slot 7 is not covered"),
                                 ClusterDownError("CLUSTERDOWN"), ConnectionResetError("reset by peer"),
                                 TimeoutError("timed out")], ids=lambda e: type(e).__name__)
def test_store_exceptions_from_the_cluster_client_are_503(private_store: tuple[EmbeddedValkey, InProcessApp],
                                                         monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    _, app = private_store

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    # Where atomq translates: the key check's read of the key table.
    monkeypatch.setattr(app.client, "hget", fail)
    assert_unavailable(app.call("GET", "/v1/queues"))
    monkeypatch.undo()
    # Where nothing translates: an exception raised straight out of a view's code.
    monkeypatch.setattr(app.services.queues, "list_queues", fail)
    assert_unavailable(app.call("GET", "/v1/queues"))


def test_a_send_stored_while_the_memory_state_cannot_be_judged_answers_201(
        private_store: tuple[EmbeddedValkey, InProcessApp], monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory state header is added after the send is stored; judging it may need a read of the
    server settings that fails (a primary failing over). The answer must stay the send's own 201:
    a 500 there told the sender that a stored message had failed."""
    _, app = private_store

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("Redis failed: the settings' primary is failing over")

    monkeypatch.setattr(app.services.memory, "last_state", fail)
    answer = app.call("POST", "/v1/queues/orders/messages", send_body())
    assert answer.status_code == 201, answer.data
    assert "X-Atomq-Memory-State" not in answer.headers
    monkeypatch.undo()
    assert app.services.queues.get_queue(app.tenant, "orders").depth == 1
