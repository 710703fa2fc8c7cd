"""CPU seconds of process trees, read from /proc (through psutil), for a figure per CPU-second.

A tree's CPU is every live process's own user and system time plus what its children that
ended and were waited for spent (``cutime``/``cstime``): a fork engine's work horses, which
live for one execution each, are counted through their worker. Read at the start and the end
of a timed run, the difference is what the tree spent in it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import psutil

ENGINE_COMMANDS = (("atomq", "worker"), ("atomq", "spark-worker"))
"""A node's execution workers (``-m atomq worker``, ``-m atomq spark-worker``): its engine's roots."""


def _tree(pids: Iterable[int]) -> list[psutil.Process]:
    out: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for proc in (root, *root.children(recursive=True)):
                out.setdefault(proc.pid, proc)
    return list(out.values())


def tree_cpu_s(pids: Iterable[int]) -> float:
    """CPU seconds the processes ``pids`` and all their descendants spent so far."""
    total = 0.0
    for proc in _tree(pids):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def engine_pids(node_pid: int) -> list[int]:
    """The node's execution workers: its children that run ``atomq worker`` or ``atomq spark-worker``
    (a Spark worker's tree holds its driver JVM and, on local masters, the executors' Python workers)."""
    out = []
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(node_pid).children():
            with contextlib.suppress(psutil.Error):
                command = child.cmdline()
                if any(_runs(command, words) for words in ENGINE_COMMANDS):
                    out.append(child.pid)
    return out


def _runs(command: list[str], words: tuple[str, ...]) -> bool:
    return any(tuple(command[i:i + len(words)]) == words for i in range(len(command)))


class CpuMeter:
    """What a node's engine (its execution workers, and a cluster's daemons when given) and the rest
    of the node (HTTP workers, Valkey, the supervisor) spent between :meth:`start` and :meth:`end`."""

    def __init__(self, cluster_pids: Iterable[int] = ()) -> None:
        self.cluster_pids = list(cluster_pids)
        self._at_start: tuple[float, float] | None = None
        self.engine_s = 0.0
        self.node_s = 0.0

    def _read(self, node_pid: int) -> tuple[float, float]:
        engine = tree_cpu_s([*engine_pids(node_pid), *self.cluster_pids])
        return engine, tree_cpu_s([node_pid]) - tree_cpu_s(engine_pids(node_pid))

    def __call__(self, phase: str, node_pid: int) -> None:
        """``Demo``'s ``timed`` callback."""
        if phase == "start":
            self._at_start = self._read(node_pid)
        elif self._at_start is not None:
            engine, node = self._read(node_pid)
            self.engine_s, self.node_s = engine - self._at_start[0], node - self._at_start[1]
