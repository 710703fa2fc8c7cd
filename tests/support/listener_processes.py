"""Processes the tests register (``ATOMQ_PROCESSES``, ``ATOMQ_SPARK_PROCESSES``) to make executions fail, stall or report.

Importable by the work horses of a served node: ``served_env`` puts tests/
on their ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atomq.workers.context import ExecutionContext
from support.processes import support_pythonpath


def registered(**processes: Callable[..., Any]) -> str:
    """A registry variable's value naming these functions: ``registered(fail=always_fail)``."""
    return ",".join(f"{name}={f.__module__}:{f.__name__}" for name, f in processes.items())


def served_env(**processes: Callable[..., Any]) -> dict[str, str]:
    """The environment that registers ``processes`` with a served node's work horses."""
    return {"ATOMQ_PROCESSES": registered(**processes), "PYTHONPATH": support_pythonpath()}


class Refused(Exception):
    pass


def always_fail(ctx: ExecutionContext) -> None:
    """Raises before doing anything: every delivery of its batch fails."""
    raise Refused(f"refusing {len(ctx.messages)} message(s)")


def stall_first_delivery(ctx: ExecutionContext) -> None:
    """Forwards to ``settings["to"]``; on a first delivery it first writes its pid to
    ``settings["pid_file"]`` and sleeps, so a test can kill its work horse mid-execution."""
    if any(not m.redelivered for m in ctx.messages):
        pid_file = Path(ctx.settings["pid_file"])
        pid_file.with_suffix(".part").write_text(str(os.getpid()))
        pid_file.with_suffix(".part").rename(pid_file)  # whole, when a test sees it: a rename is atomic
        time.sleep(float(ctx.settings.get("sleep_s", 60)))
    for message in ctx.messages:
        for document in message.documents:
            ctx.send(ctx.settings["to"], [document], source=message)


def spark_stall_first_delivery(df: Any, settings: dict[str, Any]) -> Any:
    """Forwards each document to ``settings["to"]`` on Spark; a first delivery's task first
    sleeps ``settings["sleep_s"]``, holding its Spark job until a time limit cancels it. With
    ``settings["pid_file"]``, the task first writes there the pid of the Spark Python worker
    that runs it, so a test can tell which Spark worker's process tree holds the execution."""
    from pyspark.sql import functions as f

    sleep_s = float(settings.get("sleep_s", 60))
    pid_file = settings.get("pid_file")

    # Defined in here, so Spark's Python workers get it by value: they cannot import this module.
    def stall(delivery_count: int, text: str) -> str:
        import os as system
        import time as clock

        if delivery_count == 1:
            if pid_file:
                with open(f"{pid_file}.part", "w") as out:
                    out.write(str(system.getpid()))
                system.rename(f"{pid_file}.part", pid_file)  # whole, when a test sees it
            clock.sleep(sleep_s)
        return text

    slow = f.udf(stall, "string", useArrow=False)
    return df.select("message_id", slow("delivery_count", "text").alias("text"), f.lit(settings["to"]).alias("queue"))


def spark_forward_with_extra_columns(df: Any, settings: dict[str, Any]) -> Any:
    """``forward`` on Spark, with two columns more that atomq does not read, one of them a struct
    with two fields of one name (which Arrow cannot hold)."""
    from pyspark.sql import functions as f

    return df.select(f.lit(settings["to"]).alias("queue"), "message_id", "payload", "properties",
                     f.struct(f.lit(1).alias("a"), f.lit(2).alias("a")).alias("twice"),
                     f.lit("ignored").alias("note"))


def spark_forward_where_run(df: Any, settings: dict[str, Any]) -> Any:
    """``forward`` on Spark, each output's properties ``{"ran_in": ...}``: the working directory of
    the Spark Python worker of its task (an executor's directory on a standalone worker)."""
    from pyspark.sql import functions as f

    def cwd() -> str:
        import os as system  # in here: the function goes to the Python workers by value

        return system.getcwd()

    ran_in = f.udf(cwd, "string", useArrow=False)()
    return df.select(f.lit(settings["to"]).alias("queue"), "message_id", "payload",
                     f.to_json(f.create_map(f.lit("ran_in"), ran_in)).alias("properties"))


def spark_rows_report(df: Any, settings: dict[str, Any]) -> Any:
    """A process with a row form (``rows``): the DataFrame form forwards every document to the first
    of ``settings["to"]``; the row form is what runs when the executors write (see there)."""
    from pyspark.sql import functions as f

    return df.select(f.lit(settings["to"][0]).alias("queue"), "message_id",
                     f.col("document_index").alias("position"), "payload")


def spark_rows_report_rows(settings: dict[str, Any]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    """Each input row becomes one output whose text is the row itself as JSON (its payload's type
    named, the payload as text): to ``settings["to"][n % len]`` for a payload ending in a number n,
    to ``settings["missing"]`` for one starting with ``missing``."""
    queues, missing = list(settings["to"]), settings.get("missing")

    # Defined in here, so Spark's Python workers get it by value: they cannot import this module.
    def outputs(row: dict[str, Any]) -> list[dict[str, Any]]:
        import json as j

        data = bytes(row["payload"]).decode("utf-8", "replace")
        last = data.rsplit(" ", 1)[-1]
        queue = missing if missing and data.startswith("missing") else queues[
            int(last) % len(queues) if last.isdigit() else 0]
        seen = {k: v for k, v in row.items() if k != "payload"}
        seen.update(payload=data, payload_type=type(row["payload"]).__name__)
        return [{"queue": queue, "message_id": row["message_id"], "position": row["document_index"],
                 "text": j.dumps(seen)}]

    return outputs


spark_rows_report.rows = spark_rows_report_rows  # type: ignore[attr-defined]


def spark_rows_where_run(df: Any, settings: dict[str, Any]) -> Any:
    """``spark_forward_where_run`` with a row form: on a standalone cluster the rows run in the
    executor, each output's properties ``{"ran_in": ...}`` naming where."""
    return spark_forward_where_run(df, settings)


def spark_rows_where_run_rows(settings: dict[str, Any]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
    to = settings["to"]

    def outputs(row: dict[str, Any]) -> list[dict[str, Any]]:
        import json as j
        import os as system

        return [{"queue": to, "message_id": row["message_id"], "position": row["document_index"],
                 "payload": row["payload"], "properties": j.dumps({"ran_in": system.getcwd(), "form": "rows"})}]

    return outputs


spark_rows_where_run.rows = spark_rows_where_run_rows  # type: ignore[attr-defined]
