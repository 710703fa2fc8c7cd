"""``atomq serve`` as a process tree for tests: start it, talk to it, stop or kill all of it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import redis
import requests

from atomq.client import AtomqClient
from atomq.platform.store.data_dir import DataDirLock
from atomq.platform.store.embedded import EmbeddedValkey
from support.audit import assert_audit_clean
from support.ports import free_port
from support.processes import REPO, pid_running
from support.waiting import wait_until

SHUTDOWN_TIMEOUT_S = 5.0
"""``--shutdown-timeout`` of every server here: SIGTERM must be done within it."""


# -- the server process ---------------------------------------------------------------------


class Http:
    """A keep-alive session speaking JSON with one key; ``status`` asserts the answer's status."""

    def __init__(self, url: str, key: str | None, tenant: str | None = None) -> None:
        self.url = url
        self.session = requests.Session()
        if key:
            self.session.headers["Authorization"] = f"Bearer {key}"
        if tenant:
            self.session.headers["X-Atomq-Tenant"] = tenant

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30, **query: Any) -> requests.Response:
        return self.session.request(method, self.url + path, json=body, params=query or None, timeout=timeout)

    def __call__(self, method: str, path: str, body: Any = None, status: int | None = None,
                 timeout: float = 30, **query: Any) -> Any:
        response = self.request(method, path, body, timeout, **query)
        if status is not None:
            assert response.status_code == status, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AtomqServe:
    """One ``atomq serve`` process tree: the master (our Popen), its HTTP workers, its execution workers
    (``atomq worker`` and ``atomq spark-worker``, with the Spark workers' JVMs and Python workers)
    and the embedded Valkey (none with ``--redis-url``)."""

    def __init__(self, data_dir: Path, log_path: Path, owner_key: str, port: int,
                 http_workers: int = 2, args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.data_dir, self.log_path, self.owner_key, self.port = data_dir, log_path, owner_key, port
        self.http_workers, self.args, self.extra_env = http_workers, args, env or {}
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.workers: list[psutil.Process] = []
        self.execution_workers: list[psutil.Process] = []
        self.spark_processes: list[psutil.Process] = []
        """What the Spark workers started: their JVMs and Spark's Python daemons and workers."""
        self.valkey: psutil.Process | None = None
        self.embedded = "--redis-url" not in args

    @property
    def valkey_dir(self) -> Path:
        return self.data_dir / "valkey"

    def start(self, timeout: float = 30, healthy: bool = True) -> None:
        """Runs the command; with ``healthy`` (the default), returns once it serves with all its workers."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATOMQ_")}
        env["ATOMQ_OWNER_KEY"] = self.owner_key
        env.update(self.extra_env)
        command = [sys.executable, "-m", "atomq", "serve", "--data-dir", str(self.data_dir), "--port", str(self.port),
                   "--http-workers", str(self.http_workers), "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
                   *self.args]
        with open(self.log_path, "ab") as log:
            log.write(f"$ {shlex.join(command)}\n".encode())
            log.flush()
            # Its own process group: the master and its workers can be killed together.
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=REPO, env=env, start_new_session=True)
        if not healthy:
            return
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.proc.poll() is not None:
                raise AssertionError(f"atomq serve exited with status {self.proc.returncode} while starting")
            if time.monotonic() > deadline:
                raise AssertionError(f"atomq serve did not answer /v1/health within {timeout} s")
            time.sleep(0.05)
        # Health answers as soon as the first worker serves; the others may still be booting.
        wait_until(lambda: len(self.track_processes()) == self.http_workers, deadline - time.monotonic(),
                   f"{self.http_workers} HTTP workers")

    def track_processes(self) -> list[psutil.Process]:
        """Records the embedded Valkey (its pid read from its pid file while it runs), the workers
        forked so far and the processes their Spark workers run now, so that teardown can check
        each of them is gone; returns the HTTP workers."""
        assert self.proc is not None
        if self.valkey is None and self.embedded:
            self.valkey = psutil.Process(int((self.valkey_dir / "valkey.pid").read_text()))
            assert self.valkey.ppid() == self.proc.pid, "the master owns the embedded Valkey"
        workers = []
        for child in psutil.Process(self.proc.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):  # the master also runs valkey-server --version
                command = child.cmdline()
                if (self.valkey is None or child.pid != self.valkey.pid) and "atomq" in " ".join(command):
                    # HTTP workers are forks of the master (same command); execution workers are `atomq worker`.
                    (workers if "serve" in command else self.execution_workers).append(child)
        self.workers = list({p.pid: p for p in [*self.workers, *workers]}.values())
        self.execution_workers = list({p.pid: p for p in self.execution_workers}.values())
        for worker in self.execution_workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                if "spark-worker" in worker.cmdline():
                    self.spark_processes += worker.children(recursive=True)
        self.spark_processes = list({p.pid: p for p in self.spark_processes}.values())
        return workers

    def _healthy(self) -> bool:
        try:
            return requests.get(self.url + "/v1/health", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pids(self) -> list[int]:
        """Every process of the tree that was seen running."""
        procs = [*self.workers, *self.execution_workers, *self.spark_processes,
                 *([self.valkey] if self.valkey else [])]
        return ([self.proc.pid] if self.proc else []) + [p.pid for p in procs]

    def running(self) -> list[int]:
        return [pid for pid in self.pids() if pid_running(pid)]

    def owner(self) -> Http:
        return Http(self.url, self.owner_key)

    @contextlib.contextmanager
    def tenant_client(self, name: str) -> Iterator[AtomqClient]:
        """The client of a new tenant ``name``, made with the owner key."""
        with AtomqClient(self.url, self.owner_key) as owner:
            key = owner.create_tenant(name)["api_key"]
        with AtomqClient(self.url, key) as client:
            yield client

    def ready(self) -> requests.Response:
        """``GET /v1/ready`` on a connection of its own, which any HTTP worker may answer."""
        return requests.get(self.url + "/v1/ready", headers={"Connection": "close"}, timeout=10)

    def redis(self) -> redis.Redis:
        """A client of the embedded Valkey (its socket and password as the master wrote them)."""
        password = (self.valkey_dir / "password").read_text().strip()
        return redis.Redis(unix_socket_path=str(self.socket_path()), password=password, socket_timeout=5)

    def socket_path(self) -> Path:
        """The embedded Valkey's unix socket, from the config the master wrote."""
        conf = (self.valkey_dir / "valkey.conf").read_text().splitlines()
        (socket_path,) = [shlex.split(line)[1] for line in conf if line.startswith("unixsocket ")]
        return Path(socket_path)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float) -> int | None:
        """The master's exit status, or None when it still runs after ``timeout`` seconds."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill_everything(self) -> None:
        """kill -9: Valkey first (killing the master first would SIGTERM it, a clean shutdown), then
        the master and its workers. The master is stopped first so that it cannot fork new workers."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)
        for p in [*([self.valkey] if self.valkey else []), *self.workers, *self.execution_workers,
                  *self.spark_processes]:
            with contextlib.suppress(psutil.NoSuchProcess):  # psutil refuses a reused pid
                p.send_signal(signal.SIGKILL)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # a stopped process dies of SIGKILL too
            self.proc.wait()
        wait_until(lambda: not self.running(), 10, f"every process of atomq serve to die: {self.running()}")

    def ensure_stopped(self) -> None:
        """Teardown: SIGTERM and wait; past the shutdown time-out, kill the whole tree. Leaves nothing."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            if self.wait(SHUTDOWN_TIMEOUT_S + 3) is None:
                print(f"atomq serve (pid {self.pid}) ignored SIGTERM for {SHUTDOWN_TIMEOUT_S + 3} s: killed")
                self.kill_everything()
        # Valkey shuts itself down when the master dies (parent-death signal); give it that chance.
        if self.valkey is not None:
            with contextlib.suppress(AssertionError):
                wait_until(lambda: not pid_running(self.valkey.pid), 10, "Valkey to exit")  # type: ignore[union-attr]
        if self.running():
            self.kill_everything()
        assert not self.running(), f"processes left behind: {self.running()}"
        self.audit()

    def audit(self) -> None:
        """What ``atomq audit`` checks, on the data the node left, unless another node still
        holds its directory (that one's test audits it when it stops)."""
        if not (self.valkey_dir / "valkey.conf").exists():
            return
        lock = DataDirLock(self.data_dir)
        if not lock.try_acquire("test audit"):
            return
        server = EmbeddedValkey(self.valkey_dir)
        try:
            server.start()
            client = server.client()
            try:
                assert_audit_clean(client)
            finally:
                client.close()
        finally:
            server.stop()
            lock.release()


def tenant_with_messages(node: AtomqServe, *texts: str) -> tuple[str, str]:
    """A new tenant of ``node`` with ``texts`` sent to its queue "orders": the tenant's id and key."""
    with node.owner() as owner:
        created = owner("POST", "/v1/tenants", {"name": "acme"}, 201)
    with Http(node.url, created["api_key"]) as acme:
        acme("PUT", "/v1/queues/orders", {"model": "point_to_point"}, 201)
        acme("POST", "/v1/queues/orders/messages", {"messages": [{"documents": [{"data": t}]} for t in texts]}, 201)
    return created["id"], created["api_key"]


class ServeFactory:
    """The ``serve`` fixtures (conftest.py): each call starts a node with the given flags, on
    ``directory/data`` and a port of its own (``port`` when given; again on a node's directory and
    port with ``same_as=node``); every node has the factory's owner key. ``stop_all`` stops them all, which
    audits their data (``AtomqServe.ensure_stopped``), and shows their logs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.owner_key = f"aq_owner_{secrets.token_urlsafe(24)}"
        self.nodes: list[AtomqServe] = []

    def __call__(self, *args: str, http_workers: int = 2, same_as: AtomqServe | None = None, healthy: bool = True,
                 env: dict[str, str] | None = None, port: int | None = None) -> AtomqServe:
        # Nodes on an outside store (--redis-url) are separate machines: a directory each.
        own = self.directory / (f"data-{len(self.nodes)}" if "--redis-url" in args else "data")
        node = AtomqServe(same_as.data_dir if same_as else own,
                          self.directory / f"serve-{len(self.nodes)}.log", self.owner_key,
                          same_as.port if same_as else port or free_port(), http_workers, args, env)
        self.nodes.append(node)
        node.start(healthy=healthy)
        return node

    def stop_all(self) -> None:
        errors = []
        for node in self.nodes:
            try:
                node.ensure_stopped()
            except AssertionError as e:  # pragma: no cover - reported after every node was stopped
                errors.append(str(e))
        _print_logs(self.nodes)
        assert not errors, errors


def _print_logs(nodes: list[AtomqServe]) -> None:
    """pytest shows a teardown's output only when the test failed: the server logs, for the post-mortem."""
    for node in nodes:
        with contextlib.suppress(OSError):
            print(f"----- {node.log_path.name} (atomq serve, pids {node.pids()}) -----")
            print(node.log_path.read_text(errors="replace"))
    for log in sorted({n.valkey_dir / "valkey.log" for n in nodes}):
        with contextlib.suppress(OSError):
            print(f"----- {log} (last 30 lines) -----")
            print("\n".join(log.read_text(errors="replace").splitlines()[-30:]))
