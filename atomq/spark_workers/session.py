"""The SparkSession atomq holds: found Java, local mode by default, settings that start it fast.

PySpark needs a Java runtime (17 or 21). It is looked for where a fresh
machine has it: ``JAVA_HOME``, then ``java`` on ``PATH``; without one,
starting Spark fails with a message that says what to install, not with a
JVM stack trace. Python workers run this interpreter (``PYSPARK_PYTHON``),
so they see the same installed atomq.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from atomq.errors import JavaMissing

SUPPORTED_JAVA = (17, 21)
DEFAULT_MASTER = "local[*]"


def find_java() -> tuple[Path, int]:
    """The ``java`` binary Spark will use and its major version."""
    home = os.environ.get("JAVA_HOME")
    candidates = [Path(home) / "bin" / "java"] if home else []
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    wrong = []
    for java in candidates:
        if java.exists():
            version = _major_version(java)
            if version in SUPPORTED_JAVA:
                return java, version
            wrong.append(f"{java} is Java {version}")
    if wrong:
        raise JavaMissing(f"Spark needs Java 17 or 21; {'; '.join(wrong)}. Install a Java 17 or 21 runtime "
                          "(Debian/Ubuntu: apt install openjdk-17-jre-headless) and set JAVA_HOME to it.")
    raise JavaMissing("Spark needs a Java 17 or 21 runtime and none was found (JAVA_HOME unset, no java on PATH). "
                      "Install one (Debian/Ubuntu: apt install openjdk-17-jre-headless; macOS: brew install "
                      "openjdk@17) or set JAVA_HOME to it.")


def _major_version(java: Path) -> int:
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def session_conf(master: str = DEFAULT_MASTER, app_name: str = "atomq", **extra: str) -> dict[str, str]:
    """A session's settings: no UI, few shuffle partitions, loopback driver, a JVM that starts fast."""
    conf = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    }
    conf.update(extra)
    return conf


def start_session(master: str = DEFAULT_MASTER, app_name: str = "atomq", **extra: str) -> Any:
    """A SparkSession with :func:`session_conf`, after checking for Java."""
    java, _ = find_java()
    os.environ.setdefault("JAVA_HOME", str(java.resolve().parent.parent))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for name, value in session_conf(master, app_name, **extra).items():
        builder = builder.config(name, value)
    return builder.getOrCreate()
