"""``atomq serve`` as a subprocess for the benchmarks: started on a free
loopback port in a temporary data directory, stopped (SIGTERM, then kill
only if it hangs) and its directory removed, even when the bench fails.
Beside it, what every bench shares to fail (BenchError, check, expect), to
report progress, and to start and stop a child process of its own.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests


class BenchError(Exception):
    """Something failed: the figures would be meaningless."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise BenchError(what)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def expect(response: Any, status: int, what: str) -> Any:
    """The JSON body of ``response`` if it has ``status``; BenchError otherwise."""
    if response.status_code != status:
        raise BenchError(f"{what}: HTTP {response.status_code} (expected {status}): {response.text[:300]}")
    return response.json() if response.content else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def die_with_parent() -> None:
    """preexec_fn: SIGTERM the child if this process dies first (Linux), so no node outlives a killed bench."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_child(proc: subprocess.Popen[bytes], timeout: float, hung: str) -> None:
    """SIGTERM, so the child finishes what it does and cleans up after itself; a kill of its process group
    only if it hangs, after ``hung`` on stderr says so."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            progress(hung)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


class ServeNode:
    """One ``atomq serve`` process with its own embedded Valkey, for one bench run."""

    def __init__(self, prefix: str, http_workers: int | None, workers: int | None = None,
                 args: tuple[str, ...] = (), owner_key: str | None = None) -> None:
        self.http_workers = http_workers
        self.workers = workers  # ``--workers N`` execution workers; None: the command's default
        self.args = args  # more flags: ``--redis-url`` and the like, for a node on an outside store
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.data_dir = self.root / "node"
        self.owner_key = owner_key or f"bench-owner-{uuid.uuid4().hex}"
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self, timeout: float = 60.0) -> None:
        """Runs the command and returns once ``/v1/health`` answers."""
        cmd = [sys.executable, "-m", "atomq", "serve", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        if self.http_workers:
            cmd += ["--http-workers", str(self.http_workers)]
        if self.workers is not None:
            cmd += ["--workers", str(self.workers)]
        cmd += self.args
        self._log = open(self.root / "serve.log", "wb")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env={**os.environ, "ATOMQ_OWNER_KEY": self.owner_key},
            start_new_session=True,  # a Ctrl-C reaches the bench only; the bench stops the node
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"atomq serve exited with status {self.proc.returncode} before it answered; "
                                 f"its output ends:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.base}/v1/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"atomq serve did not answer /v1/health within {timeout:.0f} s; "
                                 f"its output ends:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 40.0) -> None:
        """SIGTERM, then wait (the node drains its requests and stops its Valkey); kill only if it hangs."""
        try:
            if self.proc is not None:
                stop_child(self.proc, timeout,
                           f"atomq serve (pid {self.proc.pid}) did not stop within {timeout:.0f} s: killing it")
        finally:
            if self._log is not None:
                self._log.close()
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = (self.root / "serve.log").read_text(errors="replace")
        except OSError:
            return "(no output)"
        return "\n".join(text.splitlines()[-lines:])

    def session(self, key: str) -> requests.Session:
        return keep_alive_session(self.base, key)


def keep_alive_session(base: str, key: str) -> requests.Session:
    """A keep-alive session for one client thread, its connection opened (untimed) by a health check."""
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {key}"
    expect(s.get(f"{base}/v1/health", timeout=30), 200, "health check")
    return s
