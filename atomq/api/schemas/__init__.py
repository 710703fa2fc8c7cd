"""Marshmallow schemas of the HTTP contract; the OpenAPI document is generated from them."""
