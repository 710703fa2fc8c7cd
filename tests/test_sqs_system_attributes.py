"""A message's system attributes beyond its counts and times, through real boto3 against a real node:
SenderId (the API key that sent it) and AWSTraceHeader (the X-Ray header a send sets), which
consumers read with ``AttributeNames=["All"]`` and tracing libraries pass on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from atomq.api.sqs.checksums import md5_of_attributes
from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_client

TRACE = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=1)


@pytest.fixture(scope="module")
def made(node: AtomqServe) -> Iterator[dict[str, Any]]:
    """A tenant with two API keys: its native client, and each key's id and SQS pair."""
    with AtomqClient(node.url, node.owner_key) as owner:
        created = owner.create_tenant("system-attributes")
        second = owner.create_key(created["id"])
    with AtomqClient(node.url, created["api_key"]) as native:
        yield {"native": native, "keys": [(created["key_id"], created["sqs"]), (second["key_id"], second["sqs"])]}


def test_sender_id_is_the_sending_key_and_a_native_send_the_account(node: AtomqServe, made: dict[str, Any]) -> None:
    (first_id, first), (second_id, second) = made["keys"]
    sqs, other = sqs_client(node, first), sqs_client(node, second)
    url = sqs.create_queue(QueueName="senders")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="by the first key",
                     MessageAttributes={"kind": {"DataType": "String", "StringValue": "a"}})
    other.send_message_batch(QueueUrl=url, Entries=[{"Id": "b", "MessageBody": "by the second key"}])
    made["native"].send("senders", [{"documents": [{"data": "natively"}]}])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"],
                              MessageAttributeNames=["All"])["Messages"]
    senders = {m["Body"]: m["Attributes"]["SenderId"] for m in got}
    assert senders == {"by the first key": first_id, "by the second key": second_id,
                       "natively": first["account_id"]}
    (with_attribute,) = [m for m in got if m["Body"] == "by the first key"]
    # the sender is no message attribute: the attributes and their checksum are the sender's own
    assert with_attribute["MessageAttributes"] == {"kind": {"DataType": "String", "StringValue": "a"}}
    assert with_attribute["MD5OfMessageAttributes"] == md5_of_attributes(with_attribute["MessageAttributes"])
    assert all("MessageAttributes" not in m for m in got if m["Body"] != "by the first key")
    sqs.delete_queue(QueueUrl=url)


def test_sender_id_is_asked_for_by_name_and_only_then_given(node: AtomqServe, made: dict[str, Any]) -> None:
    (key_id, pair), _ = made["keys"]
    sqs = sqs_client(node, pair)
    url = sqs.create_queue(QueueName="by-name.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="d1")
    sqs.send_message(QueueUrl=url, MessageBody="two", MessageGroupId="h", MessageDeduplicationId="d2")
    (named,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["SenderId"])["Messages"]
    assert named["Attributes"] == {"SenderId": key_id}
    (plain,) = sqs.receive_message(QueueUrl=url)["Messages"]
    assert "Attributes" not in plain
    sqs.delete_queue(QueueUrl=url)


def test_an_aws_trace_header_travels_with_its_message(node: AtomqServe, made: dict[str, Any]) -> None:
    (_, pair), _ = made["keys"]
    sqs = sqs_client(node, pair)
    url = sqs.create_queue(QueueName="traced")["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="traced",
                            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}})
    assert sent["MD5OfMessageSystemAttributes"] == md5_of_attributes(
        {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}})
    assert "MD5OfMessageAttributes" not in sent
    batch = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "t", "MessageBody": "traced in a batch",
         "MessageSystemAttributes": {"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}}},
        {"Id": "u", "MessageBody": "untraced"}])
    assert [e["Id"] for e in batch["Successful"]] == ["t", "u"] and not batch.get("Failed")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"],
                              MessageAttributeNames=["All"])["Messages"]
    assert {m["Body"]: m["Attributes"].get("AWSTraceHeader") for m in got} == {
        "traced": TRACE, "traced in a batch": TRACE, "untraced": None}
    assert all("MessageAttributes" not in m for m in got)  # a system attribute is no message attribute
    sqs.delete_queue(QueueUrl=url)


@pytest.mark.parametrize(("system", "words"), [
    ({"Other": {"DataType": "String", "StringValue": TRACE}}, "Message system attribute name 'Other' is invalid."),
    ({"AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}}, "invalid data type"),
    ({"AWSTraceHeader": {"DataType": "String", "StringValue": "not a trace header"}}, "X-Ray trace header"),
    ({"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE + ";Lineage=" + "a" * 1024}}, "1,024"),
])
def test_a_system_attribute_other_than_a_trace_header_is_refused(node: AtomqServe, made: dict[str, Any],
                                                                  system: dict[str, Any], words: str) -> None:
    (_, pair), _ = made["keys"]
    sqs = sqs_client(node, pair)
    url = sqs.create_queue(QueueName="refused-trace")["QueueUrl"]
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageSystemAttributes=system)
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert words in refused.value.response["Error"]["Message"]
    failed = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "bad", "MessageBody": "x", "MessageSystemAttributes": system}, {"Id": "good", "MessageBody": "y"}])
    assert [(f["Id"], f["Code"]) for f in failed["Failed"]] == [("bad", "InvalidParameterValue")]
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]] == ["y"]


def test_a_new_queue_takes_messages_of_1_mib_as_sqs_does(node: AtomqServe, made: dict[str, Any]) -> None:
    """SQS's default MaximumMessageSize is its largest (since August 2025): a message of 1 MiB, body
    and attributes, sent alone or in a batch, is taken and received whole; one byte more is refused."""
    (_, pair), _ = made["keys"]
    sqs = sqs_client(node, pair)
    url = sqs.create_queue(QueueName="large")["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])["Attributes"] == {
        "MaximumMessageSize": "1048576"}
    attribute = {"a": {"DataType": "String", "StringValue": "v" * 1_000}}
    body = "b" * (1_048_576 - len("a") - len("String") - 1_000)
    sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attribute)
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "whole", "MessageBody": body,
                                                          "MessageAttributes": attribute}])
    assert [e["Id"] for e in sent["Successful"]] == ["whole"]
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody=body + "b", MessageAttributes=attribute)
    assert refused.value.response["Error"]["Message"] == ("One or more parameters are invalid. Reason: Message must "
                                                          "be shorter than 1048576 bytes.")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert [(m["Body"], m["MessageAttributes"]) for m in got] == [(body, attribute)] * 2
    sqs.delete_queue(QueueUrl=url)
