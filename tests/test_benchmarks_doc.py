"""BENCHMARKS.md opens with one table of where every figure stands today, above the journal of
every run. The journal grows one section a session; these tests keep the table from rotting as it
does: each row links to a heading that exists, has every column filled and a command that runs a
script that exists, and each section of the journal that measured something is linked from a row
unless a later section named here measured the same figures again."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from support.processes import REPO

DOC = REPO / "BENCHMARKS.md"
BENCH = REPO / "bench"
COLUMNS = ["what is measured", "atomq", "its peer in the same run", "goal", "date", "command"]
HISTORY = "history"

# Sections of the journal no row links to: each one's figures were measured again, on later code, by
# the section it names (which a row must link to).
SUPERSEDED = {
    # The library's send and get+ack ratios against raw Redis; the later run has them on today's scripts.
    "queue-core-benchthroughputpy":
        "one-tenant-cannot-stall-the-node-request-bounds-the-matcher-slow-clients-retries-2026-11-27",
    # HTTP send and get+ack beside RabbitMQ, measured again with the atomq client, JetStream and consume.
    "http-path-benchthroughputpy": "every-goal-of-issue-17-one-run-each",
    # The echo-service on Spark and on fork at batches of 500, measured again at the demo's 1,000.
    "the-echo-service-on-spark-benchspark_echopy": "every-goal-of-issue-17-one-run-each",
}

# Rows whose figure no script measures: a command cell of theirs says "no script: how it was timed".
NO_SCRIPT = {"validating-a-send-of-100-messages"}  # json.loads and the two parsers, under timeit by hand

HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
LINK = re.compile(r"\]\(#([^)]+)\)")
CODE = re.compile(r"`([^`]+)`")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Heading:
    level: int
    slug: str
    line: int


def _slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _headings(lines: list[str]) -> list[Heading]:
    """Every heading outside fenced code, with GitHub's anchor (a repeated one gains -1, -2, ...)."""
    found: list[Heading] = []
    seen: dict[str, int] = {}
    fenced = False
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else HEADING.match(line)
        if match:
            slug = _slug(match.group(2))
            if slug in seen:
                seen[slug] += 1
                slug = f"{slug}-{seen[slug]}"
            else:
                seen[slug] = 0
            found.append(Heading(len(match.group(1)), slug, number))
    return found


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _doc() -> tuple[list[str], list[Heading], list[list[str]]]:
    """The file's lines, its headings, and the rows of the table that opens it (header checked)."""
    lines = DOC.read_text().splitlines()
    headings = _headings(lines)
    first_table = next(n for n, line in enumerate(lines) if line.startswith("|"))
    end = next(n for n in range(first_table, len(lines)) if not lines[n].startswith("|"))
    assert _cells(lines[first_table]) == COLUMNS
    assert set(lines[first_table + 1].replace("|", "")) == {"-"}
    return lines, headings, [_cells(line) for line in lines[first_table + 2:end]]


def _history(headings: list[Heading]) -> list[Heading]:
    start = next(i for i, h in enumerate(headings) if h.slug == HISTORY)
    return headings[start + 1:]


def _row_slug(row: list[str]) -> str:
    links = LINK.findall(row[0])
    assert len(links) == 1, f"a row links to one section: {row[0]}"
    return links[0]


def test_a_short_intro_then_the_table_then_the_history() -> None:
    lines, headings, rows = _doc()
    assert [(h.level, h.slug) for h in headings[:2]] == [(1, "benchmarks"), (2, HISTORY)]
    first_table = next(n for n, line in enumerate(lines) if line.startswith("|"))
    intro = [line for line in lines[1:first_table] if line.strip()]
    assert 2 <= len(intro) <= 4, intro
    assert first_table + 2 + len(rows) < headings[1].line


def test_every_row_has_every_column_filled() -> None:
    _, _, rows = _doc()
    assert rows
    for row in rows:
        assert len(row) == len(COLUMNS), row
        assert all(row), f"an empty cell: {row}"
        assert DATE.fullmatch(row[4]), f"a date is YYYY-MM-DD: {row}"
        assert "—" not in (row[1], row[5]), f"atomq's figure and the command are never left out: {row}"


def test_every_row_links_to_a_heading_of_the_history() -> None:
    _, headings, rows = _doc()
    history = {h.slug for h in _history(headings)}
    for row in rows:
        assert _row_slug(row) in history, f"no such heading in the history: {row[0]}"


def _is_figure_row(line: str) -> bool:
    """A table row, not its separator, with a digit in it."""
    return line.startswith("|") and not set(line) <= set("|-: ") and re.search(r"\d", line) is not None


def _sections(lines: list[str], headings: list[Heading]) -> dict[str, tuple[set[str], bool]]:
    """Each top section of the history: the anchors it holds (its own and its subsections'), and
    whether it reports a measurement (a table row with a figure in it)."""
    history = _history(headings)
    tops = [h for h in history if h.level == 2]
    out: dict[str, tuple[set[str], bool]] = {}
    for i, top in enumerate(tops):
        end = tops[i + 1].line if i + 1 < len(tops) else len(lines)
        anchors = {h.slug for h in history if top.line <= h.line < end}
        measured = any(_is_figure_row(line) for line in lines[top.line:end])
        out[top.slug] = (anchors, measured)
    return out


def test_every_section_that_measured_something_is_linked_or_measured_again_later() -> None:
    lines, headings, rows = _doc()
    linked = {_row_slug(row) for row in rows}
    sections = _sections(lines, headings)
    order = [h.slug for h in headings]
    for slug, (anchors, measured) in sections.items():
        if slug in SUPERSEDED:
            later = SUPERSEDED[slug]
            assert not anchors & linked, f"{slug} is linked from a row: take it out of SUPERSEDED"
            assert later in linked and order.index(later) > order.index(slug), (slug, later)
        elif measured:
            assert anchors & linked, f"no row links to {slug} or its subsections"
    assert set(SUPERSEDED) <= set(sections)


def _script(command: str) -> Path:
    """The bench script a command runs (from the repository's root, or from bench/ after `cd bench &&`)."""
    words = shlex.split(command)
    base = REPO
    if words[:3] == ["cd", "bench", "&&"]:
        base, words = BENCH, words[3:]
    scripts = [word for word in words if word.endswith(".py")]
    assert len(scripts) == 1, command
    path = (base / scripts[0]).resolve()
    assert path.parent == BENCH and path.is_file(), f"no such bench script: {command}"
    return path


def _options_of(script: Path) -> str:
    """The text where a bench's options are declared: the script and its shared drivers."""
    return "\n".join(p.read_text() for p in [script, *sorted((BENCH / "drivers").glob("*.py"))])


def test_every_command_runs_a_bench_script_or_a_test_file_that_exists() -> None:
    _, _, rows = _doc()
    for row in rows:
        commands = CODE.findall(row[5])
        if not commands:
            assert _row_slug(row) in NO_SCRIPT and row[5].startswith("no script: "), row
            continue
        for command in commands:
            words = shlex.split(command)
            if "pytest" in words[0]:
                files = [word for word in words if word.endswith(".py")]
                assert files and all((REPO / f).is_file() and f.startswith("tests/") for f in files), command
                continue
            script = _script(command)
            declared = _options_of(script)
            for option in (word.split("=")[0] for word in words if word.startswith("--")):
                assert f'"{option}"' in declared, f"{script.name} has no {option}: {command}"
