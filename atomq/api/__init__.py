"""The HTTP API of the main node: REST endpoints and the OpenAPI document.

``create_app(services)`` builds the Flask app around one node's services, with the message
routes' hot path in front of it (``atomq.api.hot_path``); ``atomq serve`` runs it in a
threaded WSGI server.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask_smorest import Api

from atomq import defaults, telemetry
from atomq.api import (
    auth,
    dead_letters,
    errors,
    health,
    listeners,
    messages,
    metrics,
    moves,
    queues,
    server,
    streams,
    tenants,
    topics,
)
from atomq.api.blueprint import NameConverter, TopicConverter
from atomq.api.dashboard import bp as dashboard_blueprint
from atomq.api.hot_path import HotPath
from atomq.api.key_checks import MAX_FAILED_KEY_CHECKS, MAX_FAILURES, KeyCheckThrottle
from atomq.api.latency import LatencyRecorder
from atomq.api.schemas.common import BulkSelector, ErrorSchema, Selection, Selector
from atomq.api.schemas.messages import ExtendSchema, NackSchema, OutgoingDocumentSchema, ReleaseSchema
from atomq.api.services import Services
from atomq.api.sqs import credentials
from atomq.api.sqs import front as sqs_front
from atomq.api.sqs.endpoint import bp as sqs_blueprint
from atomq.api.wire import strict_json


class AtomqApi(Api):  # type: ignore[misc]
    """flask-smorest's Api, documenting our error shape and leaving error handling to atomq.api.errors."""

    ERROR_SCHEMA = ErrorSchema

    def _register_error_handlers(self) -> None:
        errors.register(self._app)


def create_app(services: Services, config: dict[str, Any] | None = None) -> Flask:
    """The Flask app of one node, serving ``services``."""
    app = Flask("atomq")
    strict_json.install(app)
    app.config.update(
        API_TITLE="atomq",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        MAX_CONTENT_LENGTH=defaults.MAX_REQUEST_BYTES,
        JSON_SORT_KEYS=False,
        **{MAX_FAILED_KEY_CHECKS: MAX_FAILURES},
    )
    app.config.update(config or {})
    telemetry.instrument_app(app)  # first: the request's span is current in every hook after it
    app.extensions["atomq"] = services
    # A path is taken as it is sent: werkzeug's default merges "//" with a 308 to another path,
    # which sent /v1/topics//a/messages to topic "a" instead of refusing the empty level.
    app.url_map.merge_slashes = False
    app.url_map.converters["qname"] = NameConverter
    app.url_map.converters["topic"] = TopicConverter
    latency = LatencyRecorder(services.queues.storage)
    latency.install(app)
    app.extensions["atomq_latency"] = latency
    app.extensions["atomq_key_checks"] = KeyCheckThrottle(services.queues.storage, services.node_id,
                                                          app.config[MAX_FAILED_KEY_CHECKS])
    app.before_request(auth.authenticate)
    api = AtomqApi(app, spec_kwargs={"components": {"securitySchemes": {
        "bearer": {"type": "http", "scheme": "bearer", "description": "aq_<key id>_<secret>, or the owner key"}}},
        "security": [{"bearer": []}]})
    api.register_converter(NameConverter, lambda converter: dict(NameConverter.DOC))
    api.register_converter(TopicConverter, lambda converter: dict(TopicConverter.DOC))
    for module in (health, server, tenants, credentials, queues, messages, topics, dead_letters, moves,
                   listeners, streams):
        api.register_blueprint(module.blp)
    _document_one_of_rules(api)
    app.register_blueprint(dashboard_blueprint)  # pages for people: not in the OpenAPI document
    app.register_blueprint(metrics.blp)
    app.register_blueprint(sqs_blueprint)  # SQS's own protocols, signed with SigV4: not in the OpenAPI document
    sqs_front.install(app)
    app.wsgi_app = HotPath(app, app.wsgi_app)  # type: ignore[method-assign]
    return app


def _document_one_of_rules(api: AtomqApi) -> None:
    """States in the OpenAPI document the "exactly one of" rules that the
    schemas check in ``validates_schema``, which apispec cannot see."""
    components = api.spec.components.schemas
    for schema in (Selection, Selector, NackSchema, ExtendSchema, ReleaseSchema, BulkSelector, OutgoingDocumentSchema):
        name = schema.__name__.removesuffix("Schema")
        components[name]["oneOf"] = schema.ONE_OF
