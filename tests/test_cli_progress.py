"""The progress line of long CLI work: silent when quick, a line every few seconds in a log,
rewritten in place on a terminal."""

from __future__ import annotations

import io

from atomq.cli.progress import LOG_EVERY_S, Progress


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
