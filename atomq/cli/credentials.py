"""``atomq credentials``: the key's credentials for other protocols (its SQS pair)."""

from __future__ import annotations

import click

from atomq.cli.connection import key_options
from atomq.cli.output import emit
from atomq.client import AtomqClient


@click.group()
def credentials() -> None:
    """The API key's credentials for other protocols."""


@credentials.command("sqs")
@key_options
def credentials_sqs(c: AtomqClient) -> None:
    """The API key's SQS credentials, and how an SQS client (boto3, the AWS CLI) uses them.
    They end when the key is revoked or rotated."""
    pair = c.sqs_credentials()
    emit(pair, [(pair["access_key_id"], pair["secret_access_key"], pair["account_id"], pair["endpoint_url"])],
         ("ACCESS KEY ID", "SECRET ACCESS KEY", "ACCOUNT", "ENDPOINT URL"))
    if not click.get_current_context().find_root().obj.get("json"):
        click.echo(f"\n{usage_lines(pair)}")


def usage_lines(pair: dict[str, str]) -> str:
    """Example lines for boto3 and the AWS CLI with ``pair`` (any region: the node takes every one)."""
    ident, secret, url = pair["access_key_id"], pair["secret_access_key"], pair["endpoint_url"]
    return (f'boto3.client("sqs", endpoint_url="{url}", region_name="us-east-1",\n'
            f'             aws_access_key_id="{ident}", aws_secret_access_key="{secret}")\n'
            f"AWS_ACCESS_KEY_ID={ident} AWS_SECRET_ACCESS_KEY={secret} AWS_DEFAULT_REGION=us-east-1 \\\n"
            f"  aws sqs list-queues --endpoint-url {url}")
