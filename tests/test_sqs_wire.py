"""The SQS front's codecs, without a server: the two request formats read into one form, answers and
errors written as the SDKs read them (botocore's own parser reads the JSON errors), and the MD5s and
body rule exactly as SQS has them."""

from __future__ import annotations

import base64
import hashlib
import json
import xml.etree.ElementTree as ET
from typing import Any

import botocore.session
import pytest
from botocore.parsers import create_parser
from flask import Flask

from atomq.api.sqs import errors, render
from atomq.api.sqs.checksums import check_body, md5_of_attributes, md5_of_body
from atomq.api.sqs.wire import is_json, read_json, read_query
from atomq.errors import NotFound, QuotaExceeded, RateLimited, SqsError, StorageError

SQS = botocore.session.get_session().get_service_model("sqs")
NS = {"q": render.NAMESPACE}


# -- MD5s: vectors computed by SQS itself and published with implementations that check them ----------

@pytest.mark.parametrize(("attributes", "expected"), [
    # AWS's samples, as ydb's SQS (ydb/core/ymq/actor/ut/attributes_md5_ut.cpp) checks them
    ({"test_attribute_name_2": {"DataType": "String", "StringValue": "test_attribute_value_2"},
      "test_attribute_name_1": {"DataType": "String", "StringValue": "test_attribute_value_1"}},
     "d53f3b558fe951154770f25cb63dbba9"),
    ({"test_attribute_name": {"DataType": "Binary", "BinaryValue": b"test_attribute_value"}},
     "23f6bd27ea87aab7dfeadcc9aebee495"),
    # the SQS Developer Guide's example attribute
    ({"SellerName": {"DataType": "String", "StringValue": "Example Store"}}, "cd28f3b68aeee4b2eac9c66f2f694b58"),
    # a Number beside a String (as sqslite's md5_test.go checks against the Go SDK v2's types)
    ({"ordinal": {"DataType": "Number", "StringValue": "1"}, "category": {"DataType": "String", "StringValue": "test"}},
     "d21ae90c49061e927f57df5f5d72be1f"),
])
def test_md5_of_message_attributes_matches_what_sqs_computes(attributes: dict[str, Any], expected: str) -> None:
    assert md5_of_attributes(attributes) == expected


def test_the_md5_encoding_orders_names_as_the_sdks_do_and_types_custom_types_by_their_base() -> None:
    def encoded(name: str, data_type: str, transport: int, value: bytes) -> bytes:
        def field(b: bytes) -> bytes:
            return len(b).to_bytes(4, "big") + b
        return field(name.encode()) + field(data_type.encode()) + bytes([transport]) + field(value)

    attributes = {"\U0001f600": {"DataType": "String.emoji", "StringValue": "x"},
                  "\uff21": {"DataType": "Binary.png", "BinaryValue": b"\x89PNG"},
                  "b": {"DataType": "Number.float", "StringValue": "1.5"}}
    # UTF-16 order: "b" < U+1F600 (surrogates D83D..) < U+FF21, unlike code point order.
    stream = (encoded("b", "Number.float", 1, b"1.5") + encoded("\U0001f600", "String.emoji", 1, b"x")
              + encoded("\uff21", "Binary.png", 2, b"\x89PNG"))
    assert md5_of_attributes(attributes) == hashlib.md5(stream).hexdigest()
    assert md5_of_attributes({}) is None
    assert md5_of_body("h\u00e9llo\r\n") == hashlib.md5("h\u00e9llo\r\n".encode()).hexdigest()


def test_bodies_follow_sqs_character_rule() -> None:
    allowed = "\t\n\r x\u00e9\ud7ff\ue000\ufffd\U00010000\U0010ffff"
    assert check_body(allowed) == allowed
    for bad in ("\x00", "a\x08", "\x1f", "\ufffe", "\uffff", "\ud800", "ok\udfff"):
        with pytest.raises(SqsError) as refused:
            check_body(bad)
        assert refused.value.shape == "InvalidMessageContents"


# -- reading requests ---------------------------------------------------------------------------------

def test_json_requests_are_read_by_their_target() -> None:
    assert is_json({"X-Amz-Target": "AmazonSQS.SendMessage"}) and not is_json({"Content-Type": "text/xml"})
    call = read_json("AmazonSQS.SendMessage", b'{"QueueUrl": "http://h/1/q", "MessageBody": "x"}')
    assert (call.protocol, call.action, call.params) == ("json", "SendMessage", {"QueueUrl": "http://h/1/q",
                                                                                 "MessageBody": "x"})
    assert read_json("AmazonSQS.ListQueues", b"").params == {}
    for target, body, shape in (("AmazonSNS.Publish", b"{}", "UnsupportedOperation"),
                                ("AmazonSQS.ListQueues", b"[1]", "SerializationException"),
                                ("AmazonSQS.ListQueues", b"{nope", "SerializationException"),
                                ("AmazonSQS.ListQueues", b"\xff", "SerializationException")):
        with pytest.raises(SqsError) as refused:
            read_json(target, body)
        assert refused.value.shape == shape


