"""The rooms of the code stay rooms: read from the source itself, every module of ``atomq``.

A folder holds at most MAX_MODULES modules directly (more, and it wants rooms of its own); a
module holds at most MAX_LINES lines; no module imports another that imports it back, even
for type checking only (the two could not be read apart); the HTTP views do not talk to the
store themselves (they parse, call the platform, render); and the lower packages, the
platform and the tenants, import nothing of what is built on them.
"""

from __future__ import annotations

import ast
from collections import Counter
from functools import cache
from pathlib import Path

from support.processes import REPO

PACKAGE = REPO / "atomq"
MAX_MODULES = 20
MAX_LINES = 400
LOWER = ("atomq.platform", "atomq.tenants")
UPPER = ("atomq.api", "atomq.workers", "atomq.spark_workers", "atomq.node", "atomq.cli")
STORE_CALLS = {"call", "pipeline", "transaction", "evalsha", "register_script"}
"""Methods of redis-py's client and of ``Storage`` that reach the store."""


@cache
def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str) -> set[str]:
    """The modules of atomq that ``name`` imports, anywhere in it (inside functions and
    ``if TYPE_CHECKING:`` included)."""
    known, path, out = modules(), modules()[name], set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in known and target != name:
                out.add(target)
    return out


def cycles() -> list[list[str]]:
    """The groups of modules that import each other round (Tarjan's strongly connected components)."""
    graph = {name: imported(name) for name in modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for name in graph:
        if name not in index:
            visit(name)
    return found


def test_no_folder_holds_more_than_twenty_modules() -> None:
    per_folder = Counter(str(p.parent.relative_to(REPO)) for p in modules().values() if p.name != "__init__.py")
    assert {folder: n for folder, n in per_folder.items() if n > MAX_MODULES} == {}


def test_no_module_is_longer_than_four_hundred_lines() -> None:
    lengths = {name: len(p.read_text().splitlines()) for name, p in modules().items()}
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_no_two_modules_import_each_other_round() -> None:
    assert cycles() == []


def test_the_lower_packages_import_nothing_built_on_them() -> None:
    wrong = {name: sorted(t for t in imported(name) if t.startswith(UPPER))
             for name in modules() if name.startswith(LOWER)}
    assert {name: targets for name, targets in wrong.items() if targets} == {}


def test_the_http_views_do_not_talk_to_the_store() -> None:
    talking = {}
    for name, path in modules().items():
        if not name.startswith("atomq.api"):
            continue
        tree = ast.parse(path.read_text())
        reasons = [f"imports {a.name}" for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for a in node.names if a.name.split(".")[0] in ("redis", "fakeredis")]
        reasons += [f"imports from {node.module}" for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("redis", "fakeredis")]
        reasons += [f"calls .{node.func.attr}() at line {node.lineno}" for node in ast.walk(tree)
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in STORE_CALLS]
        if reasons:
            talking[name] = reasons
    assert talking == {}


def test_the_checks_see_what_they_check() -> None:
    """The reading of the source finds what is there: the platform's rooms, and the imports that
    bind them (so an empty answer above is not an empty reading)."""
    names = modules()
    assert {"atomq.platform.store.keys", "atomq.platform.queues.sending", "atomq.api.messages"} <= set(names)
    assert "atomq.platform.store.keys" in imported("atomq.platform.queues.sending")
    assert len(names) > 150
