"""The SQS request path's shortcuts, in this process on real Valkey: the JSON protocol served without
Flask (``api.sqs.front``), and what a process keeps for a second (the signer's key, a queue's SQS
fields) never letting a deleted queue or a key revoked here through."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from atomq.api.sqs.front import SqsFront
from atomq.platform.store.embedded import EmbeddedValkey
from support.in_process_app import InProcessApp, strict_loads


@pytest.fixture(scope="module")
def app(valkey: EmbeddedValkey) -> Iterator[InProcessApp]:
    with InProcessApp(valkey.client()) as app:
        yield app


def sqs_call(app: InProcessApp, pair: dict[str, str], action: str, params: dict[str, Any]) -> tuple[int, Any]:
    """One JSON-protocol request signed with ``pair``, as boto3 sends it: (status, body)."""
    body = json.dumps(params).encode()
    request = AWSRequest(method="POST", url="http://localhost/", data=body,
                         headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"})
    SigV4Auth(Credentials(pair["access_key_id"], pair["secret_access_key"]), "sqs", "us-east-1").add_auth(request)
    answer = app.http.post("/", data=body, headers=dict(request.headers))
    return answer.status_code, json.loads(answer.data) if answer.data else None


def the_front(app: InProcessApp) -> SqsFront:
    front = app.app.wsgi_app.flask  # type: ignore[attr-defined]  # behind the hot path
    assert isinstance(front, SqsFront)
    return front


def test_json_requests_are_served_without_flask_and_the_rest_with_it(app: InProcessApp) -> None:
    pair = strict_loads(app.call("GET", "/v1/credentials/sqs", key=app.key).data)
    front = the_front(app)
    flask, handed = front.inner, []

    def counted(environ: dict[str, Any], start_response: Any) -> Any:
        handed.append(environ["PATH_INFO"])
        return flask(environ, start_response)

    front.inner = counted
    try:
        status, created = sqs_call(app, pair, "CreateQueue", {"QueueName": "fronted"})
        assert status == 200 and created["QueueUrl"].endswith(f"/{pair['account_id']}/fronted")
        assert sqs_call(app, pair, "SendMessage", {"QueueUrl": created["QueueUrl"], "MessageBody": "hi"})[0] == 200
        status, error = sqs_call(app, pair, "GetQueueUrl", {"QueueName": "nowhere"})
        assert status == 400 and error["__type"] == "com.amazonaws.sqs#QueueDoesNotExist"
        assert handed == []
        query = app.http.post("/", data={"Action": "ListQueues", "Version": "2012-11-05"})
        assert query.status_code == 403 and handed == ["/"]  # unsigned, and answered by Flask's view
    finally:
        front.inner = flask


def test_a_queue_deleted_and_a_key_revoked_are_refused_at_once(app: InProcessApp) -> None:
    key_id, api_key = app.services.tenants.create_key(app.tenant)
    pair = strict_loads(app.call("GET", "/v1/credentials/sqs", key=api_key).data)
    url = sqs_call(app, pair, "CreateQueue", {"QueueName": "kept-a-second"})[1]["QueueUrl"]
    assert sqs_call(app, pair, "SendMessage", {"QueueUrl": url, "MessageBody": "one"})[0] == 200  # both now kept
    app.services.queues.delete_queue(app.tenant, "kept-a-second")  # natively: the SQS reads do not see it
    status, error = sqs_call(app, pair, "SendMessage", {"QueueUrl": url, "MessageBody": "two"})
    assert status == 400 and error["__type"] == "com.amazonaws.sqs#QueueDoesNotExist"
    app.services.tenants.revoke_key(app.tenant, key_id)
    status, error = sqs_call(app, pair, "ListQueues", {})
    assert status == 403 and error["__type"] == "com.amazonaws.sqs#InvalidClientTokenId"
