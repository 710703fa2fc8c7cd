"""The processes a listener may run: registered by the runtime owner, chosen by tenants.

A process is a callable taking an :class:`~atomq.workers.context.ExecutionContext`.
The runtime owner registers processes as entry points in the group
``atomq.processes`` (atomq registers its built-in ones the same way), or,
for a deployment without packaging, in the ``ATOMQ_PROCESSES`` environment
variable (``name=module:attribute,...``) of every node and worker. Tenants
deploy only registered names, so no tenant code runs on the shared workers.

A process may carry a ``validate_settings(settings)`` attribute that raises
InvalidInput for settings it cannot work with, so a bad listener is refused
when it is deployed rather than failing every execution.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from atomq.errors import InvalidInput

if TYPE_CHECKING:
    from atomq.workers.context import ExecutionContext

ENTRY_POINT_GROUP = "atomq.processes"
PROCESSES_ENV = "ATOMQ_PROCESSES"

Process = Callable[["ExecutionContext"], None]


def _from_env(value: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise InvalidInput(f"{PROCESSES_ENV} takes name=module:attribute items, not {item!r}",
                               field=PROCESSES_ENV)
        mapping[name.strip()] = target.strip()
    return mapping


@lru_cache(maxsize=1)
def registered() -> Mapping[str, str]:
    """Every registered process name and its ``module:attribute``."""
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}
    found.update(_from_env(os.environ.get(PROCESSES_ENV, "")))
    return found


def unknown_process(name: str) -> InvalidInput:
    known = ", ".join(sorted(registered()))
    return InvalidInput(f"process {name!r} is not registered on this platform (registered: {known})",
                        field="process")


def load(name: str) -> Process:
    """The process registered as ``name``; InvalidInput when there is none."""
    target = registered().get(name)
    if target is None:
        raise unknown_process(name)
    module, _, attribute = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def check(name: str, settings: dict[str, Any]) -> None:
    """Raises InvalidInput unless ``name`` is registered and accepts ``settings``."""
    validate = getattr(load(name), "validate_settings", None)
    if validate is not None:
        validate(settings)
