"""The SQS endpoint as a user meets it: real boto3 clients against a real node (``atomq serve``),
on the queues the native API sees; and the signature checks that keep tenants apart."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from atomq.api.sqs.checksums import md5_of_attributes
from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_client, sqs_tenant

@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=1)


@pytest.fixture(scope="module")
def tenant(node: AtomqServe) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    with sqs_tenant(node, "sqs-boto3") as made:
        yield made


def test_boto3_makes_finds_lists_and_deletes_queues(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, pair = tenant
    sqs = sqs_client(node, pair)
    url = sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
    assert url == f"{node.url}/{pair['account_id']}/orders"
    assert sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "45"})["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName="orders", Attributes={"VisibilityTimeout": "46"})
    assert native.queue("orders")["ack_timeout_s"] == 45  # one namespace
    native.put_queue("made-natively")
    native.put_queue("news", model="publish_subscribe")
    assert sqs.get_queue_url(QueueName="made-natively")["QueueUrl"].endswith("/made-natively")
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as missing:
        sqs.get_queue_url(QueueName="nope")
    assert missing.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    with pytest.raises(ClientError) as pubsub:
        sqs.get_queue_url(QueueName="news")
    assert pubsub.value.response["Error"]["Code"] == "InvalidParameterValue"
    listed = sqs.list_queues()["QueueUrls"]
    assert sorted(u.rsplit("/", 1)[1] for u in listed) == ["made-natively", "orders"]
    assert [u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix="ord")["QueueUrls"]] == ["orders"]
    page = sqs.list_queues(MaxResults=1)
    assert len(page["QueueUrls"]) == 1 and page["NextToken"]
    sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName="made-natively")["QueueUrl"])
    assert "made-natively" not in [q["name"] for q in native.queues()]
    with pytest.raises(ClientError) as unsupported:
        sqs.add_permission(QueueUrl=url, Label="l", AWSAccountIds=["123456789012"], Actions=["SendMessage"])
    assert unsupported.value.response["Error"]["Code"] == "AWS.SimpleQueueService.UnsupportedOperation"


def test_messages_round_trip_between_boto3_and_the_native_api(node: AtomqServe,
                                                               tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, pair = tenant
    sqs = sqs_client(node, pair, region="ap-southeast-2")
    url = sqs.create_queue(QueueName="mixed")["QueueUrl"]
    attributes = {"City": {"DataType": "String", "StringValue": "Any City"},
                  "Count": {"DataType": "Number", "StringValue": "12"},
                  "Img": {"DataType": "Binary", "BinaryValue": b"\x00\x89PNG"},
                  "Unit": {"DataType": "Number.float", "StringValue": "1.5"}}
    body = "h\u00e9llo\r\nworld \U0001f600"
    sent = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attributes)
    (browsed,) = native.browse("mixed")
    assert browsed["documents"][0]["data"] == body and browsed["properties"]["City"] == "Any City"
    native.send_texts("mixed", ["from native"])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"],
                              AttributeNames=["ApproximateReceiveCount"], WaitTimeSeconds=1)["Messages"]
    by_body = {m["Body"]: m for m in got}
    assert set(by_body) == {body, "from native"}
    mine = by_body[body]
    assert mine["MessageAttributes"]["Img"]["BinaryValue"] == b"\x00\x89PNG"
    assert mine["MessageAttributes"]["Unit"] == {"DataType": "Number.float", "StringValue": "1.5"}
    assert mine["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert mine["Attributes"] == {"ApproximateReceiveCount": "1"} and "MessageAttributes" not in by_body["from native"]
    for m in got:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])  # again: changes nothing
    assert native.queue("mixed")["depth"] == 0 and native.queue("mixed")["in_flight"] == 0
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-receipt")
    with pytest.raises(ClientError) as bad_wait:
        sqs.receive_message(QueueUrl=url, WaitTimeSeconds=21)
    assert bad_wait.value.response["Error"]["Code"] == "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.InvalidMessageContents):
        sqs.send_message(QueueUrl=url, MessageBody="bad \x00")


def test_signatures_keep_tenants_apart(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, pair = tenant
    native.put_queue("private")
    with AtomqClient(node.url, node.owner_key) as owner:
        other = owner.create_tenant("sqs-other")["sqs"]
    theirs = sqs_client(node, other)
    mine = sqs_client(node, pair)
    url = mine.get_queue_url(QueueName="private")["QueueUrl"]
    with pytest.raises(theirs.exceptions.QueueDoesNotExist):
        theirs.get_queue_url(QueueName="private")
    with pytest.raises(theirs.exceptions.QueueDoesNotExist):
        theirs.send_message(QueueUrl=url, MessageBody="x")  # by URL: another account's
    for client, code in ((sqs_client(node, pair, secret="x" * 40), "SignatureDoesNotMatch"),
                         (sqs_client(node, pair, access="AQ" + "0" * 28), "InvalidClientTokenId")):
        with pytest.raises(ClientError) as refused:
            client.send_message(QueueUrl=url, MessageBody="x")
        assert refused.value.response["Error"]["Code"] == code
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    unsigned = requests.post(node.url + "/", data="{}", headers={"X-Amz-Target": "AmazonSQS.ListQueues",
                                                                 "Content-Type": "application/x-amz-json-1.0"})
    assert unsigned.status_code == 403 and unsigned.json()["__type"] == "com.amazonaws.sqs#MissingAuthenticationToken"
    legacy = requests.post(node.url + "/", data={"Action": "ListQueues", "Version": "2012-11-05"})
    assert legacy.status_code == 403 and "<Code>MissingAuthenticationToken</Code>" in legacy.text
    assert native.queue("private")["depth"] == 0
    assert requests.get(node.url + "/v1/no-such-route").status_code == 404  # native routes keep their 404


def signed_form(node: AtomqServe, pair: dict[str, str], path: str, form: dict[str, str]) -> requests.Response:
    """A query-protocol request, signed as the older SDKs sign it (botocore's SigV4 on a form body)."""
    request = AWSRequest(method="POST", url=node.url + path, data=urlencode(form),
                         headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    SigV4Auth(Credentials(pair["access_key_id"], pair["secret_access_key"]), "sqs", "us-west-2").add_auth(request)
    return requests.post(node.url + path, data=request.body, headers=dict(request.headers))


def test_the_query_protocol_answers_in_xml_on_queue_urls(node: AtomqServe,
                                                        tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, pair = tenant
    native.put_queue("legacy")
    path = f"/{pair['account_id']}/legacy"
    body = "carriage\rreturn & <markup>"
    sent = signed_form(node, pair, path, {"Action": "SendMessage", "Version": "2012-11-05", "MessageBody": body,
                                          "MessageAttribute.1.Name": "k", "MessageAttribute.1.Value.DataType": "String",
                                          "MessageAttribute.1.Value.StringValue": "v"})
    assert sent.status_code == 200, sent.text
    assert sent.headers["Content-Type"].startswith("text/xml") and sent.headers["x-amzn-RequestId"]
    got = signed_form(node, pair, path, {"Action": "ReceiveMessage", "Version": "2012-11-05",
                                         "MessageAttributeName.1": "All"})
    root = ET.fromstring(got.content)
    ns = {"q": "http://queue.amazonaws.com/doc/2012-11-05/"}
    assert root.findtext("q:ReceiveMessageResult/q:Message/q:Body", namespaces=ns) == body
    assert root.findtext("q:ReceiveMessageResult/q:Message/q:MessageAttribute/q:Value/q:StringValue",
                         namespaces=ns) == "v"
    missing = signed_form(node, pair, f"/{pair['account_id']}/nope", {"Action": "ReceiveMessage"})
    assert missing.status_code == 400
    assert ET.fromstring(missing.content).findtext("q:Error/q:Code", namespaces=ns) == \
        "AWS.SimpleQueueService.NonExistentQueue"
