"""flask-smorest's Blueprint with this contract's choices made once.

Invalid input is 400 (webargs' default is 422), and every view gets the
services of its node.
"""

from __future__ import annotations

from flask import current_app
from flask_smorest import Blueprint
from webargs.flaskparser import FlaskParser
from werkzeug.routing import BaseConverter

from atomq.api.schemas.common import NAME_PATTERN
from atomq.api.services import Services


class NameConverter(BaseConverter):
    """A queue or subscriber name in a path: documented with its pattern, matched loosely
    so that a name breaking the rule reaches the view and gets a 400 that says why."""

    DOC = {"type": "string", "pattern": NAME_PATTERN}


class Parser(FlaskParser):
    DEFAULT_VALIDATION_STATUS = 400


class ApiBlueprint(Blueprint):
    ARGUMENTS_PARSER = Parser()


def services() -> Services:
    return current_app.extensions["atomq"]  # type: ignore[no-any-return]
