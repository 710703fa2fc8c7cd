"""Which Python runs the data source's code inside Spark, checked when it is registered.

Spark runs a Python data source's code (planning on the driver, reads and
writes in tasks) in Python workers started with ``PYSPARK_PYTHON``, else the
``python3`` on ``PATH``: not the driver's interpreter. A script run as
``.venv/bin/python etl.py`` without the venv activated then fails inside
Spark with ``No module named 'atomq'``. Spark takes the interpreter from
the ``SparkContext`` when a function is handed to it, so registering the
data source is where it can be chosen, for the data source alone.

On a local master (``local[...]``, ``local-cluster[...]``) the workers run
on the driver's machine, where the driver's interpreter exists and imports
this very atomq (the data source is pickled by reference, so the workers
need the same code). So when the user has not set ``PYSPARK_PYTHON``,
:func:`data_source_python` takes the driver's interpreter for the data
source; the user's own functions keep Spark's choice. When they have set
one, it is theirs to keep: it is checked, and one that cannot import atomq
is refused with the fix, before Spark starts a worker that would fail. On a
cluster the executors' interpreters are on other machines: nothing is
checked (infra/README.md: install atomq there, set ``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from atomq.errors import SparkPythonMissing

IMPORT_CHECK_TIMEOUT_S = 60


def is_local(master: str) -> bool:
    """Whether Spark's Python workers run on the driver's machine."""
    return master.startswith("local")


def data_source_python(master: str, spark_python: str, user_set: str | None) -> str:
    """The interpreter the data source's Python code runs on.

    Args:
        master: the session's master URL.
        spark_python: the interpreter Spark gives Python functions now (``sc.pythonExec``).
        user_set: ``PYSPARK_PYTHON`` as the user set it (None: not set).

    Raises:
        SparkPythonMissing: on a local master, the user's ``PYSPARK_PYTHON`` cannot import atomq.
    """
    if not is_local(master):
        return spark_python
    if not user_set:
        return sys.executable
    if _same_file(user_set, sys.executable) or _imports_atomq(user_set):
        return spark_python
    raise SparkPythonMissing(
        f"Spark's Python workers run PYSPARK_PYTHON={user_set}, which cannot import atomq, so the atomq data "
        f"source would fail inside Spark; this script runs {sys.executable}: set PYSPARK_PYTHON={sys.executable} "
        "before the session starts (or unset it), or install atomq into that interpreter",
        pyspark_python=user_set, driver_python=sys.executable)


def _same_file(command: str, executable: str) -> bool:
    """The same interpreter by path; not through symlinks, which would equate a venv's with its base's."""
    found = shutil.which(command)
    return found is not None and os.path.abspath(found) == os.path.abspath(executable)


def _imports_atomq(command: str) -> bool:
    """Whether ``command`` imports atomq with its dependencies (the client the data source calls the node with)."""
    try:
        done = subprocess.run([command, "-c", "import atomq.client"], capture_output=True, timeout=IMPORT_CHECK_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0
