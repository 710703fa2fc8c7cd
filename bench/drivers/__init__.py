"""How the benchmarks reach each system they measure, one module a system.

A bench script (run as ``python bench/x.py``, so ``bench/`` is on its path)
keeps its phases, arguments and report; the code that talks to raw Redis,
the atomq library, a served atomq node or RabbitMQ lives here, so two benches
that measure the same system drive it the same way. Beside them, what every
script shares whatever it measures: its command line (``cli``) and how its
run ends (``run_exit``); a Spark standalone cluster started for a run
(``spark_standalone``, which the tests start too) and the CPU of a node's
process trees (``process_cpu``).
"""
