"""docs/spark.md's first script, run as a data engineer runs it: ``.venv/bin/python etl.py``, the
environment not activated, so that the ``python3`` on ``PATH`` (which Spark starts its Python
workers with) is an interpreter without atomq; and the check ``register()`` makes of them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from atomq.client import AtomqClient
from atomq.errors import JavaMissing, SparkPythonMissing
from atomq.spark_workers.datasource.interpreter import data_source_python
from atomq.spark_workers.session import find_java
from support.in_process_node import InProcessNode
from support.processes import REPO, clean_env

OWNER = "owner-key-for-the-first-script"
SCRIPT_S = 300
"""A Spark session of its own and its first Python data source actions, on a busy 2-core machine."""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python without atomq (a fresh virtual environment of the base interpreter)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv / "bin" / "python"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNode]:
    with InProcessNode(tmp_path_factory.mktemp("first-script"), OWNER) as node:
        yield node


def first_script() -> str:
    page = (REPO / "docs" / "spark.md").read_text()
    section = page.split("## A first script", 1)[1]
    match = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert match, "docs/spark.md shows its first script in a python block"
    return match.group(1)


def test_the_first_script_runs_with_the_venvs_python_by_path_and_no_atomq_on_paths_python3(
        node: InProcessNode, bare_python: Path, tmp_path: Path) -> None:
    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"needs a Java runtime: {exc.message}")
    key = node.owner.create_tenant("first-script")["api_key"]
    with AtomqClient(node.url, key) as api:
        api.put_queue("orders")
        api.put_queue("shipped")
        api.send("orders", [{"documents": [{"data": f"order {i}"}], "properties": {"n": i}} for i in range(3)])
        (tmp_path / "etl.py").write_text(first_script())
        # python3 on PATH has no atomq, as a system Python has not; the venv's bin is not on PATH.
        (tmp_path / "bin").mkdir()
        python3 = tmp_path / "bin" / "python3"  # not a symlink: Python would follow it to the base interpreter
        python3.write_text(f'#!/bin/sh\nexec "{bare_python}" "$@"\n')
        python3.chmod(0o755)
        venv_bin = os.path.dirname(sys.executable)
        path = [str(tmp_path / "bin"), *(p for p in os.environ["PATH"].split(os.pathsep) if p and p != venv_bin)]
        env = {k: v for k, v in clean_env(ATOMQ_URL=node.url, ATOMQ_KEY=key, PATH=os.pathsep.join(path)).items()
               if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
        assert subprocess.run(["python3", "-c", "import atomq.client"], cwd=tmp_path, env=env,
                              capture_output=True).returncode, \
            "the python3 on PATH must not run atomq for this test to mean anything"
        done = subprocess.run([sys.executable, "etl.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=SCRIPT_S)
        assert done.returncode == 0, done.stderr[-3000:]
        shipped = sorted((m["documents"][0]["data"], m["properties"]) for m in api.browse("shipped"))
        assert shipped == [(f"ORDER {i}", {"n": i}) for i in range(3)]


def test_on_a_local_master_the_data_source_runs_on_the_drivers_python_unless_pyspark_python_is_set(
        bare_python: Path) -> None:
    assert data_source_python("local[*]", "python3", None) == sys.executable
    assert data_source_python("local-cluster[2,1,1024]", "python3", "") == sys.executable
    assert data_source_python("local[2]", sys.executable, sys.executable) == sys.executable
    # On a cluster the executors' interpreters are elsewhere: Spark's choice stands.
    assert data_source_python("spark://127.0.0.1:7077", "python3", None) == "python3"
    with pytest.raises(SparkPythonMissing) as refused:
        data_source_python("local[*]", str(bare_python), str(bare_python))
    assert f"PYSPARK_PYTHON={bare_python}, which cannot import atomq" in refused.value.message
    assert f"set PYSPARK_PYTHON={sys.executable}" in refused.value.message
