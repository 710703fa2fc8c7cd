"""A Spark standalone cluster from the installed pyspark: one master and one worker of ``cores``
cores, for the benchmarks and the tests (tests/support/spark_standalone.py takes it from here).

The pip package has no ``sbin/start-master.sh``; ``bin/spark-class`` starts the
daemons in the foreground (it execs ``java``, so the pid is the JVM's). Each
daemon listens on free loopback ports, logs to a file of its own, and the
worker keeps its executors' directories (one per application and executor,
with their ``stdout``/``stderr``) under a work directory of its own.
Stopping kills the two pids this started, nothing else; the executors die with their worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pyspark

START_S = 120
"""Two daemon JVMs on a busy 2-core machine: ~10 s when quiet."""

DAEMON_ENV = {"SPARK_DAEMON_MEMORY": "256m", "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}
"""Small, fast-starting daemon JVMs: they schedule, the executor does the work."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Polls ``predicate`` until it holds; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class StandaloneSpark:
    """A master and one worker (``cores`` cores, ``memory`` for its executors) under ``directory``."""

    def __init__(self, directory: Path, cores: int = 1, memory: str = "1g") -> None:
        self.directory = directory
        self.cores, self.memory = cores, memory
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.work_dir = directory / "work"
        self.spark_home = Path(pyspark.__file__).parent
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def pids(self) -> list[int]:
        """The daemons' pids: the executors and their Python workers are the worker's descendants."""
        return [p.pid for p in self.procs]

    def _daemon(self, name: str, cls: str, *args: str) -> Path:
        log = self.directory / f"{name}.log"
        env = {**os.environ, **DAEMON_ENV, "SPARK_HOME": str(self.spark_home)}
        with log.open("wb") as out:
            self.procs.append(subprocess.Popen([str(self.spark_home / "bin" / "spark-class"), cls, *args],
                                               stdout=out, stderr=subprocess.STDOUT, env=env))
        return log

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(self.port), "--webui-port", str(free_port()))
        worker_log = self._daemon("worker", "org.apache.spark.deploy.worker.Worker", self.master_url,
                                  "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                                  "--webui-port", str(free_port()), "--work-dir", str(self.work_dir))
        wait_until(lambda: "Successfully registered with master" in worker_log.read_text(errors="replace"),
                   START_S, "the standalone worker to register with its master")

    def executor_dirs(self) -> list[Path]:
        """``work/<application id>/<executor id>``: one per executor the worker ever ran."""
        return sorted(p for p in self.work_dir.glob("app-*/*") if p.is_dir())

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} -----\n{p.read_text(errors='replace')}"
                         for p in sorted(self.directory.glob("*.log")))

    def stop(self) -> None:
        """Kills the worker (whose executors die with it), then the master, by their pids."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert all(p.poll() is not None for p in self.procs)
        wait_until(lambda: not self._executors(), 30, "the worker's executors to be gone")

    def _executors(self) -> list[int]:
        """The processes (executor JVMs, their Python workers) still running in an executor's directory."""
        running = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if Path(proc.cwd()).is_relative_to(self.work_dir):
                    running.append(proc.pid)
        return running
