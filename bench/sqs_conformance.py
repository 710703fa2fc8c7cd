#!/usr/bin/env python3
"""An outside suite of SQS behaviour against a node: moto's own SQS tests, in moto's server mode,
pointed at `atomq serve` instead of a moto server.

moto (github.com/getmoto/moto) tests its SQS emulation with boto3 under its @mock_aws decorator
(tests/test_sqs/test_sqs.py and test_sqs_message_attributes.py are about SQS alone).
With TEST_SERVER_MODE=true that decorator sends every boto3 client to TEST_SERVER_MODE_ENDPOINT
rather than mocking it, and moto's tests skip what reads moto's insides. This script starts a node
with a tenant, copies the checkout's tests/test_sqs (and the tests package it imports) into a
temporary directory with a small conftest.py, and runs pytest there with --python (an interpreter
with moto, pytest, freezegun and boto3 installed: pip install "moto[server]" pytest freezegun).
The conftest signs with the tenant's SQS pair (moto's decorator would set its own fake keys), gives
moto's account_id fixture the tenant's account (moto's asks STS) and empties the tenant's queues
before each test, as moto's server mode resets its server.

Output: the failures grouped by test file on stderr, and as the LAST stdout line one JSON object with
passed, failed, skipped, errors, total and the failing test ids per file. Nothing of moto is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import requests

from drivers.atomq_http import HttpNode
from drivers.cli import add_http_workers, parser_from_doc
from drivers.run_exit import BenchRun
from drivers.serve_node import check, expect, progress

SUITES = ("test_sqs.py", "test_sqs_message_attributes.py")
"""moto's SQS test files about SQS alone: the others drive IAM, STS, Lambda or CloudFormation too,
or moto's own server (test_server.py)."""
CONFTEST = '''
import os

import pytest
import requests
from moto.core import models


def _atomq_credentials(self):
    """moto's decorator puts fake keys in the environment; the node checks signatures."""
    for name, value in (("AWS_ACCESS_KEY_ID", os.environ["ATOMQ_SQS_ID"]),
                        ("AWS_SECRET_ACCESS_KEY", os.environ["ATOMQ_SQS_SECRET"])):
        self._orig_creds[name] = os.environ.get(name)
        os.environ[name] = value


models.MockAWS._mock_env_variables = _atomq_credentials


@pytest.fixture
def account_id():
    """moto's own fixture asks STS, which a node does not answer: the tenant's SQS account."""
    return os.environ["ATOMQ_ACCOUNT"]


@pytest.fixture(autouse=True)
def _empty_tenant():
    """What moto's server-mode reset does for its own server: no queue of an earlier test."""
    base, headers = os.environ["ATOMQ_URL"], {"Authorization": "Bearer " + os.environ["ATOMQ_KEY"]}
    while True:
        queues = requests.get(base + "/v1/queues", headers=headers, timeout=30).json()["queues"]
        if not queues:
            break
        for queue in queues:
            requests.delete(base + "/v1/queues/" + queue["name"], headers=headers, timeout=30)
    yield
'''


def results(junit: Path) -> dict[str, Any]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failing: dict[str, list[str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "errors"
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
        if outcome in ("failed", "errors"):
            module = case.get("classname", "").rsplit(".", 1)[-1]
            failing.setdefault(module, []).append(case.get("name", ""))
    return {**counts, "total": sum(counts.values()), "failing": failing}


def run(args: Any, bench: BenchRun) -> dict[str, Any]:
    source = Path(args.moto_checkout) / "tests"
    check((source / "test_sqs").is_dir(), f"{source}/test_sqs is not there: give a checkout of getmoto/moto")
    node = HttpNode(args.http_workers)
    bench.at_exit(node.stop)
    node.start()
    pair = expect(requests.get(f"{node.base}/v1/credentials/sqs", timeout=30,
                               headers={"Authorization": f"Bearer {node.tenant_key}"}), 200, "the SQS credentials")
    work = Path(tempfile.mkdtemp(prefix="atomq-sqs-conformance-"))
    bench.at_exit(shutil.rmtree, work, ignore_errors=True)
    (work / "tests").mkdir()
    for name in ("__init__.py", "markers.py"):
        if (source / name).exists():
            shutil.copy(source / name, work / "tests" / name)
    shutil.copytree(source / "test_sqs", work / "tests" / "test_sqs")
    (work / "tests" / "test_sqs" / "conftest.py").write_text(CONFTEST)
    (work / "pytest.ini").write_text("[pytest]\nmarkers =\n    aws_verified\n    requires_docker\n    network\n")
    env = {**os.environ, "TEST_SERVER_MODE": "true", "TEST_SERVER_MODE_ENDPOINT": node.base,
           "MOTO_CALL_RESET_API": "false", "ATOMQ_URL": node.base, "ATOMQ_KEY": node.tenant_key,
           "ATOMQ_SQS_ID": pair["access_key_id"], "ATOMQ_SQS_SECRET": pair["secret_access_key"], "ATOMQ_ACCOUNT": pair["account_id"],
           "AWS_DEFAULT_REGION": "us-east-1"}
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PYTHONPATH"):
        env.pop(name, None)
    progress(f"running moto's SQS tests against {node.base}")
    junit = work / "junit.xml"
    subprocess.run([args.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(work),
                    "--timeout=120", f"--junitxml={junit}", *args.pytest_args,
                    *(f"tests/test_sqs/{name}" for name in SUITES)],
                   cwd=work, env=env, timeout=3600, check=False)
    check(junit.exists(), "pytest wrote no results")
    out = results(junit)
    for module, names in sorted(out["failing"].items()):
        progress(f"{module}: {len(names)} failing: {', '.join(sorted(names))}")
    print(f"{out['passed']} passed, {out['failed']} failed, {out['errors']} errors, {out['skipped']} skipped "
          f"of {out['total']}")
    return out


def main() -> int:
    parser = parser_from_doc(__doc__)
    parser.add_argument("--moto-checkout", required=True, metavar="DIR", help="a checkout of getmoto/moto")
    parser.add_argument("--python", default=sys.executable, metavar="PYTHON",
                        help="the interpreter with moto and pytest installed (default: this one)")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    add_http_workers(parser, 1)
    args = parser.parse_args()
    with BenchRun() as bench:
        print(json.dumps(run(args, bench)))
    return bench.status or 0


if __name__ == "__main__":
    sys.exit(main())
