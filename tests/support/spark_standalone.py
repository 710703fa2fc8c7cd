"""A Spark standalone cluster from the installed pyspark, for tests: one master, one worker.

The benchmarks start the same cluster (bench/drivers/spark_standalone.py, on the tests' path
through pytest's ``pythonpath``): one recipe, kept there.
"""

from __future__ import annotations

from drivers.spark_standalone import StandaloneSpark

__all__ = ["StandaloneSpark"]
