"""Topics and the patterns queues attract them with (Solace's syntax, as the seed broker uses it).

A topic is levels joined by ``/``. In a pattern a level ``*`` matches exactly
one level, ``abc*`` one level starting with ``abc``, and ``>`` as the last
level one or more levels. Matching walks a trie of the patterns by level, as
RabbitMQ keeps its topic bindings, so a publish costs what the levels of its
topic cost, not what every pattern of the tenant costs; runs of levels no two
patterns share are one edge, so the trie costs what the patterns' text does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from atomq import defaults
from atomq.errors import InvalidInput

_LEVEL = r"[A-Za-z0-9._-]+"
TOPIC_PATTERN = rf"^{_LEVEL}(?:/{_LEVEL})*$"
"""A topic, as a regular expression the OpenAPI document states too."""
_PATTERN_LEVEL = rf"(?:{_LEVEL}|[A-Za-z0-9._-]*\*)"
PATTERN_PATTERN = rf"^(?:{_PATTERN_LEVEL}/)*(?:{_PATTERN_LEVEL}|>)$"
"""A topic pattern (``*``, ``abc*`` and a last ``>`` allowed), as the OpenAPI document states it too."""
TOPIC_RULE = ("a topic is levels of letters, digits, '.', '_' and '-' joined by '/', such as orders/eu/42: no empty "
              "level, and no '*' or '>' (those are for the patterns queues attract)")
"""``TOPIC_PATTERN`` in words, for the error of a topic that breaks it."""
PATTERN_RULE = ("a topic pattern is levels of letters, digits, '.', '_' and '-' joined by '/', where a level may "
                "also be '*' (any one level), 'abc*' (one level starting with abc) or, as the last level, '>' "
                "(one or more levels), such as orders/*/eu or orders/>")
"""``PATTERN_PATTERN`` in words, for the error of a pattern that breaks it."""
_TOPIC = re.compile(TOPIC_PATTERN)
_PATTERN = re.compile(PATTERN_PATTERN)


def check_topic(value: object, field: str = "topic") -> str:
    """A topic to publish to: levels of ``[A-Za-z0-9._-]+`` joined by ``/``, no wildcards."""
    most = defaults.MAX_TOPIC_CHARS
    if not isinstance(value, str) or not 0 < len(value) <= most or not _TOPIC.fullmatch(value):
        raise InvalidInput(f"{field}: {TOPIC_RULE}, 1 to {most} characters", field=field)
    return value


def check_pattern(value: object, field: str = "topics") -> str:
    """A topic pattern: a topic whose levels may also be ``*``, ``abc*``, or ``>`` as the last one."""
    most = defaults.MAX_TOPIC_CHARS
    if isinstance(value, str) and 0 < len(value) <= most and _PATTERN.fullmatch(value):
        return value
    raise InvalidInput(f"{field}: {PATTERN_RULE}, 1 to {most} characters; {value!r} is not one", field=field)


def check_patterns(value: object, field: str = "topics") -> tuple[str, ...]:
    """A queue's patterns: a list of at most MAX_TOPICS_PER_QUEUE, repeats dropped, order kept."""
    most = defaults.MAX_TOPICS_PER_QUEUE
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or len(value) > most:
        raise InvalidInput(f"{field} must be a list of at most {most} topic patterns", field=field)
    return tuple(dict.fromkeys(check_pattern(p, field) for p in value))


class _Node:
    """A place in the trie: the edges that leave it, and the queues whose pattern ends here."""

    __slots__ = ("literal", "wild", "ending", "rest")

    def __init__(self) -> None:
        self.literal: dict[str, _Edge] = {}
        """Edges whose first level is a name, by that name."""
        self.wild: list[_Edge] = []
        """Edges whose first level is ``*`` or ``abc*``."""
        self.ending: set[str] = set()
        """Queues whose pattern ends here."""
        self.rest: set[str] = set()
        """Queues whose pattern has ``>`` after this level: one or more levels more."""

    def edge(self, first: str) -> _Edge | None:
        """The edge whose run starts with the level ``first`` (a name or a wildcard)."""
        if first.endswith("*"):
            return next((e for e in self.wild if e.levels[0] == first), None)
        return self.literal.get(first)

    def copy(self) -> _Node:
        """A node with the same edges and queues, to change while this one stays as it is."""
        out = _Node()
        out.literal, out.wild = dict(self.literal), list(self.wild)
        out.ending, out.rest = set(self.ending), set(self.rest)
        return out


