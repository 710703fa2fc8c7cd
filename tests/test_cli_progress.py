"""The progress line of long CLI work: silent when quick, a line every few seconds in a log,
rewritten in place on a terminal."""

from __future__ import annotations

import importlib
import io
import threading

from atomq.cli.progress import LOG_EVERY_S, Progress

dead_letters = importlib.import_module("atomq.cli.dead_letters")
"""The module (``atomq.cli.dead_letters`` as an attribute of the package is its click group)."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_quick_work_prints_nothing() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress("sending to q", "messages", out, clock)
    clock.now += 0.4
    progress.update(100)
    progress.finish(100)
    assert out.getvalue() == ""


def test_long_work_in_a_log_gets_a_line_every_few_seconds_and_a_last_one() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress("resending the dead letters of q", "dead letters", out, clock)
    for done in range(1000, 21_000, 1000):
        clock.now += 1
        progress.update(done)
    progress.finish(20_000)
    lines = out.getvalue().splitlines()
    assert lines == [
        "resending the dead letters of q: 5,000 dead letters (1,000/s)",
        "resending the dead letters of q: 10,000 dead letters (1,000/s)",
        "resending the dead letters of q: 15,000 dead letters (1,000/s)",
        "resending the dead letters of q: 20,000 dead letters (1,000/s)",
        "resending the dead letters of q: 20,000 dead letters in 20.0 s, done",
    ]
    assert LOG_EVERY_S == 5


def test_on_a_terminal_the_line_is_rewritten_in_place_and_ended() -> None:
    out, clock = Terminal(), Clock()
    progress = Progress("sending to q", "messages", out, clock)
    clock.now += 0.6
    progress.update(600)
    clock.now += 0.6
    progress.update(1200)
    progress.finish(1200)
    assert out.getvalue() == ("\r\033[Ksending to q: 600 messages (1,000/s)"
                              "\r\033[Ksending to q: 1,200 messages (1,000/s)"
                              "\r\033[Ksending to q: 1,200 messages in 1.2 s, done\n")


def test_a_drain_reports_from_a_second_connection_while_its_one_request_runs(monkeypatch) -> None:
    """The server works through all the dead letters in one request; the command reads the count
    meanwhile from a clone of its client, and ends with the request's own figure."""
    counts = iter([1000, 600, 200, 0, 0, 0, 0])
    polled: list[int] = []
    finished = threading.Event()

    class Client:
        def clone(self) -> Client:
            return self

        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def queue(self, name: str) -> dict:
            n = next(counts)
            polled.append(n)
            if len(polled) == 3:
                finished.set()
            return {"dead_letters": n, "subscribers": []}

    def act(ids: list[str] | None, timeout: float | None) -> int:
        assert ids is None and timeout == dead_letters.DRAIN_TIMEOUT_S
        assert finished.wait(30)
        return 1000

    monkeypatch.setattr(dead_letters, "POLL_S", 0.01)
    assert dead_letters._apply(Client(), "q", (), None, act, "resending") == 1000  # type: ignore[arg-type]
    assert polled[:3] == [1000, 600, 200], "the count before, then while the request runs"
