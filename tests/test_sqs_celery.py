"""Celery through kombu's SQS transport against a real node, as a team that keeps its Celery code runs
it: the broker URL ``sqs://ID:SECRET@host:port``, a worker process (``celery worker --pool solo``),
tasks sent by another process. kombu signs its own JSON requests (without ``x-amzn-query-mode``)
and long-polls through its own HTTP client, so this is a client of its own, not boto3 again.
The tasks' effects are read from a file the worker writes; the queue ends empty (every message
deleted, none in flight). Skips, naming what to install, where Celery or kombu's SQS extra is missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atomq.client import AtomqClient
from support.served_node import AtomqServe, ServeFactory
from support.sqs import sqs_tenant
from support.waiting import wait_until

pytest.importorskip("celery", reason="Celery is not installed: pip install celery 'kombu[sqs]' (the [test] extra has them)")
pytest.importorskip("pycurl", reason="kombu's SQS transport needs pycurl: pip install 'kombu[sqs]'")

QUEUE = "celery-jobs"
TASKS = 12

APP = '''
import os

from celery import Celery

app = Celery("sqsapp", broker=os.environ["SQS_BROKER_URL"])
app.conf.broker_transport_options = {"region": "eu-west-3", "wait_time_seconds": 10, "polling_interval": 0.2,
                                     "visibility_timeout": 60}
app.conf.task_default_queue = "%s"
app.conf.worker_hijack_root_logger = False


@app.task
def record(n, word):
    with open(os.environ["RECORD_TO"], "a") as out:
        out.write(f"{n} {word.upper()}\\n")
    return n
''' % QUEUE


@pytest.fixture(scope="module")
def node(serve_for_module: ServeFactory) -> AtomqServe:
    return serve_for_module(http_workers=1)


@pytest.fixture(scope="module")
def tenant(node: AtomqServe) -> Iterator[tuple[AtomqClient, dict[str, str]]]:
    with sqs_tenant(node, "celery-users") as made:
        yield made


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """The worker, ended by its own pid: a warm shutdown first, a kill if it does not end."""
    if worker.poll() is None:
        os.kill(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)


def test_celery_tasks_run_through_the_sqs_transport(node: AtomqServe, tenant: tuple[AtomqClient, dict[str, str]],
                                                    tmp_path: Path) -> None:
    native, pair = tenant
    (tmp_path / "sqsapp.py").write_text(APP)
    record_to = tmp_path / "record.txt"
    env = {**os.environ, "SQS_BROKER_URL": f"sqs://{pair['access_key_id']}:{pair['secret_access_key']}@127.0.0.1:"
                                            f"{node.port}",
           "RECORD_TO": str(record_to), "PYTHONPATH": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "config"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials")}
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        env.pop(name, None)

    def send(script: str) -> None:
        sender = subprocess.run([sys.executable, "-c", "from sqsapp import record\n" + script], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=60, check=False)
        assert sender.returncode == 0, sender.stderr

    def recorded(count: int) -> bool:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        return record_to.exists() and len(record_to.read_text().splitlines()) >= count

    send(f"for n in range({TASKS // 2}): record.delay(n, 'task')")
    assert native.queue(QUEUE)["model"] == "point_to_point"
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "sqsapp", "worker", "--pool", "solo",
                               "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
                               "-Q", QUEUE], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: recorded(TASKS // 2), 60, "the worker to run the tasks sent before it started")
        # Sent while the worker long-polls (its wait of 10 s is under kombu's HTTP time-out of 20 s);
        # one with a MessageGroupId, which kombu passes on and a standard queue takes.
        send(f"for n in range({TASKS // 2}, {TASKS - 1}): record.delay(n, 'task')\n"
             f"record.apply_async(({TASKS - 1}, 'task'), MessageGroupId='tenant-7')")
        wait_until(lambda: recorded(TASKS), 60, "the worker to run the tasks sent while it waited")
        assert sorted(record_to.read_text().splitlines()) == sorted(f"{n} TASK" for n in range(TASKS))

        def empty() -> bool:
            info: dict[str, Any] = native.queue(QUEUE)
            return info["depth"] == 0 and info["in_flight"] == 0 and info["dead_letters"] == 0

        wait_until(empty, 30, f"queue {QUEUE} to end empty")
    finally:
        _stop(worker)
        log.close()
    worker_log = (tmp_path / "worker.log").read_text()
    assert worker_log.count("succeeded in") == TASKS and "ERROR/" not in worker_log, worker_log
