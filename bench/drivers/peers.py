"""The peer brokers a bench compares with (RabbitMQ, NATS JetStream): each runs where it answers, and a
line says why one was left out otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from atomq.platform.store.connection import redact_url

from .run_exit import BenchRun
from .serve_node import progress


class Broker(Protocol):
    version: str

    def delete_leftovers(self) -> None: ...


Peer = TypeVar("Peer", bound=Broker)


def open_peer(bench: BenchRun, phases: str, skip: str | None, probe: Callable[[str], tuple[Peer | None, str]],
              url: str) -> tuple[Peer | None, str | None]:
    """The peer at ``url`` (what it made deleted when ``bench`` ends), or None and the line that says
    why ``phases`` were skipped: ``skip`` names the flag that left it out, else ``probe`` says why."""
    if skip is not None:
        return None, f"{phases}: skipped ({skip})"
    peer, why = probe(url)
    if peer is None:
        return None, f"{phases}: skipped: {why}"
    bench.at_exit(peer.delete_leftovers)
    progress(f"{peer.version} answers at {redact_url(url)}")
    return peer, None
