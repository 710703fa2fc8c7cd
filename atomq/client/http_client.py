"""The client of the atomq HTTP API: one call per endpoint, errors as atomq's own.

Keep-alive connections per client (``atomq.client.transport``). Errors come back as the
same ``atomq.errors`` classes the server raised, rebuilt from the JSON error
body, so a caller catches ``RateLimited`` (with ``retry_after``) or
``NotFound`` whether it uses the library or the API.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3

from atomq import defaults
from atomq.client import wire
from atomq.client.answers import error_from_response
from atomq.client.moves import MoveTaskCalls
from atomq.client.transport import Transport, TransportError
from atomq.errors import InvalidInput, StorageError, StorageFull

_TRIED_AGAIN = frozenset({"outcome_unknown", "storage_unavailable", "unreachable"})
"""The refusals a send is tried again after: the store or the node did not answer (memory_low and
not_durable, also 503s, are the caller's to judge)."""


class AtomqClient(MoveTaskCalls):
    """Speaks to one atomq node with one key (move tasks: ``MoveTaskCalls``).

    Args:
        url: the node's base URL.
        key: a tenant's API key, or the owner key.
        tenant: with the owner key, the tenant whose queues the calls act on.
        timeout: seconds per request (a blocking get adds its own wait).
        send_tries: how often a send or publish is tried while its outcome is unknown or the store
            unavailable (a 503 but memory_low and not_durable, or no answer from the node): each
            try carries the same Idempotency-Key, so the node stores it once.
    """

    def __init__(self, url: str = defaults.NODE_URL, key: str = "", *, tenant: str | None = None,
                 timeout: float = 30.0, send_tries: int = 3) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.send_tries = send_tries
        self.headers = urllib3.HTTPHeaderDict({"Authorization": f"Bearer {key}"})
        """Sent with every call, names matched without case; a caller may add its own (a trace's
        ``traceparent``). What a requests-based client set on its ``session.headers`` goes here."""
        self._transport = Transport(self.url)
        if tenant:
            self.act_for(tenant)

    def act_for(self, tenant: str) -> None:
        """With the owner key: the calls from now on act on tenant ``tenant``'s queues (its id or name, as UTF-8)."""
        self.headers["X-Atomq-Tenant"] = tenant.encode("utf-8").decode("latin-1")

    def clone(self) -> AtomqClient:
        """Another client of the same node, key and tenant, with connections of its own, for
        another thread."""
        twin = AtomqClient(self.url, timeout=self.timeout, send_tries=self.send_tries)
        twin.headers.update(self.headers)
        return twin

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> AtomqClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None,
                headers: dict[str, str] | None = None, **query: Any) -> Any:
        """One call; the decoded JSON answer (None for 204), or the atomq error it carried.

        The body is written by the json module with ``allow_nan=False``: a NaN or an infinity is
        refused here with a ValueError before anything is sent (orjson would send null). Answers are
        read by orjson (the node writes strict JSON)."""
        params = {k: v for k, v in query.items() if v is not None}
        url = self.url + path + (f"?{urlencode(params, doseq=True)}" if params else "")
        sent_headers = self.headers
        data = None
        if body is not None or headers:
            sent_headers = sent_headers.copy()
            sent_headers.update(headers or {})
        if body is not None:
            data = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
            sent_headers["Content-Type"] = "application/json"
        try:
            response = self._transport.request(method, url, data, sent_headers, timeout or self.timeout)
        except TransportError as exc:
            raise StorageError(f"cannot reach atomq at {self.url}: {exc}", code="unreachable") from None
        if response.status >= 400:
            raise error_from_response(response)
        return orjson.loads(response.data) if response.data else None

    def ready(self) -> Any:
        """``/v1/ready`` (no key needed): ``{"status": "ready"}``, plus ``warnings`` naming what keeps
        the node's execution workers from running (no Java runtime for Spark, say); StorageError when
        the node is not ready."""
        return self.request("GET", "/v1/ready")

    # -- tenants and the server (owner key) ----------------------------------------------

    def create_tenant(self, name: str, *, rate_limit_per_minute: int = defaults.TENANT_RATE_LIMIT_PER_MINUTE,
                      disk_quota_bytes: int = defaults.TENANT_DISK_QUOTA_BYTES,
                      spark_weight: int = defaults.SPARK_WEIGHT) -> Any:
        """The new tenant, with its first ``api_key`` (shown only here)."""
        return self.request("POST", "/v1/tenants", {"name": name, "rate_limit_per_minute": rate_limit_per_minute,
                                                    "disk_quota_bytes": disk_quota_bytes,
                                                    "spark_weight": spark_weight})

    def tenants(self, name: str | None = None) -> list[Any]:
        """Every tenant, oldest first, or (``name``) the one of that name: a list of one, or empty."""
        return self._whole_list("/v1/tenants", "tenants", name=name)

    def _whole_list(self, path: str, member: str, **query: Any) -> list[Any]:
        """Every item of a list the node answers a page at a time."""
        items: list[Any] = []
        after = None
        while True:
            page = self.request("GET", path, after=after, **query)
            items += page[member]
            after = page.get("next")
            if after is None:
                return items

    def tenant(self, tenant_id: str) -> Any:
        return self.request("GET", f"/v1/tenants/{tenant_id}")

    def update_tenant(self, tenant_id: str, **changes: Any) -> Any:
        return self.request("PATCH", f"/v1/tenants/{tenant_id}", changes)

    def delete_tenant(self, tenant_id: str) -> None:
        self.request("DELETE", f"/v1/tenants/{tenant_id}")

    def create_key(self, tenant_id: str) -> Any:
        return self.request("POST", f"/v1/tenants/{tenant_id}/keys")

    def revoke_key(self, tenant_id: str, key_id: str) -> None:
        self.request("DELETE", f"/v1/tenants/{tenant_id}/keys/{key_id}")

    def sqs_credentials(self) -> Any:
        """The SQS pair of this client's API key: ``access_key_id``, ``secret_access_key``,
        ``account_id`` and the ``endpoint_url`` to give an SQS client."""
        return self.request("GET", "/v1/credentials/sqs")

    def server(self) -> Any:
        return self.request("GET", "/v1/server")

    def update_server(self, **changes: Any) -> Any:
        return self.request("PATCH", "/v1/server", changes)

    def nodes(self) -> list[Any]:
        """The nodes on the store with the execution workers each keeps (owner key)."""
        return self.request("GET", "/v1/server/nodes")["nodes"]  # type: ignore[no-any-return]

    def overview(self, sort: str = "traffic", limit: int = 20) -> Any:
        """The tenants ranked by ``sort`` (traffic, depth, stuck, dead_letters, full, refused) at the
        last sample, and the platform's rates over the last hour (owner key)."""
        return self.request("GET", "/v1/server/overview", sort=sort, limit=limit)

    # -- queues --------------------------------------------------------------------------

    def put_queue(self, name: str, model: str = "point_to_point", **settings: Any) -> Any:
        return self.request("PUT", f"/v1/queues/{name}", {"model": model, **settings})

    def queues(self) -> list[Any]:
        return self._whole_list("/v1/queues", "queues")

    def queue(self, name: str) -> Any:
        return self.request("GET", f"/v1/queues/{name}")

    def delete_queue(self, name: str) -> None:
        self.request("DELETE", f"/v1/queues/{name}")

    def subscribers(self, queue: str) -> list[Any]:
        """A publish/subscribe queue's subscribers with their counts; InvalidInput on a point-to-point one."""
        info = self.queue(queue)
        if "subscribers" not in info:
            raise InvalidInput(f"queue {queue} is {info['model']}: only a publish_subscribe queue has subscribers")
        return list(info["subscribers"])

    def put_subscriber(self, queue: str, subscriber: str) -> None:
        self.request("PUT", f"/v1/queues/{queue}/subscribers/{subscriber}")

    def delete_subscriber(self, queue: str, subscriber: str) -> None:
        self.request("DELETE", f"/v1/queues/{queue}/subscribers/{subscriber}")

    # -- listeners -----------------------------------------------------------------------

    def put_listener(self, name: str, queue: str, process: str, *, subscriber: str | None = None,
                     batch_size: int = defaults.LISTENER_BATCH_SIZE, max_concurrent_executions: int = 0,
                     engine: str = "fork",
                     settings: dict[str, Any] | None = None) -> Any:
        """Deploys or redeploys a listener running the registered ``process`` on ``queue``."""
        body: dict[str, Any] = {"queue": queue, "process": process, "batch_size": batch_size,
                                "max_concurrent_executions": max_concurrent_executions, "engine": engine,
                                "settings": dict(settings or {})}
        if subscriber is not None:
            body["subscriber"] = subscriber
        return self.request("PUT", f"/v1/listeners/{name}", body)

    def listeners(self) -> list[Any]:
        return self._whole_list("/v1/listeners", "listeners")

    def listener(self, name: str) -> Any:
        return self.request("GET", f"/v1/listeners/{name}")

    def pause_listener(self, name: str) -> Any:
        return self.request("POST", f"/v1/listeners/{name}/pause")

    def resume_listener(self, name: str) -> Any:
        return self.request("POST", f"/v1/listeners/{name}/resume")

    def restart_listener(self, name: str) -> Any:
        return self.request("POST", f"/v1/listeners/{name}/restart")

    def delete_listener(self, name: str) -> None:
        self.request("DELETE", f"/v1/listeners/{name}")

    # -- messages ------------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[dict[str, Any]], *, idempotency_key: str | None = None,
             delay_s: float | None = None) -> list[str]:
        """Sends messages in the API's shape (``{"documents": [{"data": ...}], ...}``); their ids."""
        answer = self.send_batch(queue, messages, idempotency_key=idempotency_key, delay_s=delay_s)
        return answer["ids"]  # type: ignore[no-any-return]

    def send_batch(self, queue: str, messages: Sequence[dict[str, Any]], *,
                   idempotency_key: str | None = None, delay_s: float | None = None) -> Any:
        """Sends messages (as :meth:`send`); the whole answer: ``{"ids", "copies", "warnings"}``, with
        ``"dropped"`` when the queue's overflow dropped waiting messages to make room; ``copies`` 0 and a
        warning when nothing was stored (no subscribers). Stored once however often it is tried (``send_tries``),
        under ``idempotency_key`` or one made for the call: the same key again within a day answers the first.
        ``delay_s``: each message that gives no ``delay_s`` of its own is first delivered this many
        seconds after the send (None: the queue's ``delay_s``)."""
        return self._stored_once(f"/v1/queues/{queue}/messages", messages, idempotency_key, delay_s)

    def publish(self, topic: str, messages: Sequence[dict[str, Any]], *, idempotency_key: str | None = None,
                delay_s: float | None = None) -> Any:
        """Publishes messages (in a send's shape) to a topic: ``{"ids", "queues", "copies", "warnings"}``,
        ``queues`` those whose patterns matched. Stored once, and delayed (every copy), as :meth:`send_batch`."""
        return self._stored_once(f"/v1/topics/{topic}/messages", messages, idempotency_key, delay_s)

    def publish_many(self, messages: Sequence[dict[str, Any]], *, idempotency_key: str | None = None,
                     delay_s: float | None = None) -> Any:
        """Publishes each message (in a send's shape, with its ``"topic"``) to its own topic, in one
        request: ``{"ids", "topics": {topic: [queues]}, "copies", "warnings"}``, an id null where no queue
        attracts the message's topic. Messages whose topics reach the same queues are stored all or nothing
        together; a refusal's ``details.ids`` names what was stored before it. Stored once, and delayed, as
        :meth:`send_batch`."""
        return self._stored_once("/v1/topics/messages", messages, idempotency_key, delay_s)

    def _stored_once(self, path: str, messages: Sequence[dict[str, Any]], key: str | None,
                     delay_s: float | None) -> Any:
        """POSTs a send under an Idempotency-Key, tried again while its outcome is unknown (503
        outcome_unknown, or no answer from the node) or the store unavailable, after the wait the
        node asked for: the key makes each try after the first answer what the first stored."""
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        body: dict[str, Any] = {"messages": list(messages)}
        if delay_s is not None:
            body["delay_s"] = delay_s
        for tries_left in range(max(1, self.send_tries) - 1, -1, -1):
            try:
                return self.request("POST", path, body, headers=headers)
            except StorageError as exc:
                if not tries_left or isinstance(exc, StorageFull) or exc.code not in _TRIED_AGAIN:
                    raise
                time.sleep(min(float(exc.details.get("retry_after", 1)), 5.0))

    def send_texts(self, queue: str, texts: Sequence[str]) -> list[str]:
        """One message of one text document per text."""
        return self.send(queue, [wire.message([wire.document(t)]) for t in texts])

    def get(self, queue: str, max_messages: int = defaults.GET_MAX_MESSAGES, wait_ms: int = defaults.GET_WAIT_MS,
            subscriber: str | None = None, consumer: str | None = None,
            ack_receipts: Sequence[str] | None = None) -> list[Any]:
        """Up to ``max_messages`` deliveries. ``consumer`` names the caller: required on an exclusive
        queue, where only the active consumer gets messages (see :meth:`take`). ``ack_receipts``
        (the previous batch's) are acked first, in the same request."""
        taken = self.take(queue, max_messages, wait_ms, subscriber, consumer, ack_receipts=ack_receipts)
        return taken["messages"]  # type: ignore[no-any-return]

    def take(self, queue: str, max_messages: int = defaults.GET_MAX_MESSAGES, wait_ms: int = defaults.GET_WAIT_MS,
             subscriber: str | None = None, consumer: str | None = None,
             ack_ids: Sequence[str] | None = None, ack_receipts: Sequence[str] | None = None) -> Any:
        """A get's whole answer: ``{"messages": [...]}``, with ``"active"`` on an exclusive queue
        (false: a standby, which gets nothing until the active consumer goes silent), and
        ``"acked"`` when given ``ack_ids`` or ``ack_receipts`` to ack first, in the same request:
        a consumer loop that acks each batch with its next get makes one request a batch."""
        body: dict[str, Any] = {"max": max_messages, "wait_ms": wait_ms}
        if subscriber:
            body["subscriber"] = subscriber
        if consumer:
            body["consumer"] = consumer
        ack = {k: list(v) for k, v in (("ids", ack_ids), ("receipts", ack_receipts)) if v is not None}
        if ack:
            body["ack"] = ack  # both given: the server's 400 says to give one
        return self.request("POST", f"/v1/queues/{queue}/get", body, timeout=self.timeout + wait_ms / 1000)

    def _selected(self, queue: str, action: str, ids: Sequence[str] | None, receipts: Sequence[str] | None,
                  subscriber: str | None, consumer: str | None, **extra: Any) -> Any:
        body: dict[str, Any] = {"ids": list(ids)} if ids is not None else {"receipts": list(receipts or [])}
        if subscriber:
            body["subscriber"] = subscriber
        if consumer:
            body["consumer"] = consumer
        return self.request("POST", f"/v1/queues/{queue}/{action}", {**body, **extra})

    def ack(self, queue: str, ids: Sequence[str] | None = None, receipts: Sequence[str] | None = None,
            subscriber: str | None = None, consumer: str | None = None) -> int:
        return int(self._selected(queue, "ack", ids, receipts, subscriber, consumer)["acked"])

    def nack(self, queue: str, ids: Sequence[str] | None = None, receipts: Sequence[str] | None = None,
             subscriber: str | None = None, reason: str = "", consumer: str | None = None) -> Any:
        """``{"requeued": n, "dead_lettered": m}``."""
        return self._selected(queue, "nack", ids, receipts, subscriber, consumer, reason=reason)

    def extend(self, queue: str, ids: Sequence[str] | None = None, receipts: Sequence[str] | None = None,
               subscriber: str | None = None, seconds: float | None = None, consumer: str | None = None) -> int:
        extra = {} if seconds is None else {"seconds": seconds}
        return int(self._selected(queue, "extend", ids, receipts, subscriber, consumer, **extra)["extended"])

    def release(self, queue: str, ids: Sequence[str] | None = None, receipts: Sequence[str] | None = None,
                subscriber: str | None = None) -> int:
        """Gives in-flight messages back to the queue at once, not counted as failed deliveries (a
        consumer known to be gone, a stuck message); on an exclusive queue, whoever holds them."""
        return int(self._selected(queue, "release", ids, receipts, subscriber, None)["released"])

    # -- management ----------------------------------------------------------------------

    def _pages(self, path: str, subscriber: str | None, limit: int, **query: Any) -> Iterator[Any]:
        after = None
        while True:
            page = self.request("GET", path, limit=limit, after=after, subscriber=subscriber, **query)
            yield from page["messages"]
            after = page["next"]
            if after is None:
                return

    def browse(self, queue: str, subscriber: str | None = None, limit: int = defaults.PAGE_LIMIT,
               state: str | None = None) -> Iterator[Any]:
        """Every waiting and in-flight message (only those in ``state``: ready, in_flight or
        scheduled, when set), page by page, without consuming them. A message in flight carries
        ``holder``, ``delivered_at`` and ``deadline``: who holds it, since when, until when; a
        scheduled one ``due_at`` (with ``delivery_count`` 0 when its send delayed it)."""
        return self._pages(f"/v1/queues/{queue}/messages", subscriber, limit, state=state)

    def dead_letters(self, queue: str, subscriber: str | None = None,
                     limit: int = defaults.PAGE_LIMIT, reason: str | None = None) -> Iterator[Any]:
        """Every dead letter (given ``reason`` only, when set), page by page."""
        return self._pages(f"/v1/queues/{queue}/dead-letters", subscriber, limit, reason=reason)

    def dead_letter_reasons(self, queue: str, subscriber: str | None = None) -> Any:
        """The reasons present among the newest dead letters with how many have each, the most
        frequent first: ``{"reasons": [{"reason", "count"}], "counted", "complete"}``."""
        return self.request("GET", f"/v1/queues/{queue}/dead-letters/reasons", subscriber=subscriber)

    def _bulk(self, method: str, path: str, ids: Sequence[str] | None, subscriber: str | None,
              reason: str | None = None, timeout: float | None = None) -> Any:
        body: dict[str, Any] = ({"ids": list(ids)} if ids is not None
                                else {"reason": reason} if reason is not None else {"all": True})
        if subscriber:
            body["subscriber"] = subscriber
        return self.request(method, path, body, timeout=timeout)

    def delete_messages(self, queue: str, ids: Sequence[str] | None = None, subscriber: str | None = None) -> int:
        """Deletes the messages ``ids``, or all of them when ``ids`` is None."""
        return int(self._bulk("DELETE", f"/v1/queues/{queue}/messages", ids, subscriber)["deleted"])

    def resend_dead_letters(self, queue: str, ids: Sequence[str] | None = None,
                            subscriber: str | None = None, reason: str | None = None,
                            timeout: float | None = None) -> int:
        """Resends the dead letters ``ids``; when None, those given ``reason``, or all of them (of
        every subscriber unless ``subscriber``), in one request that may take ``timeout``."""
        return int(self._bulk("POST", f"/v1/queues/{queue}/dead-letters/resend", ids, subscriber,
                              reason, timeout)["resent"])

    def delete_dead_letters(self, queue: str, ids: Sequence[str] | None = None,
                            subscriber: str | None = None, reason: str | None = None,
                            timeout: float | None = None) -> int:
        """Deletes the dead letters ``ids``; when None, those given ``reason``, or all of them (of
        every subscriber unless ``subscriber``), in one request that may take ``timeout``."""
        return int(self._bulk("DELETE", f"/v1/queues/{queue}/dead-letters", ids, subscriber,
                              reason, timeout)["deleted"])
