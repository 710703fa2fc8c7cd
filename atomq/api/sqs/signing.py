"""Who signed an SQS request: the request read off the WSGI environment, checked by ``sigv4``
against the access key's stored secret, under the same per-address throttle as bearer keys.

A failure after the key was looked up (an unknown access key id, a wrong signature) counts as
a failed key check of the key id the access key id names (``-`` when it names none), in the
same count as that key presented as a bearer key (``atomq.api.key_checks``). A malformed or
stale request counts nothing: it was refused before any secret could have been tried.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

from flask import Request

from atomq.api.key_checks import KeyCheckThrottle
from atomq.api.sqs import sigv4
from atomq.errors import SqsError
from atomq.tenants.sqs_keys import SqsIdentity, SqsKeys, key_id_of

def signed_request(request: Request) -> sigv4.SignedRequest:
    """The request as it came off the wire: the path still encoded as the client sent it (the
    server's ``RAW_URI`` or ``REQUEST_URI``), the query string as sent, every header value."""
    environ = request.environ
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        raw_path = urlsplit(raw).path if raw.startswith(("http://", "https://")) else raw.partition("?")[0]
    else:
        raw_path = quote(request.path, safe="/~!$&'()*+,;=:@")
    headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        headers.setdefault(name.lower(), []).append(value)
    return sigv4.SignedRequest(request.method, raw_path, environ.get("QUERY_STRING", ""), headers,
                               request.get_data(cache=True))


def authenticate(request: Request, keys: SqsKeys, throttle: KeyCheckThrottle,
                 now: datetime | None = None) -> SqsIdentity:
    """The identity whose secret signed ``request``; SqsError when the signature does not hold,
    RateLimited when its key id failed too often from the request's address."""
    signed = signed_request(request)
    claim = sigv4.parse_authorization(signed)
    address, key_id = request.remote_addr or "", key_id_of(claim.access_key) or "-"
    throttle.check_key_id(address, key_id)
    found: list[SqsIdentity] = []

    def secret_of(access_key: str) -> str | None:
        identity = keys.signer(access_key)
        if identity is None:
            return None
        found.append(identity)
        return identity.secret_access_key

    try:
        sigv4.verify(signed, secret_of, now or datetime.now(UTC))
    except SqsError as exc:
        if exc.shape == sigv4.UNKNOWN_KEY or (exc.shape == sigv4.MISMATCH and found):
            throttle.failed_key_id(address, key_id)
        raise
    return found[0]


def region_of(request: Request) -> str:
    """The region a request was signed for (its credential scope's), once ``authenticate`` took it:
    queue ARNs name it, as SQS's name the region the client uses."""
    match = sigv4.AUTHORIZATION.fullmatch(request.headers.get("Authorization", ""))
    parts = match.group("credential").split("/") if match else []
    return parts[2] if len(parts) == 5 else "us-east-1"
