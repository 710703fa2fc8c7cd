"""flask-smorest's Blueprint with this contract's choices made once.

Invalid input is 400 (webargs' default is 422), bodies are read through the
app's strict JSON (``atomq.api.strict_json``, not webargs' own parser), and
every view gets the services of its node.
"""

from __future__ import annotations

from typing import Any

from flask import Request, current_app
from flask_smorest import Blueprint
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request
from werkzeug.routing import BaseConverter

from atomq.api.schemas.common import NAME_PATTERN
from atomq.api.services import Services


class NameConverter(BaseConverter):
    """A queue or subscriber name in a path: documented with its pattern, matched loosely
    so that a name breaking the rule reaches the view and gets a 400 that says why."""

    DOC = {"type": "string", "pattern": NAME_PATTERN}


class Parser(FlaskParser):
    DEFAULT_VALIDATION_STATUS = 400

    def _raw_load_json(self, req: Request) -> Any:
        """The body as the app's JSON provider reads it; no body is no value, as webargs has it."""
        if not is_json_request(req) or not req.get_data(cache=True):
            return core.missing
        return req.get_json()


TENANT_HEADER = {
    "in": "header", "name": "X-Atomq-Tenant", "required": False,
    "schema": {"type": "string", "pattern": r"^t_[0-9a-f]{12}$"},
    "description": "with the owner key, the tenant the call acts for (then required); a tenant key ignores it",
}


class ApiBlueprint(Blueprint):
    """``tenant_scoped``: its routes act for a tenant, so they document ``X-Atomq-Tenant``."""

    ARGUMENTS_PARSER = Parser()

    def __init__(self, *args: Any, tenant_scoped: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_scoped = tenant_scoped

    def route(self, rule: str, *, parameters: list[Any] | None = None, **options: Any) -> Any:
        if self.tenant_scoped:
            parameters = [*(parameters or []), TENANT_HEADER]
        return super().route(rule, parameters=parameters, **options)


def services() -> Services:
    return current_app.extensions["atomq"]  # type: ignore[no-any-return]
