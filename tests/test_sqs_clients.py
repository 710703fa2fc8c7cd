"""Other SQS clients as users run them against a real node: the AWS CLI (``aws sqs --endpoint-url``,
credentials in the environment) and the JavaScript v3 SDK, which checks the bodies' MD5s itself
(this test's script checks the attributes' MD5 with its own implementation of SQS's algorithm).
Each skips, naming what to install, where its tool is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_tenant
from support.waiting import wait_until

JS_SDK = "@aws-sdk/client-sqs@3"


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=1)


@pytest.fixture(scope="module")
def tenant(node: AtomqServe) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    with sqs_tenant(node, "sqs-clients") as made:
        yield made


def aws_cli() -> str:
    found = shutil.which("aws", path=str(Path(sys.executable).parent)) or shutil.which("aws")
    if found is None:
        pytest.skip("the AWS CLI is not installed: pip install awscli (the [test] extra has it)")
    return found


def aws_sqs(node: AtomqServe, pair: dict[str, str], region: str, tmp_path: Path) -> Callable[..., Any]:
    """``aws sqs ...`` against the node with the tenant's pair and no profile of the machine's; its
    JSON answer, the command asserted to succeed."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": pair["access_key_id"], "AWS_SECRET_ACCESS_KEY": pair["secret_access_key"],
           "AWS_DEFAULT_REGION": region, "AWS_CONFIG_FILE": str(tmp_path / "config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials")}
    env.pop("AWS_PROFILE", None)

    def aws(*args: str) -> Any:
        done = subprocess.run([aws_cli(), "sqs", *args, "--endpoint-url", node.url, "--output", "json"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else {}
    return aws


def test_the_aws_cli(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]], tmp_path: Path) -> None:
    native, pair = tenant
    aws = aws_sqs(node, pair, "us-east-2", tmp_path)

    url = aws("create-queue", "--queue-name", "from-cli", "--attributes", "VisibilityTimeout=40")["QueueUrl"]
    assert native.queue("from-cli")["ack_timeout_s"] == 40
    assert url in aws("list-queues", "--queue-name-prefix", "from-")["QueueUrls"]
    aws("send-message", "--queue-url", url, "--message-body", "hello cli", "--message-attributes",
        '{"kind": {"DataType": "String", "StringValue": "greeting"}}')
    aws("send-message-batch", "--queue-url", url, "--entries", "Id=a,MessageBody=one", "Id=b,MessageBody=two")
    attributes = aws("get-queue-attributes", "--queue-url", url, "--attribute-names", "All")["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "3" and attributes["QueueArn"].startswith("arn:aws:sqs:us-east-2:")
    got = aws("receive-message", "--queue-url", url, "--max-number-of-messages", "10",
              "--message-attribute-names", "All")["Messages"]
    assert sorted(m["Body"] for m in got) == ["hello cli", "one", "two"]
    for message in got:
        aws("delete-message", "--queue-url", url, "--receipt-handle", message["ReceiptHandle"])
    aws("tag-queue", "--queue-url", url, "--tags", "team=cli")
    assert aws("list-queue-tags", "--queue-url", url)["Tags"] == {"team": "cli"}
    aws("delete-queue", "--queue-url", url)
    assert "from-cli" not in [q["name"] for q in native.queues()]


def test_the_aws_cli_redrives_a_dead_letter_queue(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]],
                                                   tmp_path: Path) -> None:
    native, pair = tenant
    aws = aws_sqs(node, pair, "eu-west-3", tmp_path)

    dlq = aws("create-queue", "--queue-name", "cli-dlq")["QueueUrl"]
    dlq_arn = aws("get-queue-attributes", "--queue-url", dlq, "--attribute-names", "QueueArn")["Attributes"]["QueueArn"]
    url = aws("create-queue", "--queue-name", "cli-work")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    aws("set-queue-attributes", "--queue-url", url, "--attributes", json.dumps({"RedrivePolicy": policy}))
    assert aws("list-dead-letter-source-queues", "--queue-url", dlq)["queueUrls"] == [url]
    aws("send-message", "--queue-url", url, "--message-body", "fails once")
    aws("receive-message", "--queue-url", url, "--visibility-timeout", "0")
    assert native.queue("cli-dlq")["depth"] == 1 and native.queue("cli-work")["depth"] == 0
    assert aws("start-message-move-task", "--source-arn", dlq_arn)["TaskHandle"]

    def completed() -> bool:
        return bool(aws("list-message-move-tasks", "--source-arn", dlq_arn)["Results"][0]["Status"] == "COMPLETED")
    wait_until(completed, 30, "the move task")
    assert native.queue("cli-work")["depth"] == 1 and native.queue("cli-dlq")["depth"] == 0


