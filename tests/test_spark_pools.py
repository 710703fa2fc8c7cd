"""Tenants' FAIR pools share a Spark session by their weights; Java is found or clearly missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from atomq.errors import JavaMissing
from atomq.spark_workers.session import find_java
from support.processes import support_pythonpath


def _pool_share(master: str) -> dict[str, int]:
    done = subprocess.run([sys.executable, "-m", "support.spark_pool_share", master],
                          env={**os.environ, "PYTHONPATH": support_pythonpath()}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_pool_of_weight_3_gets_at_least_twice_the_tasks_of_a_pool_of_weight_1() -> None:
    counts = _pool_share("local[4]")
    assert counts["light"] > 0, counts
    assert counts["heavy"] >= 2 * counts["light"], counts


@pytest.mark.slow
def test_pools_share_executors_of_a_local_cluster() -> None:
    """Separate executor JVMs (local-cluster: 2 workers of 1 core): both tenants' jobs run and finish."""
    counts = _pool_share("local-cluster[2,1,1024]")
    assert counts["heavy"] > 0 and counts["light"] > 0, counts


def test_without_java_spark_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java-here"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissing, match="Java 17 or 21"):
        find_java()


def test_the_machines_java_is_found() -> None:
    java, version = find_java()
    assert os.access(java, os.X_OK) and version in (17, 21)


@pytest.mark.parametrize("java, says", [
    ("#!/bin/sh\nexit 1\n", "-version` failed with status 1"),
    ("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n", "is Java 11, and Spark needs Java 17 or 21"),
])
def test_a_java_that_does_not_run_or_is_too_old_counts_as_none(
        java: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "java"
    binary.write_text(java)
    binary.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissing, match="openjdk-17-jre-headless") as missing:
        find_java()
    assert says in missing.value.message


def test_a_stale_java_home_counts_as_no_java_even_with_java_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissing, match=f"JAVA_HOME is {tmp_path}, which has no bin/java"):
        find_java()
