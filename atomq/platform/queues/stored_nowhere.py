"""Warnings for messages a send or publish accepted and stored nowhere.

A send to a publish/subscribe queue copies each message to the subscribers
the queue has at that moment, and a publish stores it in the queues whose
patterns match its topic: with no subscriber, or no queue, the request
succeeds, its messages get ids, and nothing is stored. That is the contract
(a subscriber sees only what is sent after it exists), but to the sender it
looks like success, so the answer says so: one warning a queue or topic whose
messages went nowhere, with how many they were and what to do about it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from atomq.platform.queues.sending import PublishedMany

NO_SUBSCRIBERS = "no_subscribers"
"""A send or publish reached only publish/subscribe queues, and none of them has a subscriber."""
NO_QUEUE_ATTRACTS_TOPIC = "no_queue_attracts_topic"
"""A publish's topic matches no queue's pattern."""


@dataclass(frozen=True)
class StoredNowhere:
    """Messages of one request, to one queue or one topic, that were stored nowhere."""

    code: str
    message: str
    """For people: what happened and what to do."""
    messages: int
    """How many of the request's messages it concerns."""
    queue: str | None = None
    topic: str | None = None
    queues: tuple[str, ...] = ()
    """A topic's queues, all of them publish/subscribe queues without subscribers."""

    def as_dict(self) -> dict[str, Any]:
        """The warning as an answer carries it: its fields, without those that do not apply."""
        return {name: list(value) if isinstance(value, tuple) else value
                for name, value in asdict(self).items() if value not in (None, ())}


def _count(n: int) -> str:
    return "the message was" if n == 1 else f"the {n} messages were"


def after_send(queue: str, messages: int, copies: int) -> list[StoredNowhere]:
    """A send of ``messages`` to ``queue`` that made ``copies``: one warning when it stored none."""
    if copies or not messages:
        return []
    return [StoredNowhere(
        NO_SUBSCRIBERS,
        f"queue {queue} is publish/subscribe and has no subscribers, so {_count(messages)} stored nowhere: a "
        f"subscriber gets only what is sent after it exists. Add one first (PUT /v1/queues/{queue}/subscribers/"
        f"NAME, or atomq subscribers add {queue} NAME), then send again",
        messages, queue=queue)]


def after_publish(topic: str, queues: Sequence[str], messages: int, copies: int) -> list[StoredNowhere]:
    """A publish of ``messages`` to ``topic`` that reached ``queues`` and made ``copies``: one warning
    when it stored none."""
    if copies or not messages:
        return []
    if not queues:
        return [StoredNowhere(
            NO_QUEUE_ATTRACTS_TOPIC,
            f"no queue attracts topic {topic}, so {_count(messages)} stored nowhere. Give a queue a pattern "
            f"that matches it first (\"topics\" in PUT /v1/queues/NAME, or atomq queues create NAME --topic "
            f"PATTERN), then publish again",
            messages, topic=topic)]
    return [StoredNowhere(
        NO_SUBSCRIBERS,
        f"topic {topic} reaches only publish/subscribe queues without subscribers ({', '.join(queues)}), so "
        f"{_count(messages)} stored nowhere: a subscriber gets only what is sent after it exists. Add one first "
        f"(atomq subscribers add {queues[0]} NAME), then publish again",
        messages, topic=topic, queues=tuple(queues))]


def after_publish_many(topics: Sequence[str], done: PublishedMany) -> list[StoredNowhere]:
    """A publish of each message to its own topic (``topics[i]`` for message i): one warning a
    topic whose messages were stored nowhere, in the order of the topics' first messages."""
    return [w for topic, n in Counter(topics).items()
            for w in after_publish(topic, done.topics.get(topic, []), n, done.copies.get(topic, 0))]
