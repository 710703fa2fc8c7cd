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

    def wild_edge(self, first: str) -> _Edge | None:
        """The edge whose run starts with the wildcard level ``first``."""
        return next((e for e in self.wild if e.levels[0] == first), None)


class _Edge:
    """A run of pattern levels (names, ``*``, ``abc*``) each matching one topic level, and where it
    leads: a run that no other pattern shares is one edge, however many levels it has."""

    __slots__ = ("levels", "node")

    def __init__(self, levels: tuple[str, ...], node: _Node) -> None:
        self.levels = levels
        self.node = node


def _matches(pattern_level: str, level: str) -> bool:
    if pattern_level.endswith("*"):  # '*' or 'abc*': a topic level holds no '*'
        return level.startswith(pattern_level[:-1])
    return pattern_level == level


class TopicMatcher:
    """The patterns of one tenant's queues; read by many threads, never changed after it is built.

    A trie on levels whose runs of levels that no two patterns share are one edge each (a radix
    tree): memory and build time grow with the patterns' text, not with a node a level, which a
    tenant's 12,000 patterns of 120 levels made 1.5 million nodes, a gigabyte and 30 s a worker."""

    def __init__(self, patterns: Mapping[str, Iterable[str]]) -> None:
        self._root = _Node()
        self.patterns = {queue: tuple(ps) for queue, ps in patterns.items()}
        for queue, ps in self.patterns.items():
            for p in ps:
                self._add(queue, p)

    def _add(self, queue: str, pattern: str) -> None:
        levels = pattern.split("/")
        rest = levels[-1] == ">"
        if rest:
            levels.pop()
        node, i = self._root, 0
        while i < len(levels):
            first = levels[i]
            edge = node.wild_edge(first) if first.endswith("*") else node.literal.get(first)
            if edge is None:
                edge = _Edge(tuple(levels[i:]), _Node())
                if first.endswith("*"):
                    node.wild.append(edge)
                else:
                    node.literal[first] = edge
                node, i = edge.node, len(levels)
                break
            shared = 1
            while shared < len(edge.levels) and i + shared < len(levels) and \
                    edge.levels[shared] == levels[i + shared]:
                shared += 1
            if shared < len(edge.levels):  # the new pattern leaves this run part way: split it there
                middle = _Node()
                tail = _Edge(edge.levels[shared:], edge.node)
                if tail.levels[0].endswith("*"):
                    middle.wild.append(tail)
                else:
                    middle.literal[tail.levels[0]] = tail
                edge.levels, edge.node = edge.levels[:shared], middle
            node, i = edge.node, i + shared
        (node.rest if rest else node.ending).add(queue)

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
