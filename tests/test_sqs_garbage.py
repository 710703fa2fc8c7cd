"""No request makes the SQS endpoint answer a 500: drawn JSON bodies for every action it takes
(and for some it does not), and drawn query-protocol forms, each signed with the tenant's pair,
are answered 200 or with SQS's error shape and a 4xx status."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atomq.api.sqs.endpoint import HANDLERS
from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory

PARAMETERS = ("QueueUrl", "QueueName", "Attributes", "AttributeNames", "MessageBody", "MessageAttributes",
              "DelaySeconds", "MaxNumberOfMessages", "WaitTimeSeconds", "VisibilityTimeout", "ReceiptHandle",
              "Entries", "Tags", "TagKeys", "tags", "MaxResults", "NextToken", "QueueNamePrefix",
              "MessageAttributeNames", "MessageSystemAttributeNames", "QueueOwnerAWSAccountId", "Id", "SourceArn",
              "DestinationArn", "MaxNumberOfMessagesPerSecond", "TaskHandle", "MessageSystemAttributes")
QUERY_NAMES = ("QueueUrl", "QueueName", "MessageBody", "Attribute.1.Name", "Attribute.1.Value", "AttributeName.1",
               "MessageAttribute.1.Name", "MessageAttribute.1.Value.DataType", "MessageAttribute.1.Value.StringValue",
               "SendMessageBatchRequestEntry.1.Id", "SendMessageBatchRequestEntry.1.MessageBody",
               "DeleteMessageBatchRequestEntry.x.Id", "Tag.1.Key", "Tag.1.Value", "TagKey.1", "ReceiptHandle",
               "VisibilityTimeout", "MaxNumberOfMessages", "Attribute.1", "Attribute", "SourceArn", "DestinationArn",
               "MaxNumberOfMessagesPerSecond", "TaskHandle", "MessageSystemAttribute.1.Name",
               "MessageSystemAttribute.1.Value.DataType", "MessageSystemAttribute.1.Value.StringValue")
ACTIONS = sorted(HANDLERS) + ["AddPermission", "RemovePermission", "", "Nope"]


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=1)


@pytest.fixture(scope="module")
def pair(node: AtomqServe) -> Iterator[dict[str, str]]:
    with AtomqClient(node.url, node.owner_key) as owner:
        created = owner.create_tenant("sqs-garbage")
    with AtomqClient(node.url, created["api_key"]) as native:
        native.put_queue("target")
        native.send_texts("target", ["m"] * 20)
        yield created["sqs"]


def not_a_long_wait(value: Any) -> bool:
    """Whether a drawn value could not make a receive wait (a test of 500s need not wait 20 s)."""
    text = str(value).strip() if isinstance(value, (int, str)) else ""
    return not (re.fullmatch(r"\d{1,12}", text) and 0 < int(text) <= 20)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=30), st.sampled_from(["All", ".*", "a.*", "String", "Binary", "0", "60",
                                                           "43200", "x~1", "1-0~1", "aws:x",
                                                           "arn:aws:sqs:us-east-1:123456789012:target",
                                                           '{"redrivePermission": "byQueue"}']))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(PARAMETERS + ("DataType", "StringValue",
                                                                               "BinaryValue", "AWSTraceHeader")) | st.text(max_size=8),
                                                 inner, max_size=4)), max_leaves=12).filter(not_a_long_wait)


def signed(node: AtomqServe, pair: dict[str, str], body: bytes, headers: dict[str, str],
           path: str = "/") -> requests.Response:
    request = AWSRequest(method="POST", url=node.url + path, data=body, headers=headers)
    SigV4Auth(Credentials(pair["access_key_id"], pair["secret_access_key"]), "sqs", "us-east-1").add_auth(request)
    return requests.post(node.url + path, data=request.body, headers=dict(request.headers), timeout=30)


def assert_sqs_answer(response: requests.Response) -> None:
    assert response.status_code < 500, response.text
    assert response.headers["x-amzn-RequestId"]
    if response.status_code != 200:
        assert 400 <= response.status_code < 500
        if response.headers["Content-Type"].startswith("application/x-amz-json"):
            assert response.json()["__type"].startswith("com.amazonaws.sqs#")
        else:
            assert "<ErrorResponse" in response.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action=st.sampled_from(ACTIONS), body=st.dictionaries(st.sampled_from(PARAMETERS), VALUES, max_size=6),
       real_queue=st.booleans())
def test_drawn_json_bodies_never_make_a_500(node: AtomqServe, pair: dict[str, str], action: str,
                                            body: dict[str, Any], real_queue: bool) -> None:
    if real_queue:
        body["QueueUrl"] = f"{node.url}/{pair['account_id']}/target"
    if not not_a_long_wait(body.get("WaitTimeSeconds")):
        body["WaitTimeSeconds"] = 0
    response = signed(node, pair, json.dumps(body).encode(), {"X-Amz-Target": f"AmazonSQS.{action}",
                                                              "Content-Type": "application/x-amz-json-1.0"})
    assert_sqs_answer(response)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action=st.sampled_from(ACTIONS), form=st.dictionaries(st.sampled_from(QUERY_NAMES), st.text(max_size=20),
                                                             max_size=6), on_queue_url=st.booleans())
def test_drawn_query_forms_never_make_a_500(node: AtomqServe, pair: dict[str, str], action: str,
                                           form: dict[str, str], on_queue_url: bool) -> None:
    form = {"Action": action, "Version": "2012-11-05", **form, "WaitTimeSeconds": "0"}
    path = f"/{pair['account_id']}/target" if on_queue_url else "/"
    response = signed(node, pair, urlencode(form).encode(),
                      {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}, path)
    assert_sqs_answer(response)


def test_a_body_that_is_not_json_is_a_serialization_error(node: AtomqServe, pair: dict[str, str]) -> None:
    for body in (b"{", b"[1]", b"\xff\xfe", b'"text"'):
        response = signed(node, pair, body, {"X-Amz-Target": "AmazonSQS.SendMessage",
                                             "Content-Type": "application/x-amz-json-1.0"})
        assert response.status_code == 400 and response.json()["__type"].endswith("#SerializationException")
