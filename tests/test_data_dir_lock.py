"""One owner for a data directory, whatever commands are started on it.

A data directory used to have as many owners as commands started on it: a
second ``serve`` or an ``audit`` shut the running node's Valkey down. Now the
first takes ``DIR/atomq.lock`` and the others refuse or, like ``audit``, go
through the running node's store. Everything runs on real Valkey servers and
real ``atomq serve`` processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atomq.errors import DataDirInUse
from atomq.platform.store.data_dir import DataDirLock, read_holder
from atomq.platform.store.embedded import EmbeddedValkey
from support.processes import REPO, pid_running
from support.served_node import Http, ServeFactory, tenant_with_messages
from support.waiting import wait_until


def test_a_forked_child_does_not_keep_the_lock(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    lock.acquire("serve")
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only waits to be killed
        time.sleep(60)
        os._exit(0)
    try:
        with DataDirLock(tmp_path) as other:
            assert not other.try_acquire("audit")
            holder = read_holder(tmp_path)
            assert holder is not None and (holder.pid, holder.command) == (os.getpid(), "serve")
            with pytest.raises(DataDirInUse, match=f"in use by atomq serve \\(pid {os.getpid()}\\)"):
                other.acquire("serve")
            wait_until(lambda: not any(os.path.realpath(f"/proc/{child}/fd/{fd}") == str(lock.path)
                                       for fd in os.listdir(f"/proc/{child}/fd")), 10,
                       "the child to close its copy of the lock")
            lock.release()
            assert pid_running(child)
            assert other.try_acquire("audit"), "the parent's release frees it though its child still runs"
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def _atomq(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {name: v for name, v in os.environ.items() if not name.startswith("ATOMQ_")}
    return subprocess.run([sys.executable, "-m", "atomq", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_second_serve_or_a_selftest_on_a_running_nodes_directory_is_refused(serve: ServeFactory) -> None:
    node = serve()
    node.track_processes()
    assert node.valkey is not None
    valkey_pid = node.valkey.pid
    second = serve(healthy=False)
    assert second.wait(30) not in (None, 0), "the second serve exits with an error"
    log = second.log_path.read_text()
    assert f"in use by atomq serve (pid {node.pid})" in log, log
    selftest = _atomq("selftest", "--data-dir", str(node.data_dir))
    assert selftest.returncode != 0
    assert f"in use by atomq serve (pid {node.pid})" in selftest.stderr, selftest.stderr
    assert pid_running(valkey_pid) and int((node.valkey_dir / "valkey.pid").read_text()) == valkey_pid
    answer = node.ready()
    assert answer.status_code == 200, answer.text


def test_audit_of_a_running_nodes_directory_goes_through_its_store(serve: ServeFactory) -> None:
    node = serve()
    node.track_processes()
    assert node.valkey is not None
    valkey_pid = node.valkey.pid
    tenant, key = tenant_with_messages(node, "one", "two")
    audit = _atomq("audit", "--data-dir", str(node.data_dir))
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert f"{tenant}: consistent" in audit.stdout
    assert f"belongs to atomq serve (pid {node.pid}): auditing through its Valkey" in audit.stderr
    assert pid_running(valkey_pid), "the node's Valkey still runs"
    assert node.ready().status_code == 200
    with Http(node.url, key) as acme:
        got = acme("POST", "/v1/queues/orders/get", {"max": 10}, 200)["messages"]
        assert sorted(m["documents"][0]["data"] for m in got) == ["one", "two"]
        acme("POST", "/v1/queues/orders/ack", {"receipts": [m["receipt"] for m in got]}, 200)


def test_kill_9_of_the_master_leaves_a_directory_the_next_serve_takes_over(serve: ServeFactory) -> None:
    node = serve()
    node.track_processes()
    assert node.valkey is not None
    old_valkey = node.valkey.pid
    tenant, key = tenant_with_messages(node, "kept")
    os.kill(node.pid, signal.SIGKILL)
    assert node.wait(10) is not None
    again = serve()
    again.track_processes()
    assert again.valkey is not None and again.valkey.pid != old_valkey
    assert not pid_running(old_valkey), "no old server runs on the directory"
    holder = read_holder(again.data_dir)
    assert holder is not None and holder.pid == again.pid
    with Http(again.url, key) as acme:
        (got,) = acme("POST", "/v1/queues/orders/get", {"max": 10}, 200)["messages"]
        assert got["documents"][0]["data"] == "kept"
        acme("POST", "/v1/queues/orders/ack", {"receipts": [got["receipt"]]}, 200)
    audit = _atomq("audit", "--data-dir", str(again.data_dir), "--tenant", tenant)
    assert audit.returncode == 0 and f"{tenant}: consistent" in audit.stdout, audit.stdout + audit.stderr


def test_serve_stops_a_valkey_left_running_on_its_directory_and_keeps_its_data(
        serve: ServeFactory, tmp_path: Path) -> None:
    """Where no parent-death signal stopped it (another OS, a server started by hand), a Valkey
    may outlive its node: the next owner of the directory shuts it down (it is ours: its pid file
    and its command line say so) before starting its own on the same files."""
    stray = EmbeddedValkey(tmp_path / "data" / "valkey")
    stray.start()
    stray_pid = stray.pid
    assert stray_pid is not None
    try:
        with stray.client() as c:
            c.set("left-behind", "still here")
        node = serve()
        node.track_processes()
        assert node.valkey is not None and node.valkey.pid != stray_pid
        wait_until(lambda: not pid_running(stray_pid), 10, "the stray Valkey to be shut down")
        with node.redis() as c:
            assert c.get("left-behind") == b"still here"
    finally:
        stray.stop()
    assert node.valkey.is_running(), "stopping the stray's object leaves the node's server alone"
