"""The tests' harness: served and in-process nodes, the processes tests register, and small helpers.

Imported as ``support`` (pytest puts tests/ on ``sys.path``: ``pythonpath`` in
pyproject.toml); child processes that import it get tests/ on their
``PYTHONPATH`` (``support.processes.support_pythonpath``).
"""
