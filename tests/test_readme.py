"""README.md's two commands, as a newcomer runs them: CI runs the test command exactly as written,
and the two never install into one environment (the second would replace the atomq under the
node the first is serving, whose workers then fail to import it)."""

from __future__ import annotations

import re

from support.processes import REPO

FENCED = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
VENV = re.compile(r"python3 -m venv (\S+) &&")


def _readme_commands() -> tuple[str, str]:
    """The first two commands of the README: the one that serves, then the one that tests."""
    blocks = [b.strip() for b in FENCED.findall((REPO / "README.md").read_text())]
    serve, test = blocks[0], blocks[1]
    assert serve.endswith("atomq serve") and test.endswith("pytest"), (serve, test)
    return serve, test


def test_ci_runs_the_readme_test_command_as_written() -> None:
    _, test = _readme_commands()
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[-1] == test


def test_the_readme_serves_and_tests_from_environments_of_their_own() -> None:
    serve, test = _readme_commands()
    serve_env, test_env = VENV.match(serve), VENV.match(test)
    assert serve_env and test_env, (serve, test)
    assert serve_env.group(1) != test_env.group(1)
    assert f"{test_env.group(1)}/" not in serve and f"{serve_env.group(1)}/" not in test
