"""Topics and the patterns queues attract them with (Solace's syntax, as the seed broker uses it).

A topic is levels joined by ``/``. In a pattern a level ``*`` matches exactly
one level, ``abc*`` one level starting with ``abc``, and ``>`` as the last
level one or more levels. Matching walks a trie of the patterns by level, as
RabbitMQ keeps its topic bindings, so a publish costs what the levels of its
topic cost, not what every pattern of the tenant costs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from atomq import defaults
from atomq.errors import InvalidInput

_LEVEL = r"[A-Za-z0-9._-]+"
TOPIC_PATTERN = rf"^{_LEVEL}(?:/{_LEVEL})*$"
"""A topic, as a regular expression the OpenAPI document states too."""
_PATTERN_LEVEL = rf"(?:{_LEVEL}|[A-Za-z0-9._-]*\*)"
PATTERN_PATTERN = rf"^(?:{_PATTERN_LEVEL}/)*(?:{_PATTERN_LEVEL}|>)$"
"""A topic pattern (``*``, ``abc*`` and a last ``>`` allowed), as the OpenAPI document states it too."""
_TOPIC = re.compile(TOPIC_PATTERN)
_PATTERN = re.compile(PATTERN_PATTERN)


def check_topic(value: object, field: str = "topic") -> str:
    """A topic to publish to: levels of ``[A-Za-z0-9._-]+`` joined by ``/``, no wildcards."""
    most = defaults.MAX_TOPIC_CHARS
    if not isinstance(value, str) or not 0 < len(value) <= most or not _TOPIC.fullmatch(value):
        raise InvalidInput(f"{field} must be 1 to {most} characters of levels [A-Za-z0-9._-]+ joined by '/' "
                           "(no '*' or '>': those are for the patterns queues attract)", field=field)
    return value


def check_pattern(value: object, field: str = "topics") -> str:
    """A topic pattern: a topic whose levels may also be ``*``, ``abc*``, or ``>`` as the last one."""
    most = defaults.MAX_TOPIC_CHARS
    if isinstance(value, str) and 0 < len(value) <= most and _PATTERN.fullmatch(value):
        return value
    raise InvalidInput(f"{field} holds topic patterns of 1 to {most} characters: levels [A-Za-z0-9._-]+ joined "
                       "by '/', where a level may also be '*' (one level), 'abc*' (one level starting with abc) "
                       f"or, last, '>' (one or more levels); {value!r} is not one", field=field)


def check_patterns(value: object, field: str = "topics") -> tuple[str, ...]:
    """A queue's patterns: a list of at most MAX_TOPICS_PER_QUEUE, repeats dropped, order kept."""
    most = defaults.MAX_TOPICS_PER_QUEUE
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or len(value) > most:
        raise InvalidInput(f"{field} must be a list of at most {most} topic patterns", field=field)
    return tuple(dict.fromkeys(check_pattern(p, field) for p in value))


@dataclass
class _Node:
    exact: dict[str, _Node] = field(default_factory=dict)
    prefixed: list[tuple[str, _Node]] = field(default_factory=list)
    any_one: _Node | None = None
    ending: set[str] = field(default_factory=set)
    """Queues whose pattern ends here."""
    rest: set[str] = field(default_factory=set)
    """Queues whose pattern has ``>`` after this level: one or more levels more."""


class TopicMatcher:
    """The patterns of one tenant's queues; read by many threads, never changed after it is built."""

    def __init__(self, patterns: Mapping[str, Iterable[str]]) -> None:
        self._root = _Node()
        self.patterns = {queue: tuple(ps) for queue, ps in patterns.items()}
        for queue, ps in self.patterns.items():
            for p in ps:
                self._add(queue, p)

    def _add(self, queue: str, pattern: str) -> None:
        node = self._root
        for level in pattern.split("/"):
            if level == ">":
                node.rest.add(queue)
                return
            if level == "*":
                node.any_one = node.any_one or _Node()
                node = node.any_one
            elif level.endswith("*"):
                prefix = level[:-1]
                child = next((n for p, n in node.prefixed if p == prefix), None)
                if child is None:
                    child = _Node()
                    node.prefixed.append((prefix, child))
                node = child
            else:
                node = node.exact.setdefault(level, _Node())
        node.ending.add(queue)

    def match(self, topic: str) -> list[str]:
        """The queues, sorted, with a pattern that matches ``topic`` (each once)."""
        levels = topic.split("/")
        found: set[str] = set()
        frontier = [self._root]
        for i, level in enumerate(levels):
            following: list[_Node] = []
            for node in frontier:
                found |= node.rest  # '>' takes this level and every one after it
                child = node.exact.get(level)
                if child is not None:
                    following.append(child)
                if node.any_one is not None:
                    following.append(node.any_one)
                following.extend(n for p, n in node.prefixed if level.startswith(p))
            frontier = following
            if not frontier:
                break
        else:
            for node in frontier:
                found |= node.ending
        return sorted(found)
