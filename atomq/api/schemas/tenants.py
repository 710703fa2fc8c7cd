"""Tenants (accounts) and their API keys."""

from __future__ import annotations

from marshmallow import fields, validate

from atomq import defaults
from atomq.api.schemas.common import NEXT_DOC, Int, ListArgs, Strict

_limit = validate.Range(0, defaults.MAX_EXACT_INT)
_NAME_DOC = {"description": "1 to 128 printable characters (Python's str.isprintable: no control, format, "
                            "separator but space, or unassigned ones)"}


class TenantCreateSchema(Strict):
    name = fields.String(required=True, validate=validate.Length(1, defaults.MAX_TENANT_NAME_CHARS), metadata=_NAME_DOC)
    rate_limit_per_minute = Int(load_default=defaults.TENANT_RATE_LIMIT_PER_MINUTE, validate=_limit)
    disk_quota_bytes = Int(load_default=defaults.TENANT_DISK_QUOTA_BYTES, validate=_limit)
    spark_weight = Int(load_default=defaults.SPARK_WEIGHT, validate=validate.Range(1, defaults.MAX_SPARK_WEIGHT))


class TenantPatchSchema(Strict):
    name = fields.String(validate=validate.Length(1, defaults.MAX_TENANT_NAME_CHARS), metadata=_NAME_DOC)
    rate_limit_per_minute = Int(validate=_limit)
    disk_quota_bytes = Int(validate=_limit)
    spark_weight = Int(validate=validate.Range(1, defaults.MAX_SPARK_WEIGHT))


class TenantSchema(Strict):
    id = fields.String(required=True)
    name = fields.String(required=True)
    rate_limit_per_minute = fields.Integer(required=True, metadata={"description": "0 means no limit"})
    disk_quota_bytes = fields.Integer(required=True, metadata={"description": "0 means no limit"})
    spark_weight = fields.Integer(required=True, metadata={
        "description": "the weight (1 to 1000) of the tenant's Spark FAIR scheduler pool"})
    created_at = fields.Float(required=True)


class TenantUsageSchema(TenantSchema):
    stored_bytes = fields.Integer(required=True, metadata={
        "description": "documents and messages stored, dead letters included; acked ones stop counting at once"})
    messages = fields.Integer(required=True, metadata={"description": "message copies stored"})


class SqsCredentialsSchema(Strict):
    access_key_id = fields.String(required=True, metadata={
        "description": "AQ and the key id in upper case: the AWS access key id of SQS clients"})
    secret_access_key = fields.String(required=True, metadata={
        "description": "40 characters of [A-Za-z0-9], the AWS secret access key; it ends with its API key"})
    account_id = fields.String(required=True, metadata={
        "description": "12 digits, the tenant's own, in its queue URLs and ARNs"})
    endpoint_url = fields.String(required=True, metadata={
        "description": "the endpoint_url an SQS client is given: this node as the request reached it"})


_SQS_DOC = {"description": "the key's SQS credentials (GET /v1/credentials/sqs gives them again)"}


class TenantCreatedSchema(TenantSchema):
    key_id = fields.String(required=True)
    api_key = fields.String(required=True, metadata={"description": "shown only in this response"})
    sqs = fields.Nested(SqsCredentialsSchema, required=True, metadata=_SQS_DOC)


class TenantListArgs(ListArgs):
    name = fields.String(metadata={"description": "only the tenant of this name (names are unique): a list of one, "
                                                  "or empty"})


class TenantListSchema(Strict):
    tenants = fields.List(fields.Nested(TenantSchema), required=True)
    next = fields.String(required=True, allow_none=True, metadata=NEXT_DOC)


class KeyCreatedSchema(Strict):
    key_id = fields.String(required=True)
    api_key = fields.String(required=True, metadata={"description": "shown only in this response"})
    sqs = fields.Nested(SqsCredentialsSchema, required=True, metadata=_SQS_DOC)
