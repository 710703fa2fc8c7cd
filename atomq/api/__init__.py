"""The HTTP API of the main node: REST endpoints, OpenAPI and the dashboard."""
