"""``atomq demo`` as a user runs it: a node of its own, the echo-service on Spark, every message accounted for.

Without Java it fails at once and starts nothing; stopped, it leaves no
process behind.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from support.console_page import Transcript, commands
from support.processes import REPO, clean_env, no_java_env, pid_running
from support.waiting import wait_until

pytestmark = pytest.mark.slow


def test_the_demo_routes_every_message_and_reports_the_throughput() -> None:
    done = subprocess.run([sys.executable, "-m", "atomq", "demo", "--messages", "400", "--batch-size", "100"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "listener echo-service deployed on q.Boomi-Message-Echo-Service (engine spark, batch size 100)" in out
    summary = re.search(r"echo: (\d+)  errors: (\d+) .*dead letters: (\d+)  left in tests: (\d+)", out)
    assert summary is not None, out
    echo, errors, dead, left = map(int, summary.groups())
    assert (echo + errors, dead, left) == (400, 0, 0)
    assert errors > 0 and echo > errors  # 80% valid, 20% invalid or not JSON, from a fixed seed
    assert re.search(r"400 messages in [\d.]+ s: [\d.]+ messages/s end to end", out)


def test_on_the_fork_engine_the_execution_that_dies_is_recognised_through_its_checkpoint() -> None:
    """The README's ``atomq demo --engine fork``, as written, prints what the README shows."""
    (command,) = [c for c in commands(REPO / "README.md") if "atomq demo" in c.line]
    assert command.shown is not None and command.line.startswith(".venv/bin/atomq demo ")
    done = subprocess.run([sys.executable, "-m", "atomq", *command.line.split()[1:]], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # How many executions the batches took depends on how fast the sends arrive: the last line's
    # shape only.
    *shown, last = command.shown
    *printed, printed_last = out.splitlines()
    # How many messages the dying execution held depends on how many had arrived when its batch was
    # taken (at most the batch size): those two lines are checked below, by what they must agree on.
    counted = ("the execution that died", "killed mid-batch")
    shown, printed = ([line for line in lines if not any(c in line for c in counted)] for lines in (shown, printed))
    why = Transcript().mismatch(shown, printed)
    assert why is None, why
    assert re.fullmatch(r"\d+ executions, 1 failed; 3000 messages in [\d.]+ s: [\d.]+ messages/s end to end",
                        printed_last), (last, printed_last)
    died = re.search(r"the execution that died had processed (\d+) messages .* (\d+) were recognised through the "
                     r"checkpoint, and each has one output", out)
    assert died is not None, out
    assert died.group(1) == died.group(2) and 0 < int(died.group(1)) <= 500
    summary = re.search(r"echo: (\d+)  errors: (\d+) .*dead letters: (\d+)  left in tests: (\d+)  "
                        r"killed mid-batch: (\d+) \(processed once: yes\)", out)
    assert summary is not None, out
    echo, errors, dead, left, killed = map(int, summary.groups())
    assert (echo + errors, dead, left, killed) == (3000, 0, 0, int(died.group(1)))


def own_processes(pid: int, marker: str) -> list[int]:
    """Processes in the demo's process group, or whose command line names its data directory."""
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            if os.getpgid(proc.pid) == pid or marker in " ".join(proc.info["cmdline"] or []):
                left.append(proc.pid)
    return left


def test_the_demo_without_java_fails_at_once_and_starts_nothing(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    started = time.monotonic()
    demo = subprocess.Popen([sys.executable, "-m", "atomq", "demo", "--messages", "10", "--data-dir", str(data)],
                            env=clean_env(**no_java_env(tmp_path)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = demo.communicate(timeout=60)
    assert demo.returncode != 0, out + err
    assert time.monotonic() - started < 15
    assert "the Spark worker cannot start: no Java runtime: JAVA_HOME is" in err
    assert "--engine fork" in err
    assert own_processes(demo.pid, str(data)) == []
    assert not (data / "node").exists()


@pytest.mark.timeout(300)
def test_the_demo_stopped_by_sigterm_leaves_no_node_or_valkey_behind(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    demo = subprocess.Popen([sys.executable, "-m", "atomq", "demo", "--engine", "fork", "--messages", "50000",
                             "--batch-size", "50", "--data-dir", str(data)],
                            env=clean_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    said: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("warmed up") for line in said):
            assert time.monotonic() < deadline and demo.poll() is None, said
            with contextlib.suppress(queue.Empty):
                said.append(lines.get(timeout=1))
        (master,) = [p for p in psutil.Process(demo.pid).children() if "serve" in p.cmdline()]
        tree = [master, *master.children(recursive=True)]
        names = [p.name() for p in tree]
        assert any(name.startswith("valkey-server") for name in names), names
        # The two execution workers; a work horse one of them forked for an execution (its command line is
        # its worker's) is not a third.
        assert sum("worker" in p.cmdline() and "worker" not in p.parent().cmdline() for p in tree) == 2
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=120) != 0
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
            assert demo.stdout is not None
            demo.stdout.close()  # the test failed: its pipe is not left to a later test's garbage collection
    wait_until(lambda: not [p.pid for p in tree if pid_running(p.pid)], 30, "every process of the demo's node to end")
    assert own_processes(demo.pid, str(data)) == []
    reader.join(timeout=10)  # the demo has exited: its output ends
    assert demo.stdout is not None
    demo.stdout.close()
    while not lines.empty():
        said.append(lines.get())
    assert any(line.startswith("the node's log is kept in") for line in said), said
    assert (data / "serve.log").exists()
