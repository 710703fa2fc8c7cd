"""A figure every request reads from one shared key is read again in the background: a request
never waits on it, and a failed read keeps the last value (see atomq.platform.store.refreshed)."""

from __future__ import annotations

import threading

import pytest

from atomq.errors import StorageError
from atomq.platform.store.refreshed import Refreshed
from support.waiting import wait_until


def test_a_stale_value_serves_while_one_background_read_runs_and_a_failed_read_keeps_it(
        caplog: pytest.LogCaptureFixture) -> None:
    reads: list[str] = []
    release = threading.Event()
    outcome: dict[str, object] = {"next": "first"}

    def read() -> str:
        reads.append(threading.current_thread().name)
        if len(reads) > 1:
            release.wait(10)
        value = outcome["next"]
        if isinstance(value, Exception):
            raise value
        return str(value)

    figure = Refreshed(read, every_s=0, what="test figure")
    assert figure.get() == "first" and reads == [threading.current_thread().name], "the first read is the caller's"
    outcome["next"] = "second"
    # Old at once (every_s 0): each get starts no more than one read, and none waits for it.
    assert [figure.get() for _ in range(5)] == ["first"] * 5
    assert len(reads) == 2 and reads[1] == "atomq-refresh-test figure"
    release.set()
    wait_until(lambda: figure.get() == "second", 10, "the background read's value")
    outcome["next"] = StorageError("Redis failed: the primary is failing over")
    with caplog.at_level("WARNING", logger="atomq.refreshed"):
        # A read starts from a get: each get of the wait is one.
        wait_until(lambda: figure.get() == "second"
                   and any("cannot read the test figure" in r.getMessage() for r in caplog.records), 10,
                   "the failed read logged")
        assert figure.get() == "second", "a failed read keeps the last value"
    outcome["next"] = "third"
    wait_until(lambda: figure.get() == "third", 10, "a later read working again")
    assert figure.set("mine") == "mine" and figure.get() == "mine", "a value this process set serves at once"


def test_a_read_that_began_before_a_change_of_this_process_does_not_undo_it() -> None:
    started, release = threading.Event(), threading.Event()
    values = iter(["first", "read before the change"])

    def read() -> str:
        value = next(values)
        if value != "first":
            started.set()
            release.wait(10)
        return value

    figure = Refreshed(read, every_s=0, what="test figure")
    assert figure.get() == "first"
    assert figure.get() == "first" and started.wait(10), "a background read under way"
    figure.set("changed here")
    release.set()
    wait_until(lambda: not figure._refreshing.locked(), 10, "the background read to end")
    assert figure.get() == "changed here"
