"""``GET /v1/credentials/sqs``: the SQS credential pair of the API key that asks.

Only the key itself may ask: the pair is derived from it (``atomq.tenants.sqs_keys``),
and for a key issued before SQS credentials existed this call is when its pair
is stored. The owner key and execution tokens have no pair.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask import request
from flask.views import MethodView

from atomq.api.auth import principal
from atomq.api.blueprint import ApiBlueprint, services
from atomq.api.schemas.common import ErrorSchema
from atomq.api.schemas.tenants import SqsCredentialsSchema
from atomq.errors import Forbidden
from atomq.tenants.sqs_keys import SqsCredentials

blp = ApiBlueprint("credentials", __name__, url_prefix="/v1/credentials",
                   description="Credentials of other protocols (tenant key)")


def endpoint_url() -> str:
    """This node as the request reached it: the ``endpoint_url`` an SQS client is given."""
    return request.host_url.rstrip("/")


def sqs_credentials(credentials: SqsCredentials) -> dict[str, Any]:
    """A key's SQS pair as the API answers it."""
    return {**asdict(credentials), "endpoint_url": endpoint_url()}


@blp.route("/sqs")
class SqsCredentialsView(MethodView):
    @blp.response(200, SqsCredentialsSchema)
    @blp.alt_response(403, schema=ErrorSchema, description="the owner key or an execution token: only an API key "
                                                            "has an SQS pair")
    def get(self) -> dict[str, Any]:
        """The SQS credentials of the API key that signs this request: for ``boto3.client("sqs",
        endpoint_url=..., aws_access_key_id=..., aws_secret_access_key=...)``. They end when the key is
        revoked or rotated."""
        p = principal()
        if p.key_id is None:
            raise Forbidden("only an API key has SQS credentials: ask with the tenant's API key")
        presented = request.headers.get("Authorization", "").partition(" ")[2].strip()
        return sqs_credentials(services().tenants.sqs.presented(presented))
