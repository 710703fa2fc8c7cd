"""The reading of documentation pages that tests/test_first_hour.py and tests/test_demo.py rely on:
what may differ from run to run matches, and nothing else does."""

from __future__ import annotations

from pathlib import Path

from support.console_page import Transcript, commands

TOP = ["TENANT  ID              TRAFFIC  WAITING  STORED                      LISTENERS",
       "shop    t_0b879990f7f1  0.0/s    2997     1,104,901 B (11% of quota)  1 error"]


def test_ids_times_sizes_and_rates_may_differ_but_counts_may_not() -> None:
    run = ["TENANT  ID              TRAFFIC  WAITING  STORED                     LISTENERS",
           "shop    t_45dbec81d268  12.5/s   2997     998,001 B (9% of quota)    1 error"]
    assert Transcript().mismatch(TOP, run) is None
    miscounted = [run[0], run[1].replace("2997", "2990")]
    assert Transcript().mismatch(TOP, miscounted) is not None
    reworded = [run[0], run[1].replace("1 error", "1 failing")]
    assert Transcript().mismatch(TOP, reworded) is not None


def test_an_id_on_the_page_stands_for_one_id_of_the_run_throughout() -> None:
    transcript = Transcript()
    shown = ["1795782346624-000000000002  picker-7  1m 2s  in 8m 57s"]
    assert transcript.mismatch(shown, ["1795783056966-000000000004  picker-7  5s  in 9m 55s"]) is None
    assert transcript.command("atomq release orders 1795782346624-000000000002") == \
        "atomq release orders 1795783056966-000000000004"
    assert transcript.mismatch(shown, ["1795783056966-000000000005  picker-7  5s  in 9m 55s"]) is not None
    two = ["t_0b879990f7f1", "t_89eb2403ed4f"]
    assert Transcript().mismatch(two, ["t_45dbec81d268", "t_45dbec81d268"]) is not None


def test_dots_stand_for_any_lines_and_nothing_else_is_skipped() -> None:
    shown = ["...", "state  error", "..."]
    assert Transcript().mismatch(shown, ["name  copier", "state  error", "executions  10"]) is None
    assert Transcript().mismatch(shown, ["name  copier", "state  running"]) is not None
    assert Transcript().mismatch(["RESENT", "5"], ["RESENT", "5", "and more"]) is not None


def test_a_page_gives_its_commands_in_order_with_what_each_prints(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```sh\nseq 1 3 | atomq send q \\\n  --tenant shop  # three\n# a comment\n```\n\n"
                    "```sh\n$ atomq queues list\nNAME  DEPTH\nq     3\n\n$ atomq release q 1\nRELEASED\n1\n```\n")
    got = [(c.line, c.shown) for c in commands(page)]
    assert got == [("seq 1 3 | atomq send q --tenant shop  # three", None),
                   ("atomq queues list", ["NAME  DEPTH", "q     3"]),
                   ("atomq release q 1", ["RELEASED", "1"])]