def test_query_requests_fold_their_numbered_parameters_into_the_json_members() -> None:
    """The forms of the SQS API Reference's query examples."""
    batch = read_query({
        "Action": "SendMessageBatch", "Version": "2012-11-05", "QueueUrl": "http://h/123456789012/q",
        "SendMessageBatchRequestEntry.2.Id": "two", "SendMessageBatchRequestEntry.2.MessageBody": "b",
        "SendMessageBatchRequestEntry.1.Id": "one", "SendMessageBatchRequestEntry.1.MessageBody": "a",
        "SendMessageBatchRequestEntry.1.DelaySeconds": "10",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name": "City",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType": "String",
        "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue": "Any City",
        "SendMessageBatchRequestEntry.1.MessageAttribute.2.Name": "Img",
        "SendMessageBatchRequestEntry.1.MessageAttribute.2.Value.DataType": "Binary",
        "SendMessageBatchRequestEntry.1.MessageAttribute.2.Value.BinaryValue": "AAE=",
    })
    assert batch.action == "SendMessageBatch" and batch.params == {"QueueUrl": "http://h/123456789012/q", "Entries": [
        {"Id": "one", "MessageBody": "a", "DelaySeconds": "10", "MessageAttributes": {
            "City": {"DataType": "String", "StringValue": "Any City"},
            "Img": {"DataType": "Binary", "BinaryValue": "AAE="}}},
        {"Id": "two", "MessageBody": "b"}]}
    traced = read_query({"Action": "SendMessage", "MessageBody": "m", "MessageSystemAttribute.1.Name": "AWSTraceHeader",
                         "MessageSystemAttribute.1.Value.DataType": "String",
                         "MessageSystemAttribute.1.Value.StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"})
    assert traced.params == {"MessageBody": "m", "MessageSystemAttributes": {"AWSTraceHeader": {
        "DataType": "String", "StringValue": "Root=1-5759e988-bd862e3fe1be46a994272793"}}}
    created = read_query({"Action": "CreateQueue", "QueueName": "q", "Attribute.1.Name": "VisibilityTimeout",
                          "Attribute.1.Value": "40", "Attribute.2.Name": "DelaySeconds", "Attribute.2.Value": "5",
                          "Tag.1.Key": "team", "Tag.1.Value": "blue"})
    assert created.params == {"QueueName": "q", "Attributes": {"VisibilityTimeout": "40", "DelaySeconds": "5"},
                              "tags": {"team": "blue"}}
    received = read_query({"Action": "ReceiveMessage", "AttributeName.1": "All", "MessageAttributeName.1": "City",
                           "MessageAttributeName.2": "Img.*", "MaxNumberOfMessages": "5"})
    assert received.params == {"AttributeNames": ["All"], "MessageAttributeNames": ["City", "Img.*"],
                               "MaxNumberOfMessages": "5"}
    assert read_query({"Action": "TagQueue", "Tag.1.Key": "k", "Tag.1.Value": "v"}).params == {"Tags": {"k": "v"}}
    for form, shape in (({"Version": "2012-11-05"}, "MissingParameter"),
                        ({"Action": "ReceiveMessage", "AttributeName.x": "All"}, "InvalidParameterValue"),
                        ({"Action": "CreateQueue", "Attribute.1.Value": "1"}, "MissingParameter"),
                        ({"Action": "CreateQueue", "Attribute": "1", "Attribute.1.Name": "x"}, "InvalidParameterValue")):
        with pytest.raises(SqsError) as refused:
            read_query(form)
        assert refused.value.shape == shape


# -- answers and errors -------------------------------------------------------------------------------

def parsed_json_error(response: Any, operation: str) -> dict[str, Any]:
    parser = create_parser("json")
    return parser.parse({"status_code": response.status_code, "headers": {k.lower(): v for k, v in response.headers.items()},
                         "body": response.get_data()}, SQS.operation_model(operation).output_shape)  # type: ignore[no-any-return]


