"""SQS clients of a served node, as the SQS tests make them: boto3 with the tenant's pair, no retries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from botocore.config import Config

from atomq.client import AtomqClient
from support.served_node import AtomqServe

NO_RETRIES = Config(retries={"max_attempts": 1, "mode": "standard"})


def sqs_client(node: AtomqServe, pair: dict[str, str], region: str = "eu-west-1", **overrides: str) -> Any:
    """A boto3 SQS client of ``node`` signing with ``pair`` (``access``/``secret`` override it)."""
    return boto3.client("sqs", endpoint_url=node.url, region_name=region, config=NO_RETRIES,
                        aws_access_key_id=overrides.get("access", pair["access_key_id"]),
                        aws_secret_access_key=overrides.get("secret", pair["secret_access_key"]))


@contextmanager
def sqs_tenant(node: AtomqServe, name: str) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    """A new tenant of ``node``: its native client, and the SQS pair its key came with."""
    with AtomqClient(node.url, node.owner_key) as owner:
        created = owner.create_tenant(name)
    with AtomqClient(node.url, created["api_key"]) as native:
        yield native, created["sqs"]
