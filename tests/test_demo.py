"""``atomq demo`` as a user runs it: a node of its own, the echo-service on Spark, every message accounted for."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_the_demo_routes_every_message_and_reports_the_throughput() -> None:
    done = subprocess.run([sys.executable, "-m", "atomq", "demo", "--messages", "400", "--batch-size", "100"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "listener echo-service deployed on tests (engine spark, batch size 100)" in out
    summary = re.search(r"echo: (\d+)  errors: (\d+) .*dead letters: (\d+)  left in tests: (\d+)", out)
    assert summary is not None, out
    echo, errors, dead, left = map(int, summary.groups())
    assert (echo + errors, dead, left) == (400, 0, 0)
    assert errors > 0 and echo > errors  # 80% valid, 20% invalid or not JSON, from a fixed seed
    assert re.search(r"400 messages in [\d.]+ s: [\d.]+ messages/s end to end", out)
