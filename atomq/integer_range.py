"""The one check that a caller's value is a whole number within its bounds.

Settings, limits and request arguments come from JSON and from Python
callers alike; each is checked here, so that every refusal has one shape:
``InvalidInput`` naming the field, its message stating the rule.
"""

from __future__ import annotations

from atomq.errors import InvalidInput


def check_integer_range(value: object, field: str, least: int, most: int, *, rule: str | None = None) -> int:
    """Returns ``value`` if it is an int from ``least`` to ``most``, else raises InvalidInput.

    A bool is refused, though Python counts it an int: ``true`` is no count.
    The message reads "FIELD must be RULE"; RULE is "an integer from LEAST to
    MOST" unless the caller states it otherwise (as a bound of 2^53 reads better).
    """
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise InvalidInput(f"{field} must be {rule or f'an integer from {least} to {most}'}", field=field)
    return value