def test_json_errors_read_as_botocore_reads_them() -> None:
    client = botocore.session.get_session().create_client("sqs", region_name="us-east-1",
                                                          aws_access_key_id="a", aws_secret_access_key="b")
    with Flask(__name__).app_context():
        for exc, shape, code, status in (
                (SqsError("QueueDoesNotExist", "no queue q"), "QueueDoesNotExist",
                 "AWS.SimpleQueueService.NonExistentQueue", 400),
                (SqsError("SignatureDoesNotMatch", "no"), "SignatureDoesNotMatch", "SignatureDoesNotMatch", 403),
                (SqsError("TooManyEntriesInBatchRequest", "11"), "TooManyEntriesInBatchRequest",
                 "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400)):
            response = render.error("json", exc, "6a3e6f5e-0000-4000-8000-000000000001")
            assert response.status_code == status and response.content_type == render.JSON_TYPE
            body = json.loads(response.get_data())
            assert body == {"__type": f"com.amazonaws.sqs#{shape}", "message": exc.message}
            assert response.headers["x-amzn-query-error"] == f"{code};Sender"
            parsed = parsed_json_error(response, "GetQueueUrl")
            assert parsed["Error"]["Code"] == code and parsed["Error"]["QueryErrorCode"] == shape
            assert parsed["ResponseMetadata"]["RequestId"] == "6a3e6f5e-0000-4000-8000-000000000001"
            if shape == "QueueDoesNotExist":
                assert client.exceptions.from_code(parsed["Error"]["QueryErrorCode"]) is \
                    client.exceptions.QueueDoesNotExist
        unavailable = render.error("json", errors.as_sqs_error(StorageError("the store is failing over")), "r")
        assert unavailable.status_code == 503 and unavailable.headers["x-amzn-query-error"] == "ServiceUnavailable;Receiver"


def test_native_errors_take_sqs_shapes() -> None:
    assert errors.as_sqs_error(NotFound("queue 'q' does not exist", queue="q")).shape == "QueueDoesNotExist"
    assert errors.as_sqs_error(RateLimited("slow down", retry_after=1)).shape == "RequestThrottled"
    assert errors.as_sqs_error(QuotaExceeded("full", limit=1, used=2)).shape == "OverLimit"
    assert errors.status_of("OverLimit") == 403 and errors.status_of("MissingAuthenticationToken") == 403


def test_query_answers_and_errors_are_xml_that_keeps_every_character() -> None:
    body = "line\r\nnext <&> \u00e9"
    message = {"MessageId": "m1", "ReceiptHandle": "r1", "MD5OfBody": md5_of_body(body), "Body": body,
               "Attributes": {"ApproximateReceiveCount": "1"},
               "MessageAttributes": {"Img": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00").decode()}}}
    with Flask(__name__).app_context():
        response = render.answer("query", "ReceiveMessage", {"Messages": [message, {**message, "MessageId": "m2"}]},
                                 "req-1")
        assert response.content_type.startswith(render.XML_TYPE) and response.headers["x-amzn-RequestId"] == "req-1"
        root = ET.fromstring(response.get_data())
        found = root.findall("q:ReceiveMessageResult/q:Message", NS)
        assert [m.findtext("q:MessageId", namespaces=NS) for m in found] == ["m1", "m2"]
        assert found[0].findtext("q:Body", namespaces=NS) == body  # the \r survives an XML reader
        assert found[0].findtext("q:Attribute/q:Name", namespaces=NS) == "ApproximateReceiveCount"
        assert found[0].findtext("q:MessageAttribute/q:Value/q:DataType", namespaces=NS) == "Binary"
        assert root.findtext("q:ResponseMetadata/q:RequestId", namespaces=NS) == "req-1"
        batch = ET.fromstring(render.answer("query", "DeleteMessageBatch", {
            "Successful": [{"Id": "a"}], "Failed": [{"Id": "b", "SenderFault": True, "Code": "ReceiptHandleIsInvalid",
                                                     "Message": "x"}]}, "r").get_data())
        assert batch.findtext("q:DeleteMessageBatchResult/q:DeleteMessageBatchResultEntry/q:Id", namespaces=NS) == "a"
        assert batch.findtext("q:DeleteMessageBatchResult/q:BatchResultErrorEntry/q:SenderFault", namespaces=NS) == "true"
        empty = ET.fromstring(render.answer("query", "DeleteQueue", {}, "r").get_data())
        assert empty.find("q:DeleteQueueResult", NS) is None
        failed = render.error("query", SqsError("QueueDoesNotExist", "no queue <q>"), "req-2")
        assert failed.status_code == 400
        error = ET.fromstring(failed.get_data())
        assert error.findtext("q:Error/q:Code", namespaces=NS) == "AWS.SimpleQueueService.NonExistentQueue"
        assert error.findtext("q:Error/q:Type", namespaces=NS) == "Sender"
        assert error.findtext("q:Error/q:Message", namespaces=NS) == "no queue <q>"
        assert error.findtext("q:RequestId", namespaces=NS) == "req-2"
