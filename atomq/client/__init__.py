"""A small Python client for the atomq HTTP API, and the pieces of speaking it that work horses,
the Spark data source and the CLI share: the wire form of documents and messages (``wire``),
sends in batches (``BatchingSender``) and deliveries kept in flight (``Extender``).

``from atomq.client import AtomqClient`` is the documented import path.
"""

from atomq.client.answers import error_from_response
from atomq.client.batching import BatchingSender, Target
from atomq.client.extending import Extender
from atomq.client.http_client import AtomqClient

__all__ = ["AtomqClient", "BatchingSender", "Extender", "Target",
           "error_from_response"]