class _Edge:
    """A run of pattern levels (names, ``*``, ``abc*``) each matching one topic level, and where it
    leads: a run that no other pattern shares is one edge, however many levels it has."""

    __slots__ = ("levels", "node")

    def __init__(self, levels: tuple[str, ...], node: _Node) -> None:
        self.levels = levels
        self.node = node


def _attach(node: _Node, edge: _Edge, replacing: _Edge | None = None) -> None:
    """Hangs ``edge`` from ``node``, in the place of ``replacing`` (which starts with the same level)."""
    first = edge.levels[0]
    if not first.endswith("*"):
        node.literal[first] = edge
    elif replacing is None:
        node.wild.append(edge)
    else:
        node.wild[node.wild.index(replacing)] = edge


def _detach(node: _Node, edge: _Edge) -> None:
    first = edge.levels[0]
    if first.endswith("*"):
        node.wild.remove(edge)
    else:
        del node.literal[first]


def _split(pattern: str) -> tuple[list[str], bool]:
    """A pattern's levels that match one topic level each, and whether ``>`` ends it."""
    levels = pattern.split("/")
    rest = levels[-1] == ">"
    if rest:
        levels.pop()
    return levels, rest


class _Writer:
    """Adds patterns to a trie and removes them, keeping it a radix tree: a node is the root, or
    where a pattern ends, or where runs part (two edges or more), so the trie of some patterns is
    the same however they came and went.

    A trie being built is changed in place. A trie that threads may be matching with is changed by
    path copying: a node or edge is copied the first time this writer changes it (once however
    many patterns it changes there), its parent then pointing at the copy; what no change reaches
    is shared with the old trie, which stays whole for the threads still reading it."""

    __slots__ = ("root", "_copying", "_made")

    def __init__(self, root: _Node, copying: bool) -> None:
        self._copying = copying
        self._made: set[object] = set()
        """The nodes and edges this writer made or copied: its own to change."""
        self.root = self._own(root)

    def _own(self, node: _Node) -> _Node:
        if not self._copying or node in self._made:
            return node
        copy = node.copy()
        self._made.add(copy)
        return copy

    def _new_node(self) -> _Node:
        node = _Node()
        if self._copying:
            self._made.add(node)
        return node

    def _new_edge(self, node: _Node, levels: tuple[str, ...], to: _Node) -> _Edge:
        """A new edge from ``node`` (this writer's own) along ``levels`` to ``to``."""
        edge = _Edge(levels, to)
        if self._copying:
            self._made.add(edge)
        _attach(node, edge)
        return edge

    def _step(self, node: _Node, edge: _Edge) -> _Edge:
        """``edge`` of ``node`` (this writer's own), made this writer's own to change."""
        if not self._copying or edge in self._made:
            return edge
        copy = _Edge(edge.levels, edge.node)
        self._made.add(copy)
        _attach(node, copy, replacing=edge)
        return copy

    def add(self, queue: str, pattern: str) -> None:
        levels, rest = _split(pattern)
        node, i = self.root, 0
        while i < len(levels):
            found = node.edge(levels[i])
            if found is None:
                node = self._new_edge(node, tuple(levels[i:]), self._new_node()).node
                break
            edge = self._step(node, found)
            shared = 1
            while shared < len(edge.levels) and i + shared < len(levels) and \
                    edge.levels[shared] == levels[i + shared]:
                shared += 1
            if shared < len(edge.levels):  # the new pattern leaves this run part way: split it there
                middle = self._new_node()
                self._new_edge(middle, edge.levels[shared:], edge.node)
                edge.levels, edge.node = edge.levels[:shared], middle
            else:
                edge.node = self._own(edge.node)
            node, i = edge.node, i + shared
        (node.rest if rest else node.ending).add(queue)

    def remove(self, queue: str, pattern: str) -> None:
        """Takes ``queue``'s ``pattern`` (one it holds) out, then the nodes and edges only it
        needed: an edge to a node left with nothing goes, and a node left with no queue and one
        edge joins the run into it with the run out of it."""
        levels, rest = _split(pattern)
        path: list[tuple[_Node, _Edge]] = []
        node, i = self.root, 0
        while i < len(levels):
            found = node.edge(levels[i])
            assert found is not None, "a pattern the trie holds has its path in it"
            edge = self._step(node, found)
            edge.node = self._own(edge.node)
            path.append((node, edge))
            node, i = edge.node, i + len(edge.levels)
        (node.rest if rest else node.ending).discard(queue)
        while path:
            parent, edge = path.pop()
            child = edge.node
            if child.ending or child.rest:
                return
            edges = [*child.literal.values(), *child.wild]
            if not edges:
                _detach(parent, edge)
                continue  # the parent lost an edge: it may be left with one, or none
            if len(edges) == 1:
                edge.levels, edge.node = edge.levels + edges[0].levels, edges[0].node
            return


