"""The ``atomq`` command as a newcomer runs it: a real process on the embedded Valkey."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ATOMQ = [sys.executable, "-m", "atomq"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ATOMQ, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_selftest_sends_gets_acks_and_dead_letters_on_the_embedded_server(tmp_path: Path) -> None:
    result = run("selftest", "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "sent 3 messages in one batch" in out
    assert "acked 2" in out
    assert "delivery_count 2, redelivered True" in out
    assert "dead-lettered with reason 'selftest failure' after 2 failed deliveries" in out
    assert "queue 'orders': depth 0, in flight 0, dead letters 1" in out
    assert out.rstrip().endswith("selftest passed.")
    assert (tmp_path / "data" / "valkey" / "valkey.conf").exists(), "kept the data dir it was given"


def test_audit_reports_a_consistent_data_dir_and_repairs_usage_counters(tmp_path: Path) -> None:
    from atomq.platform import OutgoingDocument, OutgoingMessage, QueueServer
    from atomq.platform.embedded import EmbeddedValkey

    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    try:
        client = server.client()
        qs = QueueServer(client)
        qs.put_queue("t_audited", "q", "point_to_point")
        qs.send("t_audited", "q", [OutgoingMessage(documents=(OutgoingDocument("kept"),))])
        client.hset("aq:{t_audited}:usage", "bytes", 999_999)  # counters knocked out of step
    finally:
        server.stop()
    broken = run("audit", "--data-dir", str(tmp_path))
    assert broken.returncode == 1 and "usage counters say" in broken.stdout
    repaired = run("audit", "--data-dir", str(tmp_path), "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "t_audited: usage set to" in repaired.stdout and "t_audited: consistent" in repaired.stdout


def test_help_explains_each_command() -> None:
    result = run("selftest", "--help")
    assert result.returncode == 0
    assert "ATOMQ_DATA_DIR" in result.stdout


def test_serve_settings_come_from_file_then_environment_then_flags(tmp_path: Path, monkeypatch) -> None:
    from click.testing import CliRunner

    import atomq.node
    from atomq.cli import main

    seen = []
    monkeypatch.setattr(atomq.node, "serve", seen.append)
    config = tmp_path / "atomq.toml"
    config.write_text('[serve]\nport = 7001\nthreads = 7\nhttp-workers = 3\nhost = "0.0.0.0"\n')
    runner = CliRunner()
    result = runner.invoke(main, ["--config", str(config), "serve", "--threads", "9"],
                           env={"ATOMQ_HTTP_WORKERS": "4", "ATOMQ_THREADS": "8"})
    assert result.exit_code == 0, result.output
    (node,) = seen
    assert (node.port, node.host) == (7001, "0.0.0.0"), "from the file"
    assert node.http_workers == 4, "the environment beats the file"
    assert node.threads == 9, "a flag beats both"
    bad = runner.invoke(main, ["serve", "--port", "0"])
    assert bad.exit_code == 2 and "--port" in bad.output
