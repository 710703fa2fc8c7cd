"""A documentation page's shell sessions, read so that a test can run them and hold the page to
what they print.

A page shows commands in ```` ```sh ```` blocks. In a block whose lines start with ``$ ``, each
``$ `` line is a command and the lines under it, up to the next ``$ `` line, are what it prints.
In a block without ``$ ``, every line is a command whose output the page does not show (``#``
starts a comment).

What a page shows was printed on another day, on another machine: ids, times, sizes and rates
differ from one run to the next. ``Transcript`` compares an output with the page's column by
column (runs of spaces separate columns, so wider figures may shift them): a token of a kind
that differs between runs (an id, a duration, a rate, a size) matches any token of its kind,
and the same id on the page must be the same id in the run throughout. A line ``...`` stands for
any number of lines. Everything else, every plain count among it, must be as the page says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)

IDS = {
    "tenant": re.compile(r"t_[0-9a-f]{12}"),
    "node": re.compile(r"n_[0-9a-f]{12}"),
    "message": re.compile(r"\d{13}-\d{12}"),
}
"""Ids the node makes: each one on the page stands for one id of the run, the same everywhere."""

KINDS = {
    "url": re.compile(r"https?://127\.0\.0\.1:\d+/?"),
    "duration": re.compile(r"(\d+(\.\d+)?(ms|d|h|m|s))+"),
    "rate": re.compile(r"\d+(\.\d+)?/s"),
    "key": re.compile(r"aq_[0-9a-f]{28}_[A-Za-z0-9_-]{20,}"),
    "version": re.compile(r"\d+\.\d+\.\d+"),
    "size": re.compile(r"[\d,]+_B"),
    "decimal": re.compile(r"\d+\.\d+"),
    "share": re.compile(r"\(\d+%"),
}
"""Figures that differ from run to run: a token of one of these kinds matches any token of the same kind."""


@dataclass
class Command:
    line: str
    shown: list[str] | None
    """What the page shows it prints; None when the page shows nothing."""


def commands(page: Path) -> list[Command]:
    """The page's commands in order, with what the page shows each prints."""
    out: list[Command] = []
    for block in FENCE.findall(page.read_text()):
        lines = _joined(block.splitlines())
        if not any(line.startswith("$ ") for line in lines):
            out += [Command(line, None) for line in lines if line.strip() and not line.lstrip().startswith("#")]
            continue
        for line in lines:
            if line.startswith("$ "):
                out.append(Command(line[2:], []))
            elif out and out[-1].shown is not None:
                out[-1].shown.append(line)
    for command in out:
        while command.shown and not command.shown[-1].strip():
            command.shown.pop()
    return out


def _joined(lines: list[str]) -> list[str]:
    """Lines ending with a backslash joined to the next, as the shell joins them."""
    out: list[str] = []
    for line in lines:
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + line.lstrip()
        else:
            out.append(line)
    return out


@dataclass
class Transcript:
    """The ids seen so far: which id of the run each id on the page stands for."""

    ids: dict[str, str] = field(default_factory=dict)

    def command(self, line: str) -> str:
        """The page's command with the page's ids replaced by the run's."""
        for kind in IDS.values():
            line = kind.sub(lambda m: self.ids.get(m.group(0), m.group(0)), line)
        return line

    def mismatch(self, shown: list[str], printed: list[str]) -> str | None:
        """Why ``printed`` is not what the page shows, or None when it is. Learns the ids it matched
        only when the whole output matches."""
        learned = dict(self.ids)
        if _lines_match(shown, printed, learned):
            self.ids = learned
            return None
        return "the page shows:\n" + "\n".join(shown) + "\nthe run printed:\n" + "\n".join(printed)


def _lines_match(shown: list[str], printed: list[str], ids: dict[str, str]) -> bool:
    if not shown:
        return not printed
    if shown[0].strip() == "...":
        return any(_lines_match(shown[1:], printed[skip:], ids) for skip in range(len(printed) + 1))
    if not printed:
        return False
    attempt = dict(ids)
    if _line_matches(shown[0], printed[0], attempt) and _lines_match(shown[1:], printed[1:], attempt):
        ids.update(attempt)
        return True
    return False


SIZE = re.compile(r"(\d[\d,]*) B\b")
"""A size in bytes, "18,291 B": one token of the kind "size"."""
SPAN = re.compile(r"\b\d+[dhm](\s+\d+[hms])\b")
"""A length of time in two units, "4m 12s": one token of the kind "duration", as "42s" is."""


def _tokens(line: str) -> list[str]:
    return SPAN.sub(lambda m: m.group(0).replace(" ", ""), SIZE.sub(r"\1_B", line)).split()


def _line_matches(shown: str, printed: str, ids: dict[str, str]) -> bool:
    expected, got = _tokens(shown), _tokens(printed)
    return len(expected) == len(got) and all(_token_matches(e, g, ids) for e, g in zip(expected, got))


def _token_matches(shown: str, printed: str, ids: dict[str, str]) -> bool:
    if shown == printed and not any(kind.fullmatch(shown) for kind in IDS.values()):
        return True
    for kind in IDS.values():
        if kind.fullmatch(shown):
            if not kind.fullmatch(printed) or ids.get(shown, printed) != printed:
                return False
            if printed in ids.values() and ids.get(shown) != printed:
                return False  # two ids on the page cannot be one id of the run
            ids[shown] = printed
            return True
    stripped_shown, stripped_printed = shown.rstrip(",;)"), printed.rstrip(",;)")
    if shown[len(stripped_shown):] != printed[len(stripped_printed):]:
        return False
    return any(kind.fullmatch(stripped_shown) and kind.fullmatch(stripped_printed) for kind in KINDS.values())
