"""The SparkSession atomq holds: found Java, local mode by default, settings that start it fast.

PySpark needs a Java runtime (17 or 21). It is looked for where Spark's
launcher looks: ``JAVA_HOME`` when set, else ``java`` on ``PATH``, and it
must run; without one, starting Spark fails with a message that says what to
install, not with a JVM stack trace. Python workers run this interpreter (``PYSPARK_PYTHON``),
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

from atomq import defaults
from atomq.errors import JavaMissing

SUPPORTED_JAVA = (17, 21)
INSTALL_JAVA = ("install a Java 17 or 21 runtime (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; "
                "macOS: brew install openjdk@17) or set JAVA_HOME to one")
JAVA_VERSION_TIMEOUT_S = 30


def find_java() -> tuple[Path, int]:
    """The ``java`` binary Spark will use and its major version, checked by running it.

    Spark's launcher takes ``$JAVA_HOME/bin/java`` whenever ``JAVA_HOME`` is
    set, so a ``JAVA_HOME`` without a working one is as good as no Java, even
    with a ``java`` on ``PATH``; without ``JAVA_HOME`` it takes the one on ``PATH``.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not java.is_file() or not os.access(java, os.X_OK):
            raise JavaMissing(f"no Java runtime: JAVA_HOME is {home}, which has no bin/java; {INSTALL_JAVA} "
                              "(or unset JAVA_HOME to use the java on PATH)")
        where = f"JAVA_HOME's {java}"
    else:
        on_path = shutil.which("java")
        if not on_path:
            raise JavaMissing(f"no Java runtime was found (JAVA_HOME is not set and there is no java on PATH); "
                              f"{INSTALL_JAVA}")
        java, where = Path(on_path), f"the java on PATH ({on_path})"
    version = _major_version(java, where)
    if version not in SUPPORTED_JAVA:
        raise JavaMissing(f"no usable Java runtime: {where} is Java {version}, and Spark needs Java 17 or 21; "
                          f"{INSTALL_JAVA}")
    return java, version


def _major_version(java: Path, where: str) -> int:
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=JAVA_VERSION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise JavaMissing(f"no usable Java runtime: {where} does not run ({exc}); {INSTALL_JAVA}") from None
    if out.returncode != 0:
        detail = " ".join((out.stderr or out.stdout).split())[:200]
        raise JavaMissing(f"no usable Java runtime: `{java} -version` failed with status {out.returncode}"
                          f"{': ' + detail if detail else ''}; {INSTALL_JAVA}")
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def session_conf(master: str = defaults.SPARK_MASTER, app_name: str = "atomq", **extra: str) -> dict[str, str]:
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


def start_session(master: str = defaults.SPARK_MASTER, app_name: str = "atomq", **extra: str) -> Any:
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
