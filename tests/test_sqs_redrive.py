"""SQS's dead letter queues through real boto3 against a real node: RedrivePolicy and
RedriveAllowPolicy as the native dead_letter_queue, ListDeadLetterSourceQueues, and message move
tasks that bring dead letters back, at a rate, cancelled at once; one tenant's queues are no
other's, by name or ARN."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_client, sqs_tenant
from support.waiting import wait_until

REGION = "ap-south-1"


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=1)


@pytest.fixture(scope="module")
def tenant(node: AtomqServe) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    with sqs_tenant(node, "sqs-redrive") as made:
        yield made


@pytest.fixture(scope="module")
def sqs(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]]) -> Any:
    return sqs_client(node, tenant[1], region=REGION)


def error_of(call: Any, **kwargs: Any) -> tuple[str, str, int]:
    with pytest.raises(ClientError) as refused:
        call(**kwargs)
    response = refused.value.response
    return response["Error"]["Code"], response["Error"]["Message"], response["ResponseMetadata"]["HTTPStatusCode"]


def arn_of(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def redrive(target_arn: str, count: int) -> dict[str, str]:
    return {"RedrivePolicy": json.dumps({"deadLetterTargetArn": target_arn, "maxReceiveCount": count})}


def dead_letters(sqs: Any, url: str, *bodies: str) -> None:
    """Sends ``bodies`` to ``url`` (maxReceiveCount 1) and gives each receive back at once: each
    moves to its dead letter queue."""
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes={
            "origin": {"DataType": "String", "StringValue": url.rsplit("/", 1)[1]}})
    for _ in bodies:
        assert len(sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]) == 1


def depth(sqs: Any, url: str) -> int:
    return int(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"]["ApproximateNumberOfMessages"])


def test_a_redrive_policy_is_the_native_dead_letter_queue(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]
                                                          ) -> None:
    native, pair = tenant
    dlq = sqs.create_queue(QueueName="policy-dlq")["QueueUrl"]
    dlq_arn = arn_of(sqs, dlq)
    assert dlq_arn == f"arn:aws:sqs:{REGION}:{pair['account_id']}:policy-dlq"
    url = sqs.create_queue(QueueName="policy-src", Attributes=redrive(dlq_arn, 3))["QueueUrl"]
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert got == {"RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})}
    assert "RedrivePolicy" in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (native.queue("policy-src")["dead_letter_queue"], native.queue("policy-src")["max_redeliveries"]) == (
        "policy-dlq", 2)
    assert sqs.create_queue(QueueName="policy-src", Attributes=redrive(dlq_arn, 3))["QueueUrl"] == url
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName="policy-src", Attributes=redrive(dlq_arn, 4))
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(
        {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})})
    assert json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"][
        "RedrivePolicy"])["maxReceiveCount"] == 5
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
    assert native.queue("policy-src")["dead_letter_queue"] == ""
    native.put_queue("fanout", model="publish_subscribe")
    account = pair["account_id"]
    for policy, words in (
            ({"maxReceiveCount": 2}, "deadLetterTargetArn"),
            ({"deadLetterTargetArn": dlq_arn}, "maxReceiveCount"),
            ({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1001}, "maxReceiveCount"),
            ({"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{account}:nowhere", "maxReceiveCount": 1},
             "does not exist"),
            ({"deadLetterTargetArn": f"arn:aws:sqs:{REGION}:{account}:fanout", "maxReceiveCount": 1},
             "publish/subscribe"),
            ({"deadLetterTargetArn": arn_of(sqs, url), "maxReceiveCount": 1}, "itself"),
            ("not json", "JSON")):
        value = policy if isinstance(policy, str) else json.dumps(policy)
        code, message, status = error_of(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedrivePolicy": value})
        assert (code, status) == ("InvalidParameterValue", 400) and words in message, message
        assert "for parameter RedrivePolicy is invalid" in message
    assert error_of(sqs.create_queue, QueueName="never", Attributes=redrive(
        f"arn:aws:sqs:{REGION}:{account}:nowhere", 1))[0] == "InvalidParameterValue"
    assert "never" not in [q["name"] for q in native.queues()]


def test_a_message_received_max_receive_count_times_lands_in_the_target_once(
        sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    dlq = sqs.create_queue(QueueName="orders-dlq")["QueueUrl"]
    url = sqs.create_queue(QueueName="orders", Attributes=redrive(arn_of(sqs, dlq), 2))["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="order 1", MessageAttributes={
        "kind": {"DataType": "String", "StringValue": "order"}})["MessageId"]
    for receive in (1, 2):  # each receive given back at once (visibility 0) counts
        [got] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, AttributeNames=["All"])["Messages"]
        assert got["MessageId"] == sent and got["Attributes"]["ApproximateReceiveCount"] == str(receive)
    assert "Messages" not in sqs.receive_message(QueueUrl=url), "past maxReceiveCount: in the dead letter queue"
    assert depth(sqs, url) == 0 and depth(sqs, dlq) == 1
    [dead] = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"], MessageAttributeNames=["All"])["Messages"]
    assert (dead["MessageId"], dead["Body"]) == (sent, "order 1")
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == arn_of(sqs, url)
    assert dead["Attributes"]["ApproximateReceiveCount"] == "1"
    assert dead["MessageAttributes"] == {"kind": {"DataType": "String", "StringValue": "order"}}, "as it was sent"
    [natively] = native.browse("orders-dlq")
    assert natively["properties"]["dead_letter_reason"] == "max receives"
    sqs.delete_message(QueueUrl=dlq, ReceiptHandle=dead["ReceiptHandle"])
    assert depth(sqs, dlq) == 0 and native.queue("orders")["dead_letters"] == 0


def test_a_redrive_allow_policy_decides_which_queues_may_name_it(sqs: Any,
                                                                 tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    native, _ = tenant
    dlq = sqs.create_queue(QueueName="guarded-dlq", Attributes={"RedriveAllowPolicy": json.dumps(
        {"redrivePermission": "denyAll"})})["QueueUrl"]
    dlq_arn = arn_of(sqs, dlq)
    src = sqs.create_queue(QueueName="guarded-src")["QueueUrl"]
    other = sqs.create_queue(QueueName="guarded-other")["QueueUrl"]
    code, message, _ = error_of(sqs.set_queue_attributes, QueueUrl=src, Attributes=redrive(dlq_arn, 1))
    assert code == "InvalidParameterValue" and "RedriveAllowPolicy" in message
    allow = json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [arn_of(sqs, src)]})
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": allow})
    assert sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["RedriveAllowPolicy"])["Attributes"] == {
        "RedriveAllowPolicy": allow}
    sqs.set_queue_attributes(QueueUrl=src, Attributes=redrive(dlq_arn, 1))
    assert error_of(sqs.set_queue_attributes, QueueUrl=other, Attributes=redrive(dlq_arn, 1))[0] == \
        "InvalidParameterValue"
    with pytest.raises(Exception, match="RedriveAllowPolicy"):  # the native setting is held to it too
        native.put_queue("guarded-other", dead_letter_queue="guarded-dlq")
    for bad in ({"redrivePermission": "some"}, {"redrivePermission": "byQueue"},
                {"redrivePermission": "allowAll", "sourceQueueArns": [arn_of(sqs, src)]}):
        assert error_of(sqs.set_queue_attributes, QueueUrl=dlq, Attributes={
            "RedriveAllowPolicy": json.dumps(bad)})[0] == "InvalidParameterValue"
    sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": ""})
    sqs.set_queue_attributes(QueueUrl=other, Attributes=redrive(dlq_arn, 1))
    listed = sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"]
    assert sorted(u.rsplit("/", 1)[1] for u in listed) == ["guarded-other", "guarded-src"]
    page = sqs.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=1)
    assert [u.rsplit("/", 1)[1] for u in page["queueUrls"]] == ["guarded-other"] and page["NextToken"]
    rest = sqs.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=1, NextToken=page["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in rest["queueUrls"]] == ["guarded-src"]
    assert sqs.list_dead_letter_source_queues(QueueUrl=src)["queueUrls"] == []


def test_a_move_task_brings_each_dead_letter_back_to_its_source(sqs: Any,
                                                                tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    dlq = sqs.create_queue(QueueName="back-dlq")["QueueUrl"]
    dlq_arn = arn_of(sqs, dlq)
    first = sqs.create_queue(QueueName="back-one", Attributes=redrive(dlq_arn, 1))["QueueUrl"]
    second = sqs.create_queue(QueueName="back-two", Attributes=redrive(dlq_arn, 1))["QueueUrl"]
    dead_letters(sqs, first, "1a", "1b", "1c")
    dead_letters(sqs, second, "2a", "2b")
    assert depth(sqs, dlq) == 5
    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]

    def finished() -> bool:
        return sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] != "RUNNING"
    wait_until(finished, 30, "the move task to finish")
    [done] = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"]
    assert {k: v for k, v in done.items() if k != "StartedTimestamp"} == {
        "Status": "COMPLETED", "SourceArn": dlq_arn, "ApproximateNumberOfMessagesMoved": 5,
        "ApproximateNumberOfMessagesToMove": 5}
    assert depth(sqs, dlq) == 0 and depth(sqs, first) == 3 and depth(sqs, second) == 2
    got = sqs.receive_message(QueueUrl=first, MaxNumberOfMessages=10, AttributeNames=["All"],
                              MessageAttributeNames=["All"])["Messages"]
    assert sorted(m["Body"] for m in got) == ["1a", "1b", "1c"]
    assert all("DeadLetterQueueSourceArn" not in m["Attributes"] for m in got)
    assert all(m["MessageAttributes"] == {"origin": {"DataType": "String", "StringValue": "back-one"}} for m in got)
    code, message, _ = error_of(sqs.cancel_message_move_task, TaskHandle=handle)
    assert code == "InvalidParameterValue" and "RUNNING" in message


def test_a_move_task_at_a_rate_is_cancelled_at_once(sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    dlq = sqs.create_queue(QueueName="slow-dlq")["QueueUrl"]
    dlq_arn = arn_of(sqs, dlq)
    src = sqs.create_queue(QueueName="slow-src", Attributes=redrive(dlq_arn, 1))["QueueUrl"]
    retry = sqs.create_queue(QueueName="slow-retry")["QueueUrl"]
    dead_letters(sqs, src, *[f"m{i}" for i in range(10)])
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=arn_of(sqs, retry),
                                         MaxNumberOfMessagesPerSecond=1)["TaskHandle"]
    code, message, _ = error_of(sqs.start_message_move_task, SourceArn=dlq_arn)
    assert code == "InvalidParameterValue" and "already a task running" in message
    [running] = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    assert (running["Status"], running["TaskHandle"], running["MaxNumberOfMessagesPerSecond"],
            running["DestinationArn"]) == ("RUNNING", handle, 1, arn_of(sqs, retry))
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 0 <= moved < 10
    # Another task, started after the cancel, completes: the maintenance has run since, and moved no more.
    other_dlq = sqs.create_queue(QueueName="slow-other-dlq")["QueueUrl"]
    other_arn = arn_of(sqs, other_dlq)
    dead_letters(sqs, sqs.create_queue(QueueName="slow-other", Attributes=redrive(other_arn, 1))["QueueUrl"], "x")
    sqs.start_message_move_task(SourceArn=other_arn)
    wait_until(lambda: sqs.list_message_move_tasks(SourceArn=other_arn)["Results"][0]["Status"] == "COMPLETED", 30,
               "the later task")
    [cancelled] = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    assert (cancelled["Status"], cancelled["ApproximateNumberOfMessagesMoved"]) == ("CANCELLED", moved)
    assert "TaskHandle" not in cancelled
    assert depth(sqs, retry) == moved and depth(sqs, dlq) == 10 - moved


def test_move_task_refusals_are_sqs_words(sqs: Any, node: AtomqServe,
                                          tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    _, pair = tenant
    plain = sqs.create_queue(QueueName="refusals-plain")["QueueUrl"]
    plain_arn = arn_of(sqs, plain)
    assert error_of(sqs.start_message_move_task, SourceArn=plain_arn) == (
        "InvalidParameterValue", "Source queue must be configured as a Dead Letter Queue.", 400)
    dlq_arn = arn_of(sqs, sqs.create_queue(QueueName="refusals-dlq")["QueueUrl"])
    sqs.create_queue(QueueName="refusals-src", Attributes=redrive(dlq_arn, 1))
    missing = f"arn:aws:sqs:{REGION}:{pair['account_id']}:refusals-nowhere"
    assert error_of(sqs.start_message_move_task, SourceArn=dlq_arn, DestinationArn=missing) == (
        "ResourceNotFoundException", "The resource that you specified for the DestinationArn parameter doesn't "
                                     "exist.", 404)
    assert error_of(sqs.start_message_move_task, SourceArn="not-an-arn")[0] == "InvalidParameterValue"
    assert error_of(sqs.start_message_move_task, SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=501)[0] == \
        "InvalidParameterValue"
    assert error_of(sqs.list_message_move_tasks, SourceArn=missing)[0] == "ResourceNotFoundException"
    assert sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"] == []
    assert error_of(sqs.cancel_message_move_task, TaskHandle="garbage") == (
        "InvalidParameterValue", "Value for parameter TaskHandle is invalid.", 400)
    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    unknown = {**json.loads(base64.urlsafe_b64decode(handle)), "taskId": "0" * 32}
    assert error_of(sqs.cancel_message_move_task, TaskHandle=_encode(unknown)) == (
        "ResourceNotFoundException", "Task does not exist.", 404)
    # Another tenant knows neither the queues (by ARN, with its own account or this one's) nor the task.
    with sqs_tenant(node, "sqs-redrive-other") as (_, theirs):
        stranger = sqs_client(node, theirs, region=REGION)
        their_dlq = stranger.create_queue(QueueName="refusals-dlq")["QueueUrl"]
        assert error_of(stranger.list_message_move_tasks, SourceArn=dlq_arn)[0] == "ResourceNotFoundException"
        assert error_of(stranger.cancel_message_move_task, TaskHandle=handle)[0] == "ResourceNotFoundException"
        code, message, _ = error_of(stranger.create_queue, QueueName="theirs", Attributes=redrive(dlq_arn, 1))
        assert code == "InvalidParameterValue" and "does not exist" in message
        assert error_of(sqs.set_queue_attributes, QueueUrl=plain, Attributes=redrive(arn_of(stranger, their_dlq), 1)
                        )[0] == "InvalidParameterValue"
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=plain, AttributeNames=["RedrivePolicy"])


def _encode(held: dict[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(held).encode()).decode()


def test_a_fifo_queues_dead_letter_queue_is_a_fifo_queue_and_keeps_the_group(
        sqs: Any, tenant: tuple[AtomqClient, dict[str, str]]) -> None:
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    dlq = sqs.create_queue(QueueName="pay-dlq.fifo", Attributes=fifo)["QueueUrl"]
    standard_arn = arn_of(sqs, sqs.create_queue(QueueName="pay-standard-dlq")["QueueUrl"])
    code, message, _ = error_of(sqs.create_queue, QueueName="pay.fifo", Attributes={**fifo,
                                                                                 **redrive(standard_arn, 1)})
    assert code == "InvalidParameterValue" and "same type" in message
    assert error_of(sqs.create_queue, QueueName="pay-plain", Attributes=redrive(arn_of(sqs, dlq), 1))[0] == \
        "InvalidParameterValue"
    url = sqs.create_queue(QueueName="pay.fifo", Attributes={**fifo, **redrive(arn_of(sqs, dlq), 1)})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="debit", MessageGroupId="acct-1")
    assert len(sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]) == 1
    [dead] = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"]
    assert (dead["Body"], dead["Attributes"]["MessageGroupId"]) == ("debit", "acct-1")