def _matches(pattern_level: str, level: str) -> bool:
    if pattern_level.endswith("*"):  # '*' or 'abc*': a topic level holds no '*'
        return level.startswith(pattern_level[:-1])
    return pattern_level == level


class TopicMatcher:
    """The patterns of one tenant's queues; read by many threads, never changed after it is built.

    A trie on levels whose runs of levels that no two patterns share are one edge each (a radix
    tree): memory and build time grow with the patterns' text, not with a node a level, which a
    tenant's 12,000 patterns of 120 levels made 1.5 million nodes, a gigabyte and 30 s a worker.

    A change of some queues' patterns makes the next matcher with :meth:`updated`, which costs what
    moved (the paths of the patterns taken out and put in), not what the tenant holds: at 10,000
    patterns of 120 levels a rebuild is 0.15 s of a worker's CPU, repeated by every worker at every
    change, an update after one queue's 100 patterns changed 5 ms (BENCHMARKS.md, issue 30)."""

    def __init__(self, patterns: Mapping[str, Iterable[str]]) -> None:
        self.patterns = {queue: tuple(dict.fromkeys(ps)) for queue, ps in patterns.items()}
        writer = _Writer(_Node(), copying=False)
        for queue, ps in self.patterns.items():
            for p in ps:
                writer.add(queue, p)
        self._root = writer.root

    def updated(self, changes: Mapping[str, Iterable[str]]) -> TopicMatcher:
        """A matcher of these patterns but those of the queues in ``changes``, which attract what
        it says instead (nothing: a removed queue). This one is left as it was, sharing with the
        new one whatever the change did not reach."""
        writer = _Writer(self._root, copying=True)
        patterns = dict(self.patterns)
        for queue, ps in changes.items():
            new = tuple(dict.fromkeys(ps))
            old = set(patterns.pop(queue, ()))
            for p in old.difference(new):
                writer.remove(queue, p)
            for p in new:
                if p not in old:
                    writer.add(queue, p)
            if new:
                patterns[queue] = new
        out = TopicMatcher({})
        out.patterns, out._root = patterns, writer.root
        return out

    def match(self, topic: str) -> list[str]:
        """The queues, sorted, with a pattern that matches ``topic`` (each once)."""
        levels = topic.split("/")
        count = len(levels)
        found: set[str] = set()
        todo = [(self._root, 0)]
        while todo:
            node, i = todo.pop()
            if i == count:
                found |= node.ending
                continue
            found |= node.rest  # '>' takes this level and every one after it
            level = levels[i]
            edges = [e for e in node.wild if _matches(e.levels[0], level)]
            exact = node.literal.get(level)
            if exact is not None:
                edges.append(exact)
            for edge in edges:
                run = edge.levels
                end = i + len(run)
                if end <= count and all(_matches(p, t) for p, t in zip(run[1:], levels[i + 1:end])):
                    todo.append((edge.node, end))
        return sorted(found)
