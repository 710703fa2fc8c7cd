"""The SQS actions beyond the basics, through real boto3 against a real node: queue attributes and
what they are natively, visibility, purge, batches, receive options and tags."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from atomq.api.sqs.checksums import md5_of_attributes
from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_client, sqs_tenant
from support.waiting import wait_until


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=2)


@pytest.fixture(scope="module")
def tenant(node: AtomqServe) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    with sqs_tenant(node, "sqs-actions") as made:
        yield made


@pytest.fixture(scope="module")
def sqs(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]]) -> Any:
    return sqs_client(node, tenant[1], region="eu-central-1")


def code_of(call: Any, **kwargs: Any) -> str:
    with pytest.raises(ClientError) as refused:
        call(**kwargs)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] in (400, 403)
    return str(refused.value.response["Error"]["Code"])


def test_queue_attributes_are_the_native_settings(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, pair = tenant
    given = {"VisibilityTimeout": "5", "MessageRetentionPeriod": "120", "MaximumMessageSize": "2048",
             "ReceiveMessageWaitTimeSeconds": "1", "DelaySeconds": "0"}
    url = sqs.create_queue(QueueName="attrs", Attributes=given)["QueueUrl"]
    assert sqs.create_queue(QueueName="attrs", Attributes=given)["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName="attrs", Attributes={"MessageRetentionPeriod": "60"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert {k: got[k] for k in given} == given
    assert got["QueueArn"] == f"arn:aws:sqs:eu-central-1:{pair['account_id']}:attrs"
    assert int(got["CreatedTimestamp"]) == int(got["LastModifiedTimestamp"]) > time.time() - 600
    assert got["ApproximateNumberOfMessages"] == got["ApproximateNumberOfMessagesNotVisible"] == "0"
    queue = native.queue("attrs")
    assert (queue["ack_timeout_s"], queue["message_ttl_s"], queue["on_expire"]) == (5, 120, "discard")
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "7", "ReceiveMessageWaitTimeSeconds": "0"})
    assert native.queue("attrs")["ack_timeout_s"] == 7
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "ReceiveMessageWaitTimeSeconds"]
                                    )["Attributes"] == {"VisibilityTimeout": "7", "ReceiveMessageWaitTimeSeconds": "0"}
    defaults = sqs.get_queue_attributes(QueueUrl=sqs.create_queue(QueueName="plain")["QueueUrl"],
                                        AttributeNames=["All"])["Attributes"]
    assert (defaults["VisibilityTimeout"], defaults["MessageRetentionPeriod"], defaults["MaximumMessageSize"],
            defaults["DelaySeconds"]) == ("30", "345600", "1048576", "0")
    for attributes, code in (({"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
                             ({"RedrivePolicy": '{"maxReceiveCount": "2"}'}, "InvalidParameterValue"),
                             ({"QueueArn": "x"}, "InvalidAttributeName"),
                             ({"DelaySeconds": "901"}, "InvalidAttributeValue"),
                             ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
                             ({"MessageRetentionPeriod": "59"}, "InvalidAttributeValue"),
                             ({"MaximumMessageSize": "x"}, "InvalidAttributeValue")):
        assert code_of(sqs.set_queue_attributes, QueueUrl=url, Attributes=attributes) == code
        assert code_of(sqs.create_queue, QueueName="refused", Attributes=attributes) == code
    assert "refused" not in [q["name"] for q in native.queues()]
    assert code_of(sqs.get_queue_attributes, QueueUrl=url, AttributeNames=["Nope"]) == "InvalidAttributeName"
    with pytest.raises(ClientError):
        sqs.send_message(QueueUrl=url, MessageBody="x" * 2049)
    sqs.send_message(QueueUrl=url, MessageBody="x" * 2040, MessageAttributes={
        "k": {"DataType": "String", "StringValue": "v"}})  # 2040 + 1 + 6 + 1: SQS's measure, under 2048
    sqs.send_message(QueueUrl=url, MessageBody="second")
    sqs.receive_message(QueueUrl=url)
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"])
    assert counts["Attributes"] == {"ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesNotVisible": "1",
                                    "ApproximateNumberOfMessagesDelayed": "0"}


def test_a_visibility_timeout_makes_the_message_visible_at_once(sqs: Any,
                                                                tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = sqs.create_queue(QueueName="expiring", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    first = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"][0]
    (held,) = native.browse("expiring")
    wait_until(lambda: time.time() > held["deadline"] + 0.05, 5, "the visibility timeout to end")
    # A natively made queue would hold it for its first redelivery delay (1 s) first.
    again = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"][0]
    assert again["MessageId"] == first["MessageId"]
    assert (first["Attributes"]["ApproximateReceiveCount"], again["Attributes"]["ApproximateReceiveCount"]) == ("1", "2")


def test_visibility_changes_purge_and_stale_receipts(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = sqs.create_queue(QueueName="visible")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="one", DelaySeconds=0)
    assert code_of(sqs.send_message, QueueUrl=url, MessageBody="later", DelaySeconds=901) == "InvalidParameterValue"
    got = sqs.receive_message(QueueUrl=url)["Messages"][0]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=600)
    assert next(native.browse("visible"))["deadline"] > time.time() + 500
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0)
    again = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert code_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=got["ReceiptHandle"],
                   VisibilityTimeout=5) == "AWS.SimpleQueueService.MessageNotInflight"
    assert code_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle="garbage",
                   VisibilityTimeout=5) == "ReceiptHandleIsInvalid"
    assert code_of(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=again["ReceiptHandle"],
                   VisibilityTimeout=43_201) == "InvalidParameterValue"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])  # stale: succeeds, changes nothing
    assert native.queue("visible")["in_flight"] == 1
    native.send_texts("visible", ["a", "b", "c"])
    sqs.purge_queue(QueueUrl=url)
    queue = native.queue("visible")
    assert queue["depth"] == queue["in_flight"] == 0


def test_batches_report_each_entry(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = sqs.create_queue(QueueName="batches", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    number = {"n": {"DataType": "Number", "StringValue": "3"}}
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "a", "MessageBody": "first", "MessageAttributes": number},
        {"Id": "bad-body", "MessageBody": "nul \x00"},
        {"Id": "b_2", "MessageBody": "second"},
        {"Id": "late", "MessageBody": "x", "DelaySeconds": 901}])
    assert [s["Id"] for s in sent["Successful"]] == ["a", "b_2"]
    assert sent["Successful"][0]["MD5OfMessageAttributes"] == md5_of_attributes(number)
    failed = {f["Id"]: f for f in sent["Failed"]}
    assert failed["bad-body"]["Code"] == "InvalidMessageContents" and failed["bad-body"]["SenderFault"] is True
    assert failed["late"]["Code"] == "InvalidParameterValue"
    assert [m["documents"][0]["data"] for m in list(native.browse("batches"))] == ["first", "second"]
    for entries, code in (([], "AWS.SimpleQueueService.EmptyBatchRequest"),
                          ([{"Id": str(i), "MessageBody": "m"} for i in range(11)],
                           "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
                          ([{"Id": "same", "MessageBody": "m"}] * 2, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
                          ([{"Id": "no.dots", "MessageBody": "m"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
                          ([{"Id": "x", "MessageBody": "m" * 600}, {"Id": "y", "MessageBody": "m" * 600}],
                           "AWS.SimpleQueueService.BatchRequestTooLong")):
        assert code_of(sqs.send_message_batch, QueueUrl=url, Entries=entries) == code
    assert native.queue("batches")["depth"] == 2
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    changed = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "keep", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 300},
        {"Id": "bad", "ReceiptHandle": "nope", "VisibilityTimeout": 300}])
    assert [s["Id"] for s in changed["Successful"]] == ["keep"]
    assert changed["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)] + [
        {"Id": "bad", "ReceiptHandle": "nope"}])
    assert sorted(s["Id"] for s in deleted["Successful"]) == ["0", "1"]
    assert deleted["Failed"][0]["Code"] == "ReceiptHandleIsInvalid"
    assert native.queue("batches")["depth"] == native.queue("batches")["in_flight"] == 0
    again = sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
        {"Id": "gone", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 1}])
    assert again["Failed"][0]["Code"] == "AWS.SimpleQueueService.MessageNotInflight"


def test_receive_options(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    url = sqs.create_queue(QueueName="receiving")["QueueUrl"]
    for name, value in (("MaxNumberOfMessages", 11), ("MaxNumberOfMessages", 0), ("WaitTimeSeconds", 21),
                        ("VisibilityTimeout", 43_201)):
        assert code_of(sqs.receive_message, QueueUrl=url, **{name: value}) == "InvalidParameterValue"
    got: list[Any] = []
    waiting = threading.Thread(target=lambda: got.append((time.monotonic(), sqs.receive_message(
        QueueUrl=url, WaitTimeSeconds=20, MessageAttributeNames=["a.*"],
        MessageSystemAttributeNames=["All"]))))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.3)  # lets the receive start waiting; it gets the message whether it waits or not
    sent_at = time.time()
    attributes = {"a.x": {"DataType": "String", "StringValue": "1"}, "a.y": {"DataType": "Binary",
                  "BinaryValue": b"\x01"}, "b": {"DataType": "String", "StringValue": "2"}}
    sqs.send_message(QueueUrl=url, MessageBody="arrives", MessageAttributes=attributes)
    waiting.join(25)
    (returned_at, answer) = got[0]
    assert returned_at - started < 20  # it returned when the message arrived, not when the wait ended
    (message,) = answer["Messages"]
    assert set(message["MessageAttributes"]) == {"a.x", "a.y"}
    assert message["MD5OfMessageAttributes"] == md5_of_attributes({k: attributes[k] for k in ("a.x", "a.y")})
    system = message["Attributes"]
    assert set(system) == {"ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId"}
    assert abs(int(system["SentTimestamp"]) / 1000 - sent_at) < 60
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    bare = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"][0]
    assert "MD5OfMessageAttributes" not in bare and "MessageAttributes" not in bare and "Attributes" not in bare
    named = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["b"])["Messages"][0]
    assert set(named["MessageAttributes"]) == {"b"}


def test_delay_seconds_per_message_and_per_queue(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = sqs.create_queue(QueueName="delayed", Attributes={"DelaySeconds": "900"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"] == {
        "DelaySeconds": "900"}
    assert native.queue("delayed")["delay_s"] == 900
    waits = sqs.send_message(QueueUrl=url, MessageBody="the queue's 900 s")["MessageId"]
    now = sqs.send_message(QueueUrl=url, MessageBody="at once", DelaySeconds=0)["MessageId"]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=[
        {"Id": "soon", "MessageBody": "one second", "DelaySeconds": 1},
        {"Id": "own", "MessageBody": "its own 600 s", "DelaySeconds": 600},
        {"Id": "bad", "MessageBody": "x", "DelaySeconds": 901}])
    assert sorted(s["Id"] for s in sent["Successful"]) == ["own", "soon"]
    assert sent["Failed"][0]["Code"] == "InvalidParameterValue"
    soon = next(s["MessageId"] for s in sent["Successful"] if s["Id"] == "soon")
    (first,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert first["MessageId"] == now
    # A long poll returns the second's message when it falls due.
    (due,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=20,
                                 AttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert (due["MessageId"], due["Attributes"]["ApproximateReceiveCount"]) == (soon, "1")
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"],
            counts["ApproximateNumberOfMessagesDelayed"]) == ("0", "2", "2")
    assert {m["id"] for m in native.browse("delayed", state="scheduled")} == {waits, next(
        s["MessageId"] for s in sent["Successful"] if s["Id"] == "own")}
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "0"})
    assert native.queue("delayed")["delay_s"] == 0
    assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages") is None
    fifo = sqs.create_queue(QueueName="delays.fifo", Attributes={"FifoQueue": "true",
                                                                "ContentBasedDeduplication": "true"})["QueueUrl"]
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId="g", DelaySeconds=5)
    error = refused.value.response["Error"]  # SQS's words (moto's AWS-verified test has them)
    assert (error["Code"], error["Message"]) == ("InvalidParameterValue", "Value 5 for parameter DelaySeconds is "
                                                 "invalid. Reason: The request include parameter that is not valid "
                                                 "for this queue type.")
    sqs.send_message(QueueUrl=fifo, MessageBody="0 is taken", MessageGroupId="g", DelaySeconds=0)
    sqs.send_message(QueueUrl=fifo, MessageBody="the queue's delay applies", MessageGroupId="g")


def test_a_message_whose_visibility_ran_out_counts_as_visible_at_once(
        sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = sqs.create_queue(QueueName="counted", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    sqs.receive_message(QueueUrl=url)
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"] == {
        "ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "1"}
    (held,) = native.browse("counted")
    wait_until(lambda: time.time() > held["deadline"] + 0.05, 5, "the visibility timeout to end")
    # No receive took it back: it counts as visible all the same (a sweep may have moved it, or not).
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"] == {
        "ApproximateNumberOfMessages": "1", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_a_visibility_of_0_makes_the_message_visible_at_once(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="zero", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="seen twice")
    counts = ["ApproximateReceiveCount"]
    first = sqs.receive_message(QueueUrl=url, AttributeNames=counts)["Messages"][0]
    again = sqs.receive_message(QueueUrl=url, AttributeNames=counts)["Messages"][0]
    assert (first["Attributes"]["ApproximateReceiveCount"], again["Attributes"]["ApproximateReceiveCount"]) == (
        "1", "2"), "the queue's VisibilityTimeout of 0: the next receive takes it"
    url = sqs.create_queue(QueueName="handed-back")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="given back")
    held = sqs.receive_message(QueueUrl=url)["Messages"][0]
    got: list[Any] = []
    waiting = threading.Thread(target=lambda: got.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)))
    waiting.start()
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=held["ReceiptHandle"], VisibilityTimeout=0)
    waiting.join(25)
    assert [m["MessageId"] for m in got[0]["Messages"]] == [held["MessageId"]], "a waiting receive takes it"


def test_tags_and_listing(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    url = sqs.create_queue(QueueName="tagged", tags={"team": "billing"})["QueueUrl"]
    sqs.tag_queue(QueueUrl=url, Tags={"env": "prod", "team": "payments"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "prod", "team": "payments"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["env", "absent"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments"}
    assert code_of(sqs.tag_queue, QueueUrl=url, Tags={f"k{i}": "v" for i in range(50)}) == "InvalidParameterValue"
    assert code_of(sqs.tag_queue, QueueUrl=url, Tags={"aws:x": "v"}) == "InvalidParameterValue"
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "payments"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    for n in range(5):
        sqs.create_queue(QueueName=f"page-{n}")
    names, token = [], None
    while True:
        page = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2, **({"NextToken": token} if token else {}))
        names += [u.rsplit("/", 1)[1] for u in page["QueueUrls"]]
        token = page.get("NextToken")
        if not token:
            break
    assert names == [f"page-{n}" for n in range(5)]


def test_errors_read_as_sqs_words_them(sqs: Any) -> None:
    """Clients and test suites compare SQS's messages word for word (moto's suite, run against a node,
    found these): the common refusals carry SQS's own text, and a bare queue name is a QueueUrl."""
    def error_of(call: Any, **kwargs: Any) -> dict[str, str]:
        with pytest.raises(ClientError) as raised:
            call(**kwargs)
        return dict(raised.value.response["Error"])

    url = sqs.create_queue(QueueName="worded")["QueueUrl"]
    assert error_of(sqs.get_queue_url, QueueName="nowhere")["Message"] == "The specified queue does not exist."
    assert error_of(sqs.send_message, QueueUrl=url.replace("worded", "gone"),
                    MessageBody="x")["Message"] == "The specified queue does not exist."
    assert error_of(sqs.delete_message, QueueUrl=url, ReceiptHandle="nope")["Message"] == \
        "The input receipt handle is invalid."
    assert error_of(sqs.send_message_batch, QueueUrl=url, Entries=[])["Message"] == \
        "There should be at least one SendMessageBatchRequestEntry in the request."
    assert error_of(sqs.send_message_batch, QueueUrl=url, Entries=[{"Id": i, "MessageBody": "m"} for i in (
        "id_1", "id_2", "id_2", "id_1")])["Message"] == "Id id_2 repeated."
    assert error_of(sqs.send_message_batch, QueueUrl=url, Entries=[{"Id": f"id_{i}", "MessageBody": "m"}
                                                                   for i in range(11)])["Message"] == \
        "Maximum number of entries per request are 10. You have sent 11."
    assert error_of(sqs.tag_queue, QueueUrl=url, Tags={})["Message"] == "The request must contain the parameter Tags."
    assert error_of(sqs.untag_queue, QueueUrl=url, TagKeys=[])["Message"] == \
        "Tag keys must be between 1 and 128 characters in length."
    assert error_of(sqs.tag_queue, QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})["Message"] == \
        "Too many tags added for queue worded."
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "a", "ReceiptHandle": "nope"}])
    assert deleted["Failed"][0]["Message"] == 'The input receipt handle "nope" is not a valid receipt handle.'
    too_long = error_of(sqs.send_message_batch, QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "b" * 1_048_577}])
    assert too_long["Message"] == "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."
    sqs.send_message(QueueUrl="worded", MessageBody="by name")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl="worded")["Messages"]] == ["by name"]
    sqs.delete_queue(QueueUrl=url)


def test_a_native_property_sqs_cannot_carry_is_left_out_not_a_failed_receive(
        sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    url = sqs.create_queue(QueueName="native-properties")["QueueUrl"]
    native.send("native-properties", [
        {"documents": [{"data": "odd"}],
         "properties": {"blob": {"DataType": "Binary", "BinaryValue": "abc"}, "ok": "yes"}},
        {"documents": [{"data": "plain"}]}])
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])["Messages"]
    assert sorted(m["Body"] for m in got) == ["odd", "plain"]
    (odd,) = [m for m in got if m["Body"] == "odd"]
    assert odd["MessageAttributes"] == {"ok": {"DataType": "String", "StringValue": "yes"}}
    sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                                                    for i, m in enumerate(got)])
