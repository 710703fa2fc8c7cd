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
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from atomq.errors import InvalidInput

if TYPE_CHECKING:
    from atomq.workers.context import ExecutionContext

Process = Callable[["ExecutionContext"], None]


class Registry:
    """The processes registered for one engine: entry points in ``group``, then ``env``."""

    def __init__(self, group: str, env: str, engine: str) -> None:
        self.group, self.env, self.engine = group, env, engine
        self._found: dict[str, str] | None = None

    def registered(self) -> Mapping[str, str]:
        """Every registered process name and its ``module:attribute`` (read once)."""
        if self._found is None:
            found = {ep.name: ep.value for ep in entry_points(group=self.group)}
            for item in filter(None, (part.strip() for part in os.environ.get(self.env, "").split(","))):
                name, sep, target = item.partition("=")
                if not sep or ":" not in target:
                    raise InvalidInput(f"{self.env} takes name=module:attribute items, not {item!r}",
                                       field=self.env)
                found[name.strip()] = target.strip()
            self._found = found
        return self._found

    def clear(self) -> None:
        """Reads the registrations again on next use (after the environment changed)."""
        self._found = None

    def load(self, name: str) -> Any:
        """The process registered as ``name``; InvalidInput (naming ``process``) when there is none."""
        target = self.registered().get(name)
        if target is None:
            known = ", ".join(sorted(self.registered()))
            raise InvalidInput(f"process {name!r} is not registered for the {self.engine} engine "
                               f"(registered: {known})", field="process")
        module, _, attribute = target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        return obj

    def check(self, name: str, settings: dict[str, Any]) -> None:
        """Raises InvalidInput unless ``name`` is registered and accepts ``settings``."""
        validate = getattr(self.load(name), "validate_settings", None)
        if validate is not None:
            validate(settings)


FORK = Registry("atomq.processes", "ATOMQ_PROCESSES", "fork")


def load(name: str) -> Process:
    """The fork engine's process registered as ``name``."""
    return FORK.load(name)  # type: ignore[no-any-return]
