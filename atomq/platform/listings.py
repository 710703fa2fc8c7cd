"""What a listing answers: one page of it, and the reasons a dead letter queue's letters were given.

Kept apart from ``atomq.platform.models``, which holds what a send or get carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Page:
    """One page of a listing; ``next`` is the cursor of the next page, or None."""

    items: list[Any]
    next: str | None


@dataclass(frozen=True)
class ReasonCount:
    """A reason dead letters were given, and how many of those counted were."""

    reason: str
    count: int


@dataclass(frozen=True)
class DeadLetterReasons:
    """The reasons present in a dead letter queue, the most frequent first: what an operator
    picks from to see, resend or delete the dead letters of one reason.

    Counted over the newest ``counted`` dead letters (a bounded read: there may be millions,
    each with any nack reason); ``complete`` when those were all of them and no reason was
    left out of ``reasons``.
    """

    reasons: list[ReasonCount]
    counted: int
    complete: bool
