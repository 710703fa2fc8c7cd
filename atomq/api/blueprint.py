"""flask-smorest's Blueprint with this contract's choices made once.

Invalid input is 400 (webargs' default is 422), and every view gets the
services of its node.
"""

from __future__ import annotations

from flask import current_app
from flask_smorest import Blueprint
from webargs.flaskparser import FlaskParser

from atomq.api.services import Services


class Parser(FlaskParser):
    DEFAULT_VALIDATION_STATUS = 400


class ApiBlueprint(Blueprint):
    ARGUMENTS_PARSER = Parser()


def services() -> Services:
    return current_app.extensions["atomq"]  # type: ignore[no-any-return]
