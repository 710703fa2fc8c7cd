"""AWS Signature Version 4, checked: who signed an SQS request, and that nothing in it changed.

Pure logic, no I/O: ``verify`` takes the request as it came off the wire
(``SignedRequest``), a function that finds an access key's secret, and the
time. It is written here rather than taken from botocore because botocore
only signs: its ``SigV4Auth`` computes a signature for a request it builds,
from the client's side (it adds headers, picks the time, reads the region from
its own configuration), and offers no check of a received request, of its
clock skew, or of which headers the client chose to sign. The steps follow
AWS's "Create a signed AWS API request" (canonical request, string to sign,
signing key), as the SDKs compute them:

- the canonical URI is the path as sent, dot segments removed, percent-encoded
  again (all services but S3 encode twice);
- the canonical query string decodes each name and value (``+`` is a space, as
  in the form encoding botocore sends a signed query in), encodes them again
  (RFC 3986 unreserved characters kept, a space as ``%20``), and sorts by name,
  then value;
- each signed header's values are trimmed, inner runs of spaces made one, and
  joined with commas; ``host`` must be signed, and so must ``x-amz-date``, and
  ``x-amz-target`` when the request has one (it names the action of a JSON
  request, which the body does not: unsigned, a captured SendMessage could be
  replayed as a DeleteQueue of the same queue);
- the payload hash is ``x-amz-content-sha256`` when the client sent it (then it
  must also be the body's SHA-256: else a signed hash would vouch for another
  body) and the body's SHA-256 otherwise;
- the region is the credential scope's own, whatever it is: atomq has no
  regions, so a client of any region is answered; the service must be ``sqs``.

The signature is compared with ``hmac.compare_digest``, so the time taken says
nothing of how much of a forgery was right.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, unquote_plus

from atomq.errors import SqsError

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"
MAX_SKEW_S = 15 * 60
AMZ_DATE_FORM = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z", re.ASCII)
AUTHORIZATION = re.compile(
    rf"{ALGORITHM}\s+Credential=(?P<credential>[^,\s]+)\s*,\s*SignedHeaders=(?P<signed>[^,\s]+)\s*,"
    r"\s*Signature=(?P<signature>[0-9a-fA-F]{64})\s*")
REQUIRED_SIGNED = ("host", "x-amz-date")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

MISSING = "MissingAuthenticationToken"
UNKNOWN_KEY = "InvalidClientTokenId"
MISMATCH = "SignatureDoesNotMatch"
EXPIRED = "RequestExpired"


@dataclass(frozen=True)
class SignedRequest:
    """A request as it came off the wire: ``raw_path`` and ``raw_query`` still percent-encoded,
    ``headers`` with every value of every name (names in any case)."""

    method: str
    raw_path: str
    raw_query: str
    headers: dict[str, list[str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The values of header ``name`` (any case) joined with commas, as SigV4 reads them; None if absent."""
        values = [v for key, vs in self.headers.items() if key.lower() == name for v in vs]
        return ",".join(" ".join(v.split()) for v in values) if values else None


@dataclass(frozen=True)
class Signature:
    """What the Authorization header claims: who signed, for which day, region and service, and how."""

    access_key: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def parse_authorization(request: SignedRequest) -> Signature:
    """The claim of the request's Authorization header; MissingAuthenticationToken without one,
    SignatureDoesNotMatch for one that is not a SigV4 signature of SQS."""
    header = request.header("authorization")
    if not header:
        raise SqsError(MISSING, "the request is not signed: sign it with AWS Signature Version 4, with the "
                                "credentials of GET /v1/credentials/sqs")
    match = AUTHORIZATION.fullmatch(header)
    if match is None:
        raise SqsError(MISMATCH, f"the Authorization header is not {ALGORITHM} Credential=..., SignedHeaders=..., "
                                 "Signature=<64 hex>")
    parts = match.group("credential").split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not re.fullmatch(r"\d{8}", parts[1]) or not parts[2]:
        raise SqsError(MISMATCH, "the credential reads <access key id>/<yyyymmdd>/<region>/sqs/aws4_request")
    if parts[3] != SERVICE:
        raise SqsError(MISMATCH, f"the credential is scoped to service {parts[3]!r}; this endpoint is 'sqs'")
    signed = tuple(match.group("signed").lower().split(";"))
    missing = [name for name in REQUIRED_SIGNED if name not in signed]
    if request.header("x-amz-target") and "x-amz-target" not in signed:
        missing.append("x-amz-target")  # else a captured request could be replayed as another action
    if missing:
        raise SqsError(MISMATCH, f"the signature must cover the headers {', '.join(missing)}")
    return Signature(parts[0], parts[1], parts[2], parts[3], signed, match.group("signature").lower())


