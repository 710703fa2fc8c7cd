"""SQS FIFO queues through real boto3 against a real node: a ``.fifo`` name made with FifoQueue, its
attributes, MessageGroupId ordering (one message of a group in flight, groups independent),
de-duplication by id or by the body's SHA-256, SequenceNumber, and the standard queue's take on
MessageGroupId (kombu sends it)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_client, sqs_tenant

FIFO_ATTRIBUTES = ["MessageGroupId", "SequenceNumber", "MessageDeduplicationId", "ApproximateReceiveCount"]


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=2)


@pytest.fixture(scope="module")
def tenant(node: AtomqServe) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    with sqs_tenant(node, "sqs-fifo") as made:
        yield made


@pytest.fixture(scope="module")
def sqs(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]]) -> Any:
    return sqs_client(node, tenant[1])


def code_of(call: Any, **kwargs: Any) -> str:
    with pytest.raises(ClientError) as refused:
        call(**kwargs)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    return str(refused.value.response["Error"]["Code"])


def fifo_queue(sqs: Any, name: str, **attributes: str) -> str:
    return str(sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"])


def receive(sqs: Any, url: str, most: int = 10) -> list[dict[str, Any]]:
    return list(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=most,
                                    MessageSystemAttributeNames=FIFO_ATTRIBUTES).get("Messages", []))


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in messages]


def test_a_fifo_queue_is_a_fifo_name_made_with_fifo_queue_true(
        sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = fifo_queue(sqs, "orders.fifo")
    assert url.endswith("/orders.fifo")
    assert fifo_queue(sqs, "orders.fifo") == url, "the same attributes again: the same queue"
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: got[k] for k in ("FifoQueue", "ContentBasedDeduplication", "DeduplicationScope",
                                "FifoThroughputLimit")} == {
        "FifoQueue": "true", "ContentBasedDeduplication": "false", "DeduplicationScope": "queue",
        "FifoThroughputLimit": "perQueue"}
    assert native.queue("orders.fifo")["ordering"] == "group"
    standard = sqs.create_queue(QueueName="plain-std")["QueueUrl"]
    assert "FifoQueue" not in sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])["Attributes"]
    assert native.queue("plain-std")["ordering"] == "none"

    assert code_of(sqs.create_queue, QueueName="nofifo.fifo") == "InvalidParameterValue"
    assert code_of(sqs.create_queue, QueueName="named-std", Attributes={"FifoQueue": "true"}) == \
        "InvalidParameterValue"
    assert code_of(sqs.create_queue, QueueName="x.fifo", Attributes={"FifoQueue": "maybe"}) == \
        "InvalidAttributeValue"
    assert code_of(sqs.create_queue, QueueName="std-cbd", Attributes={"ContentBasedDeduplication": "true"}) == \
        "InvalidAttributeName"
    assert code_of(sqs.create_queue, QueueName="scoped.fifo",
                   Attributes={"FifoQueue": "true", "DeduplicationScope": "group"}) == "InvalidAttributeValue"
    assert code_of(sqs.create_queue, QueueName=f"{'n' * 76}.fifo", Attributes={"FifoQueue": "true"}) == \
        "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.QueueNameExists):
        fifo_queue(sqs, "orders.fifo", ContentBasedDeduplication="true")
    assert code_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"FifoQueue": "false"}) == \
        "InvalidAttributeValue"
    assert code_of(sqs.set_queue_attributes, QueueUrl=standard, Attributes={"FifoQueue": "true"}) == \
        "InvalidAttributeValue"
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true",
                                                       "FifoThroughputLimit": "perMessageGroupId"})
    changed = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ContentBasedDeduplication",
                                                                     "FifoThroughputLimit"])["Attributes"]
    assert changed == {"ContentBasedDeduplication": "true", "FifoThroughputLimit": "perMessageGroupId"}
    assert not {"nofifo.fifo", "named-std", "x.fifo", "std-cbd", "scoped.fifo"} & {q["name"] for q in native.queues()}


def test_a_group_has_one_message_in_flight_and_groups_go_on_independently(sqs: Any) -> None:
    url = fifo_queue(sqs, "payments.fifo", ContentBasedDeduplication="true")
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": f"e{i}", "MessageBody": body, "MessageGroupId": group}
        for i, (body, group) in enumerate([("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("b2", "b"),
                                           ("c1", "c")])])
    assert [e["Id"] for e in sent["Successful"]] == [f"e{i}" for i in range(6)] and not sent.get("Failed")
    sequence = [int(e["SequenceNumber"]) for e in sent["Successful"]]
    assert sequence == sorted(sequence) and all(len(e["SequenceNumber"]) == 20 for e in sent["Successful"])

    first = receive(sqs, url)
    assert bodies(first) == ["a1", "b1", "c1"], "a receive of 10 takes each group's first message"
    assert [m["Attributes"]["MessageGroupId"] for m in first] == ["a", "b", "c"]
    assert first[0]["Attributes"]["SequenceNumber"] == sent["Successful"][0]["SequenceNumber"]
    assert first[0]["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(b"a1").hexdigest()
    assert receive(sqs, url) == [], "every group has a message in flight"
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("3", "3"), \
        "a2, a3 and b2 wait behind their groups"

    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[1]["ReceiptHandle"])
    assert bodies(receive(sqs, url)) == ["b2"], "b goes on while a waits"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"], VisibilityTimeout=0)
    again = receive(sqs, url)
    assert bodies(again) == ["a1"], "a1 visible again comes before a2"
    assert again[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again[0]["ReceiptHandle"])
    assert bodies(receive(sqs, url)) == ["a2"]


def test_a_duplicate_is_accepted_answered_as_the_first_and_never_delivered(sqs: Any) -> None:
    url = fifo_queue(sqs, "dedupe.fifo")
    assert code_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageDeduplicationId="d") == \
        "MissingParameter"
    assert code_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g") == "InvalidParameterValue"
    assert code_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="with space",
                   MessageDeduplicationId="d") == "InvalidParameterValue"
    assert code_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageGroupId="g",
                   MessageDeduplicationId="d", DelaySeconds=5) == "InvalidParameterValue"
    first = sqs.send_message(QueueUrl=url, MessageBody="pay 5", MessageGroupId="g", MessageDeduplicationId="p-1")
    repeat = sqs.send_message(QueueUrl=url, MessageBody="pay 5", MessageGroupId="g", MessageDeduplicationId="p-1")
    assert (repeat["MessageId"], repeat["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
    entries = [
        {"Id": "one", "MessageBody": "pay 5", "MessageGroupId": "g", "MessageDeduplicationId": "p-1"},
        {"Id": "two", "MessageBody": "pay 6", "MessageGroupId": "g", "MessageDeduplicationId": "p-2"},
        {"Id": "three", "MessageBody": "pay 6", "MessageGroupId": "g", "MessageDeduplicationId": "p-2"},
        {"Id": "bad", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "has space"}]
    for lacking, code in (({"Id": "nogroup", "MessageBody": "x", "MessageDeduplicationId": "n"}, "MissingParameter"),
                          ({"Id": "nodedupe", "MessageBody": "x", "MessageGroupId": "g"}, "InvalidParameterValue")):
        assert code_of(sqs.send_message_batch, QueueUrl=url, Entries=[*entries, lacking]) == code, \
            "the batch is refused whole, as SQS does"
    batch = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    ids = {e["Id"]: e["MessageId"] for e in batch["Successful"]}
    assert ids["one"] == first["MessageId"] and ids["two"] == ids["three"] != first["MessageId"]
    assert [(f["Id"], f["Code"]) for f in batch["Failed"]] == [("bad", "InvalidParameterValue")]
    got = receive(sqs, url)
    assert bodies(got) == ["pay 5"] and got[0]["Attributes"]["MessageDeduplicationId"] == "p-1"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert sqs.send_message(QueueUrl=url, MessageBody="pay 5", MessageGroupId="g",
                            MessageDeduplicationId="p-1")["MessageId"] == first["MessageId"], \
        "within the window also after its delete"
    last = receive(sqs, url)
    assert bodies(last) == ["pay 6"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=last[0]["ReceiptHandle"])
    assert receive(sqs, url) == [], "each duplicate was delivered never"


def test_a_standard_queue_takes_and_shows_a_message_group_and_refuses_a_deduplication_id(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="fair")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": f"m{i}", "MessageBody": f"m{i}", "MessageGroupId": "tenant-7"}
                                                  for i in range(3)])
    got = receive(sqs, url)
    assert bodies(got) == ["m0", "m1", "m2"], "a standard queue holds no group back"
    assert {m["Attributes"]["MessageGroupId"] for m in got} == {"tenant-7"}
    assert not {"SequenceNumber", "MessageDeduplicationId"} & set(got[0]["Attributes"])
    sent = sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert "SequenceNumber" not in sent
    assert code_of(sqs.send_message, QueueUrl=url, MessageBody="x", MessageDeduplicationId="d") == \
        "InvalidParameterValue"


def test_a_message_group_dedupe_scope_de_duplicates_within_each_group(sqs: Any) -> None:
    """High-throughput FIFO (DeduplicationScope messageGroup): the same de-duplication id, given or
    from the body, in two groups is two messages; repeated within a group, one. A receive shows the
    id as it was sent."""
    url = fifo_queue(sqs, "scoped.fifo", DeduplicationScope="messageGroup", FifoThroughputLimit="perMessageGroupId",
                     ContentBasedDeduplication="true")
    assert {k: v for k, v in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"].items()
            if k in ("DeduplicationScope", "FifoThroughputLimit")} == {
        "DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId"}
    ids = [sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId="d")[
        "MessageId"] for group, body in (("a", "a1"), ("b", "b1"), ("a", "a2"))]
    assert ids[0] != ids[1] and ids[2] == ids[0]
    by_body = [sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId=group)["MessageId"]
               for group in ("a", "b", "b")]
    assert len(set(by_body)) == 2 and by_body[1] == by_body[2]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"])["Messages"]
    assert sorted((m["Attributes"]["MessageGroupId"], m["Body"], m["Attributes"]["MessageDeduplicationId"])
                  for m in got) == [("a", "a1", "d"), ("b", "b1", "d")]
    taken = []
    while got:
        taken += [m["Body"] for m in got]
        sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                        for i, m in enumerate(got)])
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert sorted(taken) == ["a1", "b1", "same", "same"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "queue"})
    assert sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="c", MessageDeduplicationId="q")[
        "MessageId"] == sqs.send_message(QueueUrl=url, MessageBody="y", MessageGroupId="d",
                                         MessageDeduplicationId="q")["MessageId"]
    sqs.delete_queue(QueueUrl=url)
