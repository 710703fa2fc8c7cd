"""docs/first-hour.md, followed as a new operator follows it: every command the page shows, in its
order, against a node of its own, and what each prints held to what the page shows (see
``support.console_page`` for what may differ from run to run). The page cannot drift from the
node, and it narrates no state that its own commands do not make."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.console_page import Transcript, commands
from support.processes import REPO
from support.served_node import ServeFactory

PAGE = REPO / "docs" / "first-hour.md"
STARTS_A_NODE = re.compile(r"\batomq serve(\s|$)")

READ_ONLY = ("server nodes", "server top", "tenants list", "listeners show", "dead-letters list",
             "dead-letters reasons", "queues list", "queues show", "browse")
"""Commands that change nothing: the figures they show come from samples the maintenance lease takes
every few seconds, or from work a listener does meanwhile, so each is asked again until it prints
what the page shows, or SETTLE_S passes."""
SETTLE_S = 60.0
COMMAND_TIMEOUT_S = 120.0

pytestmark = pytest.mark.slow


def _atomq_on_path(directory: Path) -> str:
    """A directory with an ``atomq`` that runs this checkout's atomq, as ``. .venv/bin/activate`` gives."""
    directory.mkdir()
    shim = directory / "atomq"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m atomq "$@"\n')
    shim.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ['PATH']}"


def _run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)


@pytest.mark.timeout(600)  # some thirty commands, a few waiting for the platform's next sample
def test_every_command_of_the_first_hour_prints_what_the_page_shows(serve: ServeFactory, tmp_path: Path) -> None:
    page = commands(PAGE)
    start = [c for c in page if STARTS_A_NODE.search(c.line)]
    assert len(start) == 1, "the page starts one node; the test starts it instead"
    node = serve()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATOMQ_")}
    env.update(PATH=_atomq_on_path(tmp_path / "bin"), ATOMQ_URL=node.url, ATOMQ_KEY=node.owner_key)
    transcript = Transcript()
    for command in page:
        if command in start:
            continue
        line = transcript.command(command.line)
        done = _run(line, tmp_path, env)
        if command.shown is None:
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            continue
        deadline = time.monotonic() + (SETTLE_S if any(f"atomq {r}" in line for r in READ_ONLY) else 0)
        while True:
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            why = transcript.mismatch(command.shown, done.stdout.splitlines())
            if why is None or time.monotonic() > deadline:
                break
            time.sleep(1)  # the next sample of the platform; the loop is bounded by SETTLE_S
            done = _run(line, tmp_path, env)
        assert why is None, f"$ {line}\n{why}\n(standard error: {done.stderr})"