def _amz_date(stamp: str) -> datetime:
    """``yyyymmddThhmmssZ`` as a time (read by its fixed positions: ``strptime`` costs more than the
    rest of a signature's check); SignatureDoesNotMatch for anything else."""
    found = AMZ_DATE_FORM.fullmatch(stamp)
    try:
        if found is None:
            raise ValueError(stamp)
        year, month, day, hour, minute, second = (int(part) for part in found.groups())
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise SqsError(MISMATCH, "X-Amz-Date must read yyyymmddThhmmssZ") from None


def request_time(request: SignedRequest, claim: Signature, now: datetime) -> str:
    """The request's X-Amz-Date, checked: its day is the scope's, and it is within 15 minutes of ``now``."""
    stamp = request.header("x-amz-date") or ""
    when = _amz_date(stamp)
    if stamp[:8] != claim.date:
        raise SqsError(MISMATCH, "the credential's date is not the day of X-Amz-Date")
    if abs((now - when).total_seconds()) > MAX_SKEW_S:
        raise SqsError(EXPIRED, f"the request was signed at {when:%Y-%m-%d %H:%M:%S} UTC, more than 15 minutes "
                                f"from the node's clock ({now:%Y-%m-%d %H:%M:%S} UTC)")
    return stamp


def canonical_uri(raw_path: str) -> str:
    """The path as sent, dot segments and repeated slashes removed (RFC 3986 5.2.4, as AWS services
    read it), encoded once more (non-S3 SigV4)."""
    kept: list[str] = []
    for segment in raw_path.split("/"):
        if segment == "..":
            if kept:
                kept.pop()
        elif segment and segment != ".":
            kept.append(segment)
    trailing = "/" if raw_path.endswith("/") and kept else ""
    return quote("/" + "/".join(kept) + trailing, safe="/~")


def canonical_query(raw_query: str) -> str:
    """Each name and value decoded and encoded again (unreserved kept), sorted by name then value."""
    pairs = []
    for item in raw_query.split("&") if raw_query else ():
        name, _, value = item.partition("=")
        pairs.append((quote(unquote_plus(name), safe="-_.~"), quote(unquote_plus(value), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def payload_hash(request: SignedRequest) -> str:
    """The body's SHA-256 hex; a stated ``x-amz-content-sha256`` must be it."""
    actual = hashlib.sha256(request.body).hexdigest() if request.body else EMPTY_SHA256
    stated = request.header("x-amz-content-sha256")
    if stated is not None and not hmac.compare_digest(stated.lower(), actual):
        raise SqsError(MISMATCH, "the body's SHA-256 is not its x-amz-content-sha256 (an unsigned payload is "
                                 "not taken)")
    return actual


def canonical_request(request: SignedRequest, claim: Signature) -> str:
    """The canonical request of AWS's signing steps; SignatureDoesNotMatch if a signed header is absent."""
    lines = []
    for name in sorted(set(claim.signed_headers)):
        value = request.header(name)
        if value is None:
            raise SqsError(MISMATCH, f"the signed header {name!r} is not in the request")
        lines.append(f"{name}:{value}")
    return "\n".join([request.method.upper(), canonical_uri(request.raw_path), canonical_query(request.raw_query),
                      "\n".join(lines) + "\n", ";".join(sorted(set(claim.signed_headers))), payload_hash(request)])


def signature(secret: str, claim: Signature, stamp: str, canonical: str) -> str:
    """The hex signature of ``canonical`` with ``secret`` in the claim's scope."""
    def sign(key: bytes, text: str) -> bytes:
        return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()

    key = sign(f"AWS4{secret}".encode(), claim.date)
    for part in (claim.region, claim.service, "aws4_request"):
        key = sign(key, part)
    to_sign = "\n".join([ALGORITHM, stamp, claim.scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()])
    return hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(request: SignedRequest, secret_of: Callable[[str], str | None], now: datetime) -> Signature:
    """The request's checked claim; raises SqsError (MissingAuthenticationToken, InvalidClientTokenId,
    SignatureDoesNotMatch, RequestExpired) when it does not hold.

    ``secret_of`` finds an access key id's secret (None: no such key); it is called after the
    claim's form and date are checked, so a malformed or stale request costs no lookup.
    """
    claim = parse_authorization(request)
    stamp = request_time(request, claim, now)
    canonical = canonical_request(request, claim)
    secret = secret_of(claim.access_key)
    if secret is None:
        raise SqsError(UNKNOWN_KEY, "the access key id is unknown, or its API key was revoked")
    if not hmac.compare_digest(signature(secret, claim, stamp, canonical), claim.signature):
        raise SqsError(MISMATCH, "the request signature does not match: check the secret access key and that "
                                 "nothing changed the request after it was signed")
    return claim
