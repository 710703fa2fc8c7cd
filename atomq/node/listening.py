"""The node's listening socket, bound before anything else of the node starts.

A port that is taken is found at once, before the embedded Valkey starts and before the node
says it serves, and is named with the option that changes it. The bound socket is then handed to
gunicorn (``fd://``), so no other program can take the port between the check and gunicorn's
start: gunicorn's own bind retries for five seconds and exits without naming ``--port``.
"""

from __future__ import annotations

import errno
import socket

from atomq.errors import CannotListen


LISTEN_BACKLOG = 2048
"""gunicorn's own default backlog, which it would have listened with."""


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening; CannotListen, naming the option to change,
    when the address cannot be taken. It listens at once: on Linux two sockets with SO_REUSEADDR may
    both be bound to one port while neither listens, so only listening holds the port (gunicorn
    does not listen again on a socket that already listens)."""
    address = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As gunicorn does: a port whose last connections linger in TIME_WAIT is free to bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise CannotListen(_why(host, port, exc), host=host, port=port) from None
    return sock


def _why(host: str, port: int, exc: OSError) -> str:
    where = f"cannot listen on {host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"{where}: port {port} is in use (by another atomq serve or another program); "
                f"give another with --port (or ATOMQ_PORT)")
    if exc.errno == errno.EACCES:
        return f"{where}: ports below 1024 need privileges; give another with --port (or ATOMQ_PORT)"
    return f"{where}: {exc.strerror or exc}; check --host (or ATOMQ_HOST) and --port (or ATOMQ_PORT)"
