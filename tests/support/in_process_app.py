"""The app in this process, called as no well-behaved client calls it: raw bodies, any key, any address.

Every answer is read as a strict client reads it (NaN and Infinity are not
JSON) and every error must have the one JSON shape.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import redis

from atomq.api import create_app
from atomq.api.services import LongPollLimiter, Services
from atomq.platform import QueueServer
from atomq.tenants import TenantStore
from support.queues import FAST

OWNER_KEY = f"aq_owner_{secrets.token_urlsafe(32)}"


def strict_loads(text: str | bytes) -> Any:
    """JSON as a strict client reads it: NaN and Infinity are errors."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


class InProcessApp:
    """The app in this process, on one Valkey, with a tenant and its queues."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.services = Services(queues=QueueServer(client, FAST), tenants=TenantStore(client, OWNER_KEY),
                                 longpolls=LongPollLimiter(2))
        self.app = create_app(self.services)
        self.http = self.app.test_client()
        tenant, _, self.key = self.services.tenants.create("abuse")
        self.tenant = tenant.id
        self.services.queues.put_queue(self.tenant, "orders", "point_to_point")
        self.services.queues.put_queue(self.tenant, "news", "publish_subscribe")

    def call(self, method: str, path: str, body: Any = None, *, raw: str | bytes | None = None,
             key: str | None = "tenant", content_type: str | None = "application/json",
             address: str = "127.0.0.1", headers: dict[str, str] | None = None) -> Any:
        """The response; ``raw`` is sent as the body as it is, else ``body`` as JSON."""
        headers = dict(headers or {})
        if key is not None:
            headers["Authorization"] = f"Bearer {self.key if key == 'tenant' else key}"
        if content_type is not None:
            headers["Content-Type"] = content_type
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        return self.http.open(path, method=method, data=data, headers=headers,
                              environ_base={"REMOTE_ADDR": address})

    def owner(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.call(method, path, body, key=OWNER_KEY, **kwargs)

    def __enter__(self) -> InProcessApp:
        return self

    def __exit__(self, *exc: object) -> None:
        """Deletes the tenant, then closes the client."""
        try:
            self.services.tenants.delete(self.tenant)
        finally:
            self.client.close()


def error_of(response: Any, status: int) -> dict[str, Any]:
    """The error of a response that must have ``status``, in the one JSON shape, strictly parsed."""
    assert response.status_code == status, (response.status_code, response.data[:500])
    body = strict_loads(response.data)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]  # type: ignore[no-any-return]


def send_body(**message: Any) -> dict[str, Any]:
    return {"messages": [{"documents": [{"data": "x"}], **message}]}
