"""The SigV4 check of SQS requests, against requests signed by botocore's own signer: several
regions, bodies, paths and query strings pass; every tampering, a wrong or unknown key, a stale
date and a missing signature are refused with SQS's error shapes (pure logic, no server)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from atomq.api.sqs import sigv4
from atomq.api.sqs.sigv4 import SignedRequest, verify
from atomq.errors import SqsError

ACCESS = "AQ0123456789ABCDEF0123456789AB"
SECRET = "wJalrXUtnFEMI0K7MDENGbPxRfiCYEXAMPLEKEY0"
SECRETS = {ACCESS: SECRET}


def signed(method: str = "POST", url: str = "http://node.example:61717/", body: bytes = b"{}", *,
           region: str = "us-east-1", service: str = "sqs", secret: str = SECRET, access: str = ACCESS,
           headers: dict[str, str] | None = None, params: dict[str, str] | None = None) -> SignedRequest:
    """A request signed by botocore, as the node receives it (the Host header the HTTP client adds)."""
    request = AWSRequest(method=method, url=url, data=body, params=params or {}, headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues", **(headers or {})})
    SigV4Auth(Credentials(access, secret), service, region).add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    wire = {name.lower(): [value] for name, value in prepared.headers.items()}
    wire["host"] = [parts.netloc]
    return SignedRequest(method, parts.path or "/", parts.query, wire, body)


def check(request: SignedRequest, now: datetime | None = None) -> sigv4.Signature:
    return verify(request, SECRETS.get, now or datetime.now(UTC))


def refused(request: SignedRequest, now: datetime | None = None) -> str:
    with pytest.raises(SqsError) as raised:
        check(request, now)
    return raised.value.shape


def changed(request: SignedRequest, **fields: object) -> SignedRequest:
    return SignedRequest(**{**request.__dict__, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3", "cn-north-1", "atomq-local", "elasticmq"])
def test_a_request_signed_in_any_region_is_taken_with_that_region(region: str) -> None:
    claim = check(signed(region=region, body=b'{"QueueNamePrefix": "or"}'))
    assert (claim.access_key, claim.region, claim.service) == (ACCESS, region, "sqs")


@pytest.mark.parametrize("body", [b"", b"{}", "{\"MessageBody\": \"h\u00e9llo \u2603 \\r\\n\"}".encode(),
                                  b"Action=SendMessage&Version=2012-11-05&MessageBody=a%20b%2Bc&QueueUrl=x",
                                  bytes(range(256)) * 40])
def test_bodies_of_every_kind_are_hashed_as_sent(body: bytes) -> None:
    check(signed(body=body))
    check(signed(body=body, headers={"X-Amz-Content-SHA256": hashlib.sha256(body).hexdigest()}))


@pytest.mark.parametrize(("url", "params"), [
    ("http://node.example:61717/?Action=ListQueues&Version=2012-11-05", None),
    ("http://node.example:61717/", {"Action": "ListQueues", "QueueNamePrefix": "a b+c/d~e*f", "Version": "2012-11-05"}),
    ("http://node.example:61717/123456789012/orders.fifo", {"Action": "ReceiveMessage",
                                                            "AttributeName.2": "All", "AttributeName.1": "SentTimestamp"}),
    ("http://127.0.0.1/123456789012/my-queue/", {"z": "", "a": "\u00e9\u2603", "M": "2"}),
    ("http://[::1]:8080/a/./b/../c//d", {"Empty": ""}),
])
def test_paths_and_query_strings_are_made_canonical_as_the_sdks_make_them(url: str, params: dict[str, str] | None) -> None:
    check(signed("GET", url, b"", params=params))
    check(signed("POST", url, b"Action=ListQueues", params=params))


def test_every_tampering_is_a_signature_that_does_not_match() -> None:
    good = signed(body=b'{"QueueUrl": "http://h/1/a", "MessageBody": "pay 10"}',
                  params={"Action": "SendMessage"})
    check(good)
    headers = dict(good.headers)
    tampered = [
        changed(good, body=b'{"QueueUrl": "http://h/1/a", "MessageBody": "pay 99"}'),
        changed(good, body=good.body + b" "),
        changed(good, method="PUT"),
        changed(good, raw_path="/123/other"),
        changed(good, raw_query="Action=DeleteQueue"),
        changed(good, raw_query=""),
        changed(good, headers={**headers, "x-amz-target": ["AmazonSQS.DeleteQueue"]}),
        changed(good, headers={**headers, "host": ["evil.example:61717"]}),
        changed(good, headers={k: v for k, v in headers.items() if k != "x-amz-target"}),  # a signed header gone
        changed(good, headers={**headers, "x-amz-content-sha256": [hashlib.sha256(b"other").hexdigest()]}),
    ]
    for request in tampered:
        assert refused(request) == "SignatureDoesNotMatch", request
    assert refused(signed(secret=SECRET[:-1] + "1")) == "SignatureDoesNotMatch"
    assert refused(signed(service="sns")) == "SignatureDoesNotMatch"
    # A body whose stated hash is another's: the hash is signed, so the signature holds; the body does not.
    stated = signed(body=b"{}", headers={"X-Amz-Content-SHA256": hashlib.sha256(b"{}").hexdigest()})
    assert refused(changed(stated, body=b'{"a": 1}')) == "SignatureDoesNotMatch"


def test_host_date_and_target_must_be_signed() -> None:
    good = signed()
    auth = good.header("authorization") or ""
    for dropped in ("host;", "x-amz-date", "x-amz-target"):
        header = auth.replace(dropped, "").replace(";;", ";").replace("=;", "=").replace(";,", ",")
        assert dropped.strip(";") not in header.split("SignedHeaders=")[1].split(",")[0]
        assert refused(changed(good, headers={**good.headers, "authorization": [header]})) == "SignatureDoesNotMatch"


def test_unknown_keys_missing_signatures_and_stale_dates_have_their_own_shapes() -> None:
    assert refused(signed(access="AQFFFFFFFFFFFFFFFF")) == "InvalidClientTokenId"
    good = signed()
    assert refused(changed(good, headers={k: v for k, v in good.headers.items() if k != "authorization"})) == \
        "MissingAuthenticationToken"
    for garbage in ("Bearer aq_x", "AWS4-HMAC-SHA256 Credential=x", "AWS AKIA:abc"):
        assert refused(changed(good, headers={**good.headers, "authorization": [garbage]})) == "SignatureDoesNotMatch"
    now = datetime.now(UTC)
    check(good, now + timedelta(minutes=14))
    check(good, now - timedelta(minutes=14))
    assert refused(good, now + timedelta(minutes=16)) == "RequestExpired"
    assert refused(good, now - timedelta(minutes=16)) == "RequestExpired"


def test_the_signature_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[str, str]] = []
    real = sigv4.hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(sigv4.hmac, "compare_digest", spy)
    good = signed()
    check(good)
    assert any(b == (good.header("authorization") or "")[-64:] for _, b in compared)