def test_the_aws_cli_for_the_other_actions(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]],
                                           tmp_path: Path) -> None:
    """The actions the two tests above leave out, each as the CLI sends it: the receipts it
    changes and deletes in batches, purge, untag, a queue's URL by name and a move task cancelled."""
    native, pair = tenant
    aws = aws_sqs(node, pair, "ap-south-1", tmp_path)

    url = aws("create-queue", "--queue-name", "cli-rest")["QueueUrl"]
    assert aws("get-queue-url", "--queue-name", "cli-rest")["QueueUrl"] == url
    aws("send-message-batch", "--queue-url", url, "--entries", *[f"Id=m{i},MessageBody=body {i}" for i in range(4)])
    got = aws("receive-message", "--queue-url", url, "--max-number-of-messages", "4",
              "--visibility-timeout", "600")["Messages"]
    assert len(got) == 4 and native.queue("cli-rest")["in_flight"] == 4
    first, second, third, fourth = (m["ReceiptHandle"] for m in got)
    aws("change-message-visibility", "--queue-url", url, "--receipt-handle", first, "--visibility-timeout", "0")
    changed = aws("change-message-visibility-batch", "--queue-url", url, "--entries",
                  json.dumps([{"Id": "b", "ReceiptHandle": second, "VisibilityTimeout": 0},
                              {"Id": "c", "ReceiptHandle": third, "VisibilityTimeout": 900}]))
    assert sorted(e["Id"] for e in changed["Successful"]) == ["b", "c"] and not changed.get("Failed")
    assert (native.queue("cli-rest")["depth"], native.queue("cli-rest")["in_flight"]) == (2, 2)
    deleted = aws("delete-message-batch", "--queue-url", url, "--entries",
                  json.dumps([{"Id": "c", "ReceiptHandle": third}, {"Id": "d", "ReceiptHandle": fourth}]))
    assert sorted(e["Id"] for e in deleted["Successful"]) == ["c", "d"] and not deleted.get("Failed")
    assert native.queue("cli-rest")["in_flight"] == 0
    aws("purge-queue", "--queue-url", url)
    assert native.queue("cli-rest")["depth"] == 0

    aws("tag-queue", "--queue-url", url, "--tags", "team=cli,tier=gold")
    aws("untag-queue", "--queue-url", url, "--tag-keys", "tier")
    assert aws("list-queue-tags", "--queue-url", url)["Tags"] == {"team": "cli"}

    dlq = aws("create-queue", "--queue-name", "cli-rest-dlq")["QueueUrl"]
    dlq_arn = aws("get-queue-attributes", "--queue-url", dlq, "--attribute-names", "QueueArn")["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    aws("set-queue-attributes", "--queue-url", url, "--attributes", json.dumps({"RedrivePolicy": policy}))
    aws("send-message-batch", "--queue-url", url, "--entries", *[f"Id=d{i},MessageBody=dead {i}" for i in range(5)])
    aws("receive-message", "--queue-url", url, "--max-number-of-messages", "10", "--visibility-timeout", "0")
    aws("receive-message", "--queue-url", url, "--max-number-of-messages", "10", "--visibility-timeout", "0")
    assert native.queue("cli-rest-dlq")["depth"] == 5
    handle = aws("start-message-move-task", "--source-arn", dlq_arn,
                 "--max-number-of-messages-per-second", "1")["TaskHandle"]
    moved = aws("cancel-message-move-task", "--task-handle", handle)["ApproximateNumberOfMessagesMoved"]
    [cancelled] = aws("list-message-move-tasks", "--source-arn", dlq_arn)["Results"]
    assert (cancelled["Status"], cancelled["ApproximateNumberOfMessagesMoved"]) == ("CANCELLED", moved)
    assert native.queue("cli-rest")["depth"] == moved and native.queue("cli-rest-dlq")["depth"] == 5 - moved
    aws("delete-queue", "--queue-url", url)
    aws("delete-queue", "--queue-url", dlq)


SCRIPT = r"""
const crypto = require("crypto");
const sqs = require("@aws-sdk/client-sqs");
const [endpoint, accessKeyId, secretAccessKey] = process.argv.slice(2);

// SQS's MD5 of message attributes, written here from AWS's description, apart from atomq's.
function md5OfAttributes(attributes) {
  const parts = [];
  const field = (bytes) => { const n = Buffer.alloc(4); n.writeUInt32BE(bytes.length); parts.push(n, bytes); };
  for (const name of Object.keys(attributes).sort()) {
    const a = attributes[name];
    field(Buffer.from(name, "utf8"));
    field(Buffer.from(a.DataType, "utf8"));
    if (a.DataType.startsWith("Binary")) { parts.push(Buffer.from([2])); field(Buffer.from(a.BinaryValue)); }
    else { parts.push(Buffer.from([1])); field(Buffer.from(a.StringValue, "utf8")); }
  }
  return crypto.createHash("md5").update(Buffer.concat(parts)).digest("hex");
}

(async () => {
  const client = new sqs.SQSClient({endpoint, region: "sa-east-1", maxAttempts: 1,
                                    credentials: {accessKeyId, secretAccessKey}});
  const {QueueUrl} = await client.send(new sqs.CreateQueueCommand({QueueName: "from-js"}));
  const attributes = {
    S: {DataType: "String", StringValue: "h\u00e9llo \u2603"},
    N: {DataType: "Number", StringValue: "-42.5"},
    B: {DataType: "Binary", BinaryValue: Uint8Array.from([0, 1, 254, 255])},
  };
  const one = await client.send(new sqs.SendMessageCommand({QueueUrl, MessageBody: "single\r\nline",
                                                            MessageAttributes: attributes}));
  const batch = await client.send(new sqs.SendMessageBatchCommand({QueueUrl, Entries: [
    {Id: "a", MessageBody: "batch a", MessageAttributes: attributes}, {Id: "b", MessageBody: "batch b"}]}));
  const got = await client.send(new sqs.ReceiveMessageCommand({QueueUrl, MaxNumberOfMessages: 10,
    MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"]}));
  await client.send(new sqs.DeleteMessageBatchCommand({QueueUrl, Entries: got.Messages.map(
    (m, i) => ({Id: "m" + i, ReceiptHandle: m.ReceiptHandle}))}));
  const fifo = (await client.send(new sqs.CreateQueueCommand({QueueName: "from-js.fifo",
    Attributes: {FifoQueue: "true", ContentBasedDeduplication: "true"}}))).QueueUrl;
  const fifoSent = await client.send(new sqs.SendMessageBatchCommand({QueueUrl: fifo, Entries: [
    {Id: "a", MessageBody: "first", MessageGroupId: "g", MessageAttributes: attributes},
    {Id: "b", MessageBody: "second", MessageGroupId: "g"}, {Id: "c", MessageBody: "other", MessageGroupId: "h"}]}));
  const fifoGot = await client.send(new sqs.ReceiveMessageCommand({QueueUrl: fifo, MaxNumberOfMessages: 10,
    MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"]}));
  const expected = md5OfAttributes(attributes);
  console.log(JSON.stringify({
    fifoSequence: fifoSent.Successful.map((s) => s.SequenceNumber),
    fifoReceived: fifoGot.Messages.map((m) => [m.Body, m.Attributes.MessageGroupId, m.Attributes.SequenceNumber]),
    sentAttributesMd5: one.MD5OfMessageAttributes === expected,
    batchAttributesMd5: batch.Successful.find((s) => s.Id === "a").MD5OfMessageAttributes === expected,
    batchOk: batch.Successful.length, batchFailed: (batch.Failed || []).length,
    received: got.Messages.map((m) => ({
      body: m.Body, count: m.Attributes.ApproximateReceiveCount,
      attributesMd5: m.MessageAttributes ? m.MD5OfMessageAttributes === md5OfAttributes(m.MessageAttributes) : null,
      binary: m.MessageAttributes ? Array.from(m.MessageAttributes.B.BinaryValue) : null,
      number: m.MessageAttributes ? m.MessageAttributes.N.StringValue : null,
    })),
  }));
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="session")
def js_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the JavaScript v3 SDK's SQS client installed by npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed: the JavaScript SDK test needs Node.js 18 or later")
    where = tmp_path_factory.mktemp("js-sdk")
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent", JS_SDK], cwd=where,
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.skip(f"npm could not install {JS_SDK}: {done.stderr.strip()[-300:]}")
    (where / "check.js").write_text(SCRIPT)
    return where


def test_the_javascript_sdk_checks_what_it_is_answered(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]],
                                                       js_sdk: Path) -> None:
    _, pair = tenant
    done = subprocess.run(["node", "check.js", node.url, pair["access_key_id"], pair["secret_access_key"]],
                          cwd=js_sdk, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr  # the SDK throws when a body's MD5 does not match
    out = json.loads(done.stdout)
    assert out["sentAttributesMd5"] and out["batchAttributesMd5"]
    assert (out["batchOk"], out["batchFailed"]) == (2, 0)
    by_body = {m["body"]: m for m in out["received"]}
    assert set(by_body) == {"single\r\nline", "batch a", "batch b"}
    for body in ("single\r\nline", "batch a"):
        assert by_body[body]["attributesMd5"] is True
        assert by_body[body]["binary"] == [0, 1, 254, 255] and by_body[body]["number"] == "-42.5"
    assert by_body["batch b"]["attributesMd5"] is None and by_body["batch b"]["count"] == "1"
    first, _, other = out["fifoSequence"]
    assert out["fifoReceived"] == [["first", "g", first], ["other", "h", other]], "one message a group"
